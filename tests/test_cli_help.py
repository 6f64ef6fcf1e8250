"""Every command's `--help` at 80 columns reads the same way: a flag shows no value type (typer 0.29 writes
`--help <bool>` unless the flag's metavar is empty, see ddpcli.cli.app.house_style), no option name or word is cut
with an ellipsis, and the usage line writes positionals in one style (`SCRIPT`, `[FILE]`, `[RUNS]...`)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ddpcli.cli.app import COMMANDS, app

runner = CliRunner()
COMMAND_PATHS = [[], *([name] for name in COMMANDS)]


def help_text(path: list[str], width: int = 80) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout


def command(path: list[str]) -> Any:
    root = typer.main.get_command(app)
    if not path:
        return root
    return root.get_command(None, path[0])


def options(path: list[str]) -> list[Any]:
    cmd = command(path)
    context = cmd.make_context("ddpcli", [], resilient_parsing=True)
    return [param for param in cmd.get_params(context) if param.param_type_name == "option"]


def row_of(text: str, opt: str) -> str:
    """The help line that starts a row with `opt` (the first cell of the options table)."""
    rows = [line for line in text.splitlines() if re.match(rf"^│\s*{re.escape(opt)}(\s|,|$)", line)]
    assert rows, f"{opt} has no row of its own:\n{text}"
    return rows[0]


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "ddpcli")
def test_no_flag_shows_a_value_type(path: list[str]) -> None:
    text = help_text(path)
    assert "<bool>" not in text
    flags = [param for param in options(path) if param.is_flag and not param.count]
    assert any(flag.name == "help" for flag in flags)
    for flag in flags:
        row = row_of(text, flag.opts[0])
        assert "<" not in row.split("│")[1].split(flag.opts[0], 1)[1][:30], row  # nothing in the type column


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "ddpcli")
def test_no_python_type_is_shown(path: list[str]) -> None:
    """Issue 49: `RUNS <list[Path]>` (compare, export) and `-- ARGS <list[str]>` (init) showed Python's types; a
    repeated value shows what each one is (`<path>`), the usage line its `...`."""
    text = help_text(path, width=160)
    assert not re.search(r"<(list|tuple|dict)\[|<Path\b", text), text
    if path in (["compare"], ["export"]):
        assert re.search(r"│\s+RUNS\s+<path>\s", text), text


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "ddpcli")
def test_nothing_is_cut_at_80_columns(path: list[str]) -> None:
    text = help_text(path)
    assert "…" not in text, text
    for param in options(path):
        for opt in [*param.opts, *param.secondary_opts]:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), f"{opt} is cut or missing:\n{text}"


@pytest.mark.parametrize("path", COMMAND_PATHS[1:], ids=" ".join)
def test_positionals_in_one_style(path: list[str]) -> None:
    usage = next(line for line in help_text(path).splitlines() if "Usage:" in line)
    positionals = usage.split("[OPTIONS]", 1)[1].split()
    assert positionals, usage
    for piece in positionals:
        assert re.fullmatch(r"\[?(-- )?[A-Z_]+\]?(\.\.\.)?|\[--|ARGS\]\.\.\.", piece), usage
        assert "{" not in piece, usage


def test_usage_line_marks_required_and_optional_positionals() -> None:
    assert "Usage: ddpcli port [OPTIONS] SCRIPT" in help_text(["port"])
    assert "Usage: ddpcli plan [OPTIONS] [FILE]" in help_text(["plan"])
    assert "Usage: ddpcli export [OPTIONS] VIEWER [RUNS]..." in help_text(["export"])


def test_a_repeatable_option_shows_the_value_it_takes_each_time() -> None:
    text = help_text(["plan"])
    assert re.search(r"│ --only +<str> ", text) and re.search(r"│ --predict-from +<path> ", text), text
    assert "<list[" not in text  # plan has no repeated positional (export's RUNS still shows typer's <list[Path]>)
