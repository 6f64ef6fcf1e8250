"""`ddpcli port` as a user runs it: what it writes and where, what it never writes, its --diff and --json, and its
refusals (one line a reason, exit 2, nothing written)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.port.records import MODULE_JSON_KEYS, PORT_JSON_KEYS
from tests.conftest import REPO
from tests.contract_keys import PORT_CHANGE_KEYS, PORT_MODULE_KEYS, PORT_NOT_PORTED_KEYS
from tests.contract_keys import PORT_JSON_KEYS as CONTRACT

runner = CliRunner()
EXAMPLE = REPO / "ddpcli" / "examples" / "single_device.py"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "single_device.py"
    shutil.copy(EXAMPLE, path)
    return path


def port(*args: object):
    return runner.invoke(app, ["port", *map(str, args)])


def test_it_writes_stem_ddp_beside_the_script_and_lists_changes_then_the_next_commands(script: Path) -> None:
    before = script.read_text(encoding="utf-8")
    result = port(script)
    assert result.exit_code == 0, result.output
    out = script.with_name("single_device_ddp.py")
    assert out.is_file() and script.read_text(encoding="utf-8") == before
    assert "_DDPModel(model)" in out.read_text(encoding="utf-8")
    assert "ddp_wrap" in result.stdout and "sampler" in result.stdout and "set_epoch" in result.stdout
    assert f"next: ddpcli init {out}, then ddpcli launch" in result.stdout


def test_it_refuses_an_existing_output_without_force(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "ported.py"
    out.write_text("mine\n", encoding="utf-8")
    result = port(script, "-o", out)
    assert result.exit_code == 2 and "exists: --force overwrites it" in result.stderr
    assert out.read_text(encoding="utf-8") == "mine\n"
    assert port(script, "-o", out, "--force").exit_code == 0
    assert "_ddp_setup()" in out.read_text(encoding="utf-8")


def test_a_file_created_while_porting_is_not_replaced_without_force(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49.18: OUT was checked before the port and written after it, with no exclusive create: another process
    (or a second port to the same -o) creating it in between had it replaced, exit 0."""
    from ddpcli.port import engine

    out = tmp_path / "ported.py"
    ported = engine.port_program

    def racing(path: Path) -> engine.Program:
        result = ported(path)
        out.write_text("theirs\n", encoding="utf-8")  # another process creates OUT while this one ports
        return result

    monkeypatch.setattr("ddpcli.cli.commands.port.port_program", racing)
    result = port(script, "-o", out)
    assert result.exit_code == 2 and f"{out} exists (created while porting): --force overwrites it" in result.stderr
    assert out.read_text(encoding="utf-8") == "theirs\n"


@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hardlink"])
def test_it_never_writes_the_script_itself_even_with_force(script: Path, tmp_path: Path, spelling: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    before = script.read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    target: Path = {"same": script, "relative": Path("sub/../single_device.py"), "symlink": tmp_path / "link.py",
                    "hardlink": tmp_path / "hard.py"}[spelling]  # fmt: skip
    (tmp_path / "sub").mkdir()
    if spelling == "symlink":
        target.symlink_to(script)
    elif spelling == "hardlink":
        os.link(script, target)
    result = port(script, "-o", target, "--force")
    assert result.exit_code == 2 and "never writes the script it reads" in result.stderr
    assert script.read_text(encoding="utf-8") == before


def test_diff_prints_a_unified_diff_and_writes_nothing(script: Path) -> None:
    result = port(script, "--diff")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"--- {script}\n+++ {script.with_name('single_device_ddp.py')}\n")
    assert "+    if _ddp:\n+        model = _DDPModel(model)\n" in result.stdout
    assert sorted(p.name for p in script.parent.iterdir()) == ["single_device.py"]


def test_json_has_exactly_the_contract_keys(script: Path) -> None:
    result = port(script, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert tuple(data) == PORT_JSON_KEYS == CONTRACT
    contracts = (REPO / "docs" / "contracts.md").read_text(encoding="utf-8")
    assert "`script, output`" in contracts and "`line, kind, text`" in contracts and "`line, reason`" in contracts
    assert (PORT_CHANGE_KEYS, PORT_NOT_PORTED_KEYS) == (("line", "kind", "text"), ("line", "reason"))
    assert MODULE_JSON_KEYS == PORT_MODULE_KEYS and "`module, output, changes, not_ported`" in contracts
    assert data["modules"] == []  # the bundled example is one file
    assert (data["script"], data["output"]) == (str(script), str(script.with_name("single_device_ddp.py")))
    assert all(list(change) == ["line", "kind", "text"] for change in data["changes"])
    lines = script.read_text(encoding="utf-8").splitlines()
    wrap = next(change for change in data["changes"] if change["kind"] == "ddp_wrap")
    assert lines[wrap["line"] - 1].strip().startswith("optimizer = torch.optim.SGD(model.parameters()")
    assert data["not_ported"] == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (REPO / "ddpcli" / "examples" / "plain_ddp.py", ["already data-parallel: it starts a process group",
                                                         "already data-parallel: it wraps a model"]),
        (REPO / "tests" / "init_scripts" / "accelerate_cpu.py", ["written for accelerate", "--cpu"]),
        (REPO / "tests" / "observe_scripts" / "lightning_train.py", ["written for Lightning", "devices=N"]),
        (REPO / "tests" / "observe_scripts" / "hf_train.py", ["written for the Hugging Face Trainer"]),
        (REPO / "tests" / "init_scripts" / "click_train.py", ["no optimizer step found"]),
    ],
)  # fmt: skip
def test_refusals_exit_2_one_line_a_reason_nothing_written(tmp_path: Path, source: Path, expected: list[str]) -> None:
    script = tmp_path / source.name
    shutil.copy(source, script)
    result = port(script, "--json")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert all(line.startswith("error: ") for line in lines) and "Traceback" not in result.output
    assert all(any(word in line for line in lines) for word in expected), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == [script.name]


def test_not_python_and_a_missing_file_are_one_line_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ndef f(:\n", encoding="utf-8")
    result = port(broken)
    assert result.exit_code == 2 and "not valid Python" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "broken_ddp.py").exists()
    missing = port(tmp_path / "nope.py")
    assert missing.exit_code == 2 and "no such file" in missing.stderr


def test_the_readme_shows_the_real_diff_of_the_bundled_example(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(script.parent)
    result = port("single_device.py", "--diff")
    assert result.exit_code == 0
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"```diff\n{result.stdout}```" in readme
