"""The `ddpcli` console script and `python -m ddpcli`: every Ctrl-C ends in one line and exit 130.

A command says it itself (ddpcli.cli.console.user_errors, port's "interrupted; nothing written"). Before one runs,
two places would not: loading typer, rich, pydantic and the commands takes most of a second (more on a loaded
machine), where a Ctrl-C printed a traceback of the import it landed in; and while typer parses the command line it
turns a Ctrl-C into exit 130 without a word."""

from __future__ import annotations

import sys
from collections.abc import Sequence

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process that Ctrl-C ended


def main(argv: Sequence[str] | None = None) -> None:
    try:
        from ddpcli.cli.app import main as run

        run(argv)
    except KeyboardInterrupt:
        _interrupted()
    except SystemExit as done:
        if done.code == INTERRUPTED and _unsaid(done):
            _interrupted()
        raise


def _unsaid(done: SystemExit) -> bool:
    """typer's own Ctrl-C exit (its Exit(130) raised from the KeyboardInterrupt); a command's is raised from None."""
    return isinstance(getattr(done.__context__, "__cause__", None), KeyboardInterrupt)


def _interrupted() -> None:
    sys.stderr.write("error: interrupted\n")
    raise SystemExit(INTERRUPTED) from None
