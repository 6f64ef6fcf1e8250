"""The terminal: shared Rich consoles, the one way every command prints a message, and the wrapper that turns user
mistakes into one line on stderr and exit code 2.

Every message goes through `error`, `warning`, `wrote` or `say`, which escape what they are given: a path or a run
name is the user's text, and `job[bold].sbatch` must print as it is (Rich would read `[bold]` as markup and drop it,
so a message once named a file that was not the one written).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ddpcli.errors import OptionError, UserError

P = ParamSpec("P")
R = TypeVar("R")

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)


def error(message: str) -> None:
    stderr.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


def warning(message: str) -> None:
    stderr.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)


def wrote(path: Path | str, then: str = "") -> None:
    """`wrote PATH` on stderr (stdout stays for the data a command was asked for), with what to do next."""
    stderr.print(f"wrote {escape(str(path))}{escape(then)}", soft_wrap=True)


def say(message: str, *, style: str = "", to_stdout: bool = False) -> None:
    """Any other line for the user, escaped; `style` colours the whole line."""
    text = escape(message)
    (stdout if to_stdout else stderr).print(f"[{style}]{text}[/]" if style else text, soft_wrap=True)


def write_text(path: Path, text: str) -> None:
    """Write an output file the user named; a path that cannot be written is theirs to fix (exit 2), not a
    traceback. (compare's CSV and plot writer says the same words.)"""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror or error}") from None


def user_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Print a UserError as `error: ...` on stderr and exit with its code; Ctrl-C as one line and exit 130, also where
    a library turned the interrupt into an error of its own (libcst's visitor raises a KeyError of the node it was
    on); a bug still shows its traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except UserError as mistake:
            error(mistake.as_flag() if isinstance(mistake, OptionError) else str(mistake))
            raise typer.Exit(mistake.exit_code) from None
        except KeyboardInterrupt:
            error("interrupted")
            raise typer.Exit(130) from None
        except typer.Exit:
            raise  # the command has said what happened and chosen its exit code (port's own Ctrl-C line)
        except Exception as bug:
            if not during_interrupt(bug):
                raise
            error("interrupted")
            raise typer.Exit(130) from None

    return wrapper


def during_interrupt(error: BaseException) -> bool:
    """`error` was raised while a KeyboardInterrupt was being handled (its context chain holds one)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False


# The click that typer parses with: typer.BadParameter is its BadParameter (click's own before typer 0.16, typer's
# vendored copy, typer._click, since), so its module holds the UsageError the parser raises, whichever it is.
_click_exceptions = importlib.import_module(typer.BadParameter.__module__)
UsageError: type[Exception] = _click_exceptions.UsageError
# `ddpcli` alone prints the help (typer >= 0.16 raises it as a UsageError whose show() prints the help).
_SHOWS_HELP: tuple[type[Exception], ...] = tuple(
    getattr(_click_exceptions, name) for name in ("NoArgsIsHelpError",) if hasattr(_click_exceptions, name)
)


def usage_error_line(mistake: Exception) -> str:
    """click's own words for a usage error (`Invalid value for '--lr': 'x' is not a valid float.`), and where the
    command's options are listed, as one line."""
    message = mistake.format_message()  # type: ignore[attr-defined]  # every click UsageError has it
    context = getattr(mistake, "ctx", None)
    if context is None:
        return message
    return f"{message} (see `{context.command_path} --help`)"


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """click's usage errors (a bad option value, a missing argument, an unknown option or command) printed as every
    other mistake is, one `error:` line on stderr and exit 2, instead of typer's Rich box with the usage."""
    try:
        yield
    except _SHOWS_HELP:
        raise
    except UsageError as mistake:
        error(usage_error_line(mistake))
        raise typer.Exit(getattr(mistake, "exit_code", 2)) from None
