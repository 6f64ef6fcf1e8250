"""Scripts with subcommands (argparse subparsers, click groups): init takes the subcommand after `--`, reads that
subcommand's own flags and wires them; without one it exits 2 naming the subcommands."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.experiment.planning import load_plan
from tests.conftest import REPO

runner = CliRunner()
SCRIPTS = REPO / "tests" / "init_scripts"


def init(tmp_path: Path, name: str, *args: str) -> tuple[int, str, Path]:
    shutil.copy(SCRIPTS / name, tmp_path / name)
    output = tmp_path / "experiments.toml"
    result = runner.invoke(app, ["init", str(tmp_path / name), "-o", str(output), "--nproc-per-node", "2", *args])
    return result.exit_code, result.stderr, output


@pytest.mark.parametrize(
    ("name", "subcommand", "wired"),
    [
        ("argparse_subcommands.py", "train", ["--batch-size", "{per_device_batch_size}", "--lr", "{lr}"]),
        ("click_group.py", "fit", ["--batch-size", "{per_device_batch_size}", "--learning-rate", "{lr}"]),
    ],
)
def test_the_subcommand_after_dashes_is_read_and_its_flags_wired(
    tmp_path: Path, name: str, subcommand: str, wired: list[str]
) -> None:
    code, err, output = init(tmp_path, name, "--", subcommand)
    assert code == 0, err
    plan = load_plan(output)
    args = plan.baseline.launch.args
    assert args[0] == subcommand and args[1 : 1 + len(wired)] == wired
    assert plan.baseline.stand_ins == ()
    result = runner.invoke(app, ["launch", str(output), "--dry-run"])
    assert result.exit_code == 0, result.stderr
    assert f"{name} {subcommand} --batch-size" in result.stdout


def test_flags_before_the_subcommand_stay_before_it(tmp_path: Path) -> None:
    code, err, output = init(tmp_path, "argparse_subcommands.py", "--", "--verbose", "train")
    assert code == 0, err
    assert load_plan(output).baseline.launch.args[:3] == ["--verbose", "train", "--batch-size"]


@pytest.mark.parametrize(("name", "names"), [("argparse_subcommands.py", "train, eval"), ("click_group.py", "fit")])
def test_without_a_subcommand_init_exits_2_naming_them(tmp_path: Path, name: str, names: str) -> None:
    code, err, output = init(tmp_path, name)
    assert code == 2
    assert names in err and "after --" in err and len(err.strip().splitlines()) == 1
    assert not output.exists()
