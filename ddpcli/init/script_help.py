"""Read a training script's `--help` without running its training: what `ddpcli init` parses for flags.

The script runs under the same Python (sys.executable), without a shell, with a timeout, through a small bootstrap
that only makes the common parsers show their defaults: argparse prints `(default: X)` after every option's help
(as ArgumentDefaultsHelpFormatter does), click and typer print `[default: X]` and typer prints plain text instead
of Rich boxes. A script whose source mentions no argument parsing at all is not run: given `--help`, it would
simply train.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ddpcli.errors import UserError

DEFAULT_TIMEOUT_S = 15.0
NO_PARSER_EXIT = 86  # the bootstrap's "this script parses no arguments; not run" (an unlikely exit code)

BOOTSTRAP = r"""
import argparse, importlib.util, os, re, runpy, sys

kind, target = sys.argv[1], sys.argv[2]
if kind == "script":
    origin = os.path.abspath(target)
else:
    spec = importlib.util.find_spec(target)
    if spec is not None and spec.submodule_search_locations:
        spec = importlib.util.find_spec(target + ".__main__")
    origin = spec.origin if spec is not None else None
try:
    with open(origin, encoding="utf-8", errors="replace") as source:
        text = source.read()
except (OSError, TypeError):
    text = "argv"  # let Python report the missing module itself
if not re.search(r"argv|[Pp]ars|click|typer|fire|docopt|hydra|tyro|[Oo]ption|[Aa]rgument", text):
    sys.exit(NO_PARSER_EXIT)

argparse.HelpFormatter._get_help_string = argparse.ArgumentDefaultsHelpFormatter._get_help_string
_add_argument = argparse._ActionsContainer.add_argument
def add_argument(self, *args, **kwargs):
    if kwargs.get("help") is None:
        kwargs["help"] = "(default: %(default)s)"
    return _add_argument(self, *args, **kwargs)
argparse._ActionsContainer.add_argument = add_argument
try:
    import click
except ImportError:
    pass
else:
    _context_init = click.Context.__init__
    def context_init(self, *args, **kwargs):
        _context_init(self, *args, **kwargs)
        if self.show_default is None:
            self.show_default = True
    click.Context.__init__ = context_init

sys.argv = [origin or target, "--help"]
if kind == "script":
    sys.path[0] = os.path.dirname(origin)
    runpy.run_path(origin, run_name="__main__")
else:
    sys.path[0] = os.getcwd()
    runpy.run_module(target, run_name="__main__", alter_sys=True)
""".replace("NO_PARSER_EXIT", str(NO_PARSER_EXIT))

HELP_ENV = {"COLUMNS": "200", "TERMINAL_WIDTH": "200", "TYPER_USE_RICH": "0", "NO_COLOR": "1", "TERM": "dumb"}


@dataclass(frozen=True)
class ScriptHelp:
    """What `--help` printed; `text` is None when the script was not run because it parses no arguments."""

    command: str
    text: str | None
    seconds: float


def read_help(script: Path | None, module: str | None, cwd: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> ScriptHelp:
    """Run `python SCRIPT --help` (or `python -m MODULE --help`) in `cwd` and return its output.

    A missing script, a --help that exits with an error or prints nothing, and one that does not finish within
    `timeout_s` are UserErrors that say which.
    """
    if script is not None:
        if not script.is_file():
            raise UserError(f"{script}: no such script")
        shown, target = f"python {script} --help", ["script", str(script.resolve())]
    else:
        assert module is not None
        shown, target = f"python -m {module} --help", ["module", module]
    env = {**os.environ, **HELP_ENV}
    env.pop("FORCE_COLOR", None)
    started = time.monotonic()
    out, err, code = _run([sys.executable, "-c", BOOTSTRAP, *target], cwd, env, timeout_s, shown)
    seconds = time.monotonic() - started
    if code == NO_PARSER_EXIT:
        return ScriptHelp(shown, None, seconds)
    text = out if out.strip() else err
    if code != 0:
        last = next((line.strip() for line in reversed(err.splitlines()) if line.strip()), "no output")
        raise UserError(f"`{shown}` exited with code {code}: {last}")
    if not text.strip():
        raise UserError(f"`{shown}` printed nothing")
    return ScriptHelp(shown, text, seconds)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float, shown: str) -> tuple[str, str, int]:
    """Run without a shell in a session of its own, so that a timeout stops the script and anything it started."""
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as error:
        raise UserError(f"cannot run `{shown}`: {error}") from None
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise UserError(
            f"`{shown}` did not finish within {timeout_s:g} s; ddpcli init only reads the flags from --help "
            "(raise --help-timeout if the script is slow to import)"
        ) from None
    return out, err, process.returncode


def gpu_count(timeout_s: float = 5.0) -> int | None:
    """GPUs listed by `nvidia-smi -L`, or None without nvidia-smi (torch is not imported to count them)."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        result = subprocess.run(
            [executable, "-L"], capture_output=True, text=True, timeout=timeout_s, check=False, errors="replace"
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))
