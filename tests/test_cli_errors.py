"""Every command's mistakes in one style: one `error:` line on stderr, exit 2, no traceback and no Rich box, for
click's own usage errors (a bad option value, a missing argument, an unknown option or command: routed through
ddpcli.cli.console.usage_errors) as for ddpcli's (UserError)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import COMMANDS, app

runner = CliRunner()

# One bad value per command (every command is here: test_every_command_has_a_case), and what the line must name.
BAD = {
    "plan": (["--lr", "fast"], "--lr"),
    "launch": (["--timeout", "soon"], "--timeout"),
    "compare": (["--atol", "tiny"], "--atol"),
    "export": (["nowhere"], "nowhere"),
    "slurm": (["--port", "0"], "--port"),
    "init": (["--help-timeout", "long"], "--help-timeout"),
    "port": ([], "SCRIPT"),  # a missing argument
}
OTHERS = {
    "unknown option": (["plan", "--bogus"], "--bogus"),
    "unknown root option": (["--bogus"], "--bogus"),
    "unknown command": (["nosuch"], "nosuch"),
    "option without its value": (["plan", "--lr"], "--lr"),
    "missing run directory": (["launch", "--resume", "/nonexistent/run"], "/nonexistent/run"),
    "folder that is no run": (["launch", "--resume", "."], "no run.json"),
}


def assert_one_error_line(args: list[str], names: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert names in lines[0], lines[0]
    for noise in ("Traceback", "╭", "Usage:", "[Errno"):
        assert noise not in result.output, result.output
    assert result.stdout == ""


def test_every_command_has_a_case() -> None:
    assert set(BAD) == set(COMMANDS)


@pytest.mark.parametrize("name", list(BAD))
def test_bad_value(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    args, names = BAD[name]
    assert_one_error_line([name, *args], names)


@pytest.mark.parametrize("case", list(OTHERS))
def test_other_usage_errors(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    args, names = OTHERS[case]
    assert_one_error_line(args, names)


def test_error_line_points_to_the_commands_help() -> None:
    result = runner.invoke(app, ["plan", "--lr", "fast"])
    assert "ddpcli plan --help" in result.stderr


def test_no_arguments_still_prints_the_help() -> None:
    result = runner.invoke(app, [])
    assert "Usage: ddpcli" in result.output and "error:" not in result.output


def test_ctrl_c_inside_a_command_is_one_line_and_exit_130_even_where_a_library_turns_it_into_another_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49.22: Ctrl-C while init read a long script ended in a ~500-line traceback, `KeyError: IndentedBlock(...)`
    (libcst turns the interrupt into a KeyError of the node it was visiting), exit 1."""
    from typer.testing import CliRunner

    from ddpcli.cli.app import app

    script = tmp_path / "train.py"
    script.write_text("import torch\n", encoding="utf-8")

    def interrupted(*args: object, **kwargs: object) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise KeyError("IndentedBlock(...)") from None  # what libcst's visitor raises while it is interrupted

    monkeypatch.setattr("ddpcli.init.inspect_script.script_facts", interrupted)
    result = CliRunner().invoke(app, ["init", str(script), "-o", str(tmp_path / "e.toml")])
    assert (result.exit_code, result.stderr) == (130, "error: interrupted\n")
    assert not (tmp_path / "e.toml").exists()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["init", "train.py", "--nproc-per-node", "999999"],
            "error: --nproc-per-node '999999': at most 1024 processes a node (a world size in the wrong field?)\n",
        ),
        (
            ["init", "train.py", "--nproc-per-node", "2,1"],
            "error: --nproc-per-node '2,1': expected whole numbers of 2 or more, comma-separated (the baseline is the "
            "1-process run)\n",
        ),
        (
            ["plan", "--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", "2000"],
            "error: --nproc-per-node '2000': at most 1024 processes a node (a world size in the wrong field?)\n",
        ),
    ],
)
def test_a_process_count_out_of_bounds_names_the_flag_not_a_file_never_written(
    tmp_path: Path, command: list[str], expected: str
) -> None:
    """Issue 49.23: `init --nproc-per-node 999999 -o e.toml` said "error: e.toml: experiments[0].nproc_per_node:
    ..." about a file it never wrote."""
    (tmp_path / "train.py").write_text("import torch\n", encoding="utf-8")
    command = [str(tmp_path / part) if part == "train.py" else part for part in command]
    output = ["-o", str(tmp_path / "e.toml")] if command[0] == "init" else []
    result = CliRunner().invoke(app, [*command, *output])
    assert (result.exit_code, result.stderr) == (2, expected)
    assert not (tmp_path / "e.toml").exists()
