"""Shared Rich consoles and the wrapper that turns user mistakes into one line on stderr and exit code 2."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ddpcli.errors import UserError

P = ParamSpec("P")
R = TypeVar("R")

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)


def write_text(path: Path, text: str) -> None:
    """Write an output file the user named; a path that cannot be written is theirs to fix (exit 2), not a
    traceback. (compare's CSV and plot writer says the same words.)"""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror or error}") from None


def user_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Print a UserError as `error: ...` on stderr and exit with its code; a bug still shows its traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except UserError as error:
            stderr.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
            raise typer.Exit(error.exit_code) from None

    return wrapper
