"""One vocabulary across commands: docs/options.md lists every option of every command as the commands define
them, and an option spelled the same in two commands takes the same value and means the same thing."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.cli.reference import OptionRow, option_rows, options_markdown
from tests.conftest import REPO, write_toml

runner = CliRunner()
OPTIONS_MD = REPO / "docs" / "options.md"

# What an option means, as words its help says in every command that has it (case-insensitive). A spelling that a
# second command takes up must be added here: test_every_shared_spelling_has_a_meaning.
MEANINGS = {
    "--help": "show this message",
    "--only": "only this run",
    "--json": "json",
    "--all": "every run under a root",
    "--baseline": "name of the run",
    "--runs-dir": "(default: the file's runs_dir)",
    "--rdzv-endpoint": "host:port of the rendezvous",
    "--per-device-batch-size": "the one-device batch that worked",
    "--lr": "the one-device learning rate",
    "--nproc-per-node": "processes (gpus) per node",
    "--nnodes": "(n or min:max",
    "--output, -o": "script|file",
    "--force": "overwrite",
}


def shared() -> dict[str, list[OptionRow]]:
    by_spelling: dict[str, list[OptionRow]] = defaultdict(list)
    for row in option_rows():
        if row.kind != "positional":
            by_spelling[", ".join(sorted(row.spelling.split(", ")))].append(row)
    return {spelling: rows for spelling, rows in by_spelling.items() if len(rows) > 1}


def test_options_md_matches_the_commands() -> None:
    assert OPTIONS_MD.read_text(encoding="utf-8") == options_markdown(), (
        "docs/options.md is stale: python -m ddpcli.cli.reference > docs/options.md"
    )


def test_options_md_lists_every_option_of_every_command() -> None:
    text = OPTIONS_MD.read_text(encoding="utf-8")
    for row in option_rows():
        assert f"| {row.command} | `{row.spelling}` |" in text, row


def test_every_shared_spelling_has_a_meaning() -> None:
    assert set(shared()) == {", ".join(sorted(spelling.split(", "))) for spelling in MEANINGS}


@pytest.mark.parametrize("spelling", sorted(shared()))
def test_same_spelling_same_value(spelling: str) -> None:
    rows = shared()[spelling]
    forms = {(row.kind, row.value, row.repeatable) for row in rows}
    assert len(forms) == 1, {row.command: (row.kind, row.value, row.repeatable) for row in rows}


@pytest.mark.parametrize("spelling", sorted(shared()))
def test_same_spelling_same_meaning(spelling: str) -> None:
    meaning = next(words for name, words in MEANINGS.items() if ", ".join(sorted(name.split(", "))) == spelling)
    for row in shared()[spelling]:
        assert re.search(meaning if "|" in meaning else re.escape(meaning), row.help, re.IGNORECASE), row


def test_plan_quick_form_takes_world_sizes_as_init_does() -> None:
    args = ["plan", "--per-device-batch-size", "16", "--lr", "0.1", "--json"]
    result = runner.invoke(app, [*args, "--nproc-per-node", "2,4", "--nproc-per-node", "8"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["experiments"]
    assert [(run["name"], run["world_size"]) for run in runs] == [("target-2", 2), ("target-4", 4), ("target-8", 8)]
    result = runner.invoke(app, [*args, "--nproc-per-node", "4"])
    assert [run["name"] for run in json.loads(result.stdout)["experiments"]] == ["target"]


@pytest.mark.parametrize("value", ["2,x", "0", ""])
def test_plan_quick_form_bad_world_size_is_one_line(value: str) -> None:
    result = runner.invoke(app, ["plan", "--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", value])
    assert result.exit_code == 2 and result.stderr.startswith("error: --nproc-per-node"), result.output
    assert result.stderr.count("\n") == 1


def test_plan_quick_form_nnodes_as_launch_reads_it() -> None:
    args = ["plan", "--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", "4", "--json"]
    result = runner.invoke(app, [*args, "--nnodes", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["experiments"][0]["world_size"] == 8
    result = runner.invoke(app, [*args, "--nnodes", "3:1"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --nnodes"), result.output


SLURM_FILE = """
[defaults]
script = "train.py"

[baseline]
name = "1x16"
per_device_batch_size = 16
lr = 0.1

[[experiments]]
name = "4x16"
nproc_per_node = 4
"""


def test_slurm_only_is_the_repeatable_only_given_once(tmp_path: Path) -> None:
    path = write_toml(tmp_path, SLURM_FILE)
    (tmp_path / "train.py").write_text("print('hi')\n")
    result = runner.invoke(app, ["slurm", str(path), "--only", "4x16"])
    assert result.exit_code == 0, result.output
    assert "#SBATCH" in result.stdout
    result = runner.invoke(app, ["slurm", str(path), "--only", "4x16", "--only", "1x16"])
    assert result.exit_code == 2 and "one job runs one run" in result.stderr, result.output
    assert result.stderr.count("\n") == 1
