"""docs/options.md: every option of every command in one table, read from the click command objects that parse
them (tests/test_cli_vocabulary.py checks that the file matches). Regenerate it with

    python -m ddpcli.cli.reference > docs/options.md
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from ddpcli.cli.app import COMMANDS, app


@dataclass(frozen=True)
class OptionRow:
    """One parameter of one command, as the table shows it."""

    command: str
    spelling: str  # `--output, -o`; a positional by its metavar (`FILE`)
    kind: str  # "flag", "option" or "positional"
    value: str  # what it takes: `<path>`, `N,...`; "" for a flag
    repeatable: bool
    help: str


def commands() -> dict[str, Any]:
    """`ddpcli` (the root's own options) and every command, as click command objects."""
    root = typer.main.get_command(app)
    return {"ddpcli": root, **{name: root.get_command(None, name) for name in COMMANDS}}


def value_label(param: Any, ctx: Any) -> str:
    """What the parameter takes: its metavar where one names the form (`N,...`), else the type (`<int range>`)."""
    if param.param_type_name == "option" and param.is_flag:
        return ""
    metavar = param.metavar if param.param_type_name == "option" else None
    if metavar and not metavar.startswith("<"):
        return metavar
    if hasattr(param, "display_type"):  # typer >= 0.28
        return str(param.display_type(ctx))
    return f"<{param.type.name}>"


def option_rows() -> list[OptionRow]:
    rows = []
    for name, command in commands().items():
        ctx = command.make_context(name, [], resilient_parsing=True)
        for param in command.get_params(ctx):
            if param.param_type_name == "argument":
                spelling, kind = param.metavar or param.name.upper(), "positional"
                repeatable = param.nargs != 1
            else:
                spelling = ", ".join([*param.opts, *param.secondary_opts])
                kind = "flag" if param.is_flag else "option"
                repeatable = bool(param.multiple)
            help_text = " ".join((param.help or "").split())
            rows.append(OptionRow(name, spelling, kind, value_label(param, ctx), repeatable, help_text))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def options_markdown() -> str:
    lines = [
        "# Every option of every command",
        "",
        "Generated from the commands themselves by `python -m ddpcli.cli.reference > docs/options.md`;",
        "tests/test_cli_vocabulary.py fails when this file and the commands differ, and when an option spelled the",
        "same in two commands takes a different value or means something else.",
        "",
        "| Command | Option | Kind | Takes | Repeatable | Meaning |",
        "|---|---|---|---|---|---|",
    ]
    for row in option_rows():
        takes = f"`{_cell(row.value)}`" if row.value else ""
        lines.append(
            f"| {row.command} | `{_cell(row.spelling)}` | {row.kind} | {takes} | {'yes' if row.repeatable else ''} "
            f"| {_cell(row.help)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(options_markdown(), end="")
