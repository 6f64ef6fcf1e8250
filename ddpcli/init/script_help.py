"""Run a training script's `--help` without running its training: what `ddpcli init` reads the flags from.

Only for a script whose syntax tree builds a parser (`ddpcli.init.script_kind` decides; nothing else is ever
started). The script runs under the same Python, without a shell, through `help_bootstrap` (which also dumps the
parser's options as JSON), in a session of its own. Whatever happens the help run leaves nothing behind: at the
timeout, at Ctrl-C or SIGTERM, and when the script exits while something it started still holds the output
pipes, its process group is killed, and so is every process that still carries this run's token in its
environment or holds one of its pipes (a helper that moved to a session of its own). Output is read up to
MAX_OUTPUT_BYTES per stream and the rest drained and dropped, so a 50 MB help costs no memory.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.init.help_bootstrap import BOOTSTRAP

# transformers' run_clm.py imports datasets, evaluate and transformers' model mappings before its parser prints:
# 12-14 s on a quiet machine (issue 28), its imports measured here at 4.4-11 s wall (5 s of CPU) at load 1.2-2.7
# on the 2-core machine; with 6 jobs on 2 cores that is 15 s and more. 60 s serves it with room; a script that
# needs longer is named with --help-timeout. After NOTICE_AFTER_S the user is told what init waits for.
DEFAULT_TIMEOUT_S = 60.0
NOTICE_AFTER_S = 3.0
MAX_OUTPUT_BYTES = 1 << 20
PIPE_GRACE_S = 0.5  # after the script exits, how long its pipes may stay open before the holders are killed
HELP_ENV = {"COLUMNS": "200", "TERMINAL_WIDTH": "200", "TYPER_USE_RICH": "0", "NO_COLOR": "1", "TERM": "dumb"}
TOKEN_VARIABLE = "DDPCLI_HELP_TOKEN"


@dataclass(frozen=True)
class ScriptHelp:
    """What `--help` printed, and the parser's own description of its options (None when not dumped)."""

    command: str
    text: str
    dump: str
    seconds: float


@dataclass
class _Output:
    kept: bytearray
    dropped: int = 0


def read_help(
    script: Path | None,
    module: str | None,
    cwd: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    prefix: tuple[str, ...] = (),
    notice: Callable[[str], None] | None = None,
) -> ScriptHelp:
    """Run `python SCRIPT [PREFIX] --help` (or `python -m MODULE ...`) in `cwd`; a missing script, a non-zero
    exit, no output and a timeout are UserErrors that say which (and what the script printed)."""
    words = " ".join((*prefix, "--help"))
    if script is not None:
        if not script.is_file():
            raise UserError(f"{script}: no such script")
        shown, target = f"python {script} {words}", ["script", str(script.resolve())]
    else:
        assert module is not None
        shown, target = f"python -m {module} {words}", ["module", module]
    with tempfile.TemporaryDirectory(prefix="ddpcli-help-") as folder:
        dump_path = Path(folder) / "options.jsonl"
        env = {**os.environ, **HELP_ENV, "DDPCLI_HELP_DUMP": str(dump_path), TOKEN_VARIABLE: uuid.uuid4().hex}
        env.pop("FORCE_COLOR", None)
        started = time.monotonic()
        out, err, code = run_bounded(
            [sys.executable, "-c", BOOTSTRAP, *target, *prefix], cwd, env, timeout_s, shown, notice
        )
        seconds = time.monotonic() - started
        dump = dump_path.read_text(encoding="utf-8", errors="replace") if dump_path.is_file() else ""
    if code != 0:
        last = _last_line(err) or _last_line(out) or "no output on stdout or stderr"
        raise UserError(f"`{shown}` exited with code {code}: {last}")
    text = out if out.strip() else err
    if not text.strip():
        raise UserError(f"`{shown}` printed nothing")
    return ScriptHelp(shown, text, dump, seconds)


def run_bounded(
    argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float, shown: str,
    notice: Callable[[str], None] | None = None,
) -> tuple[str, str, int]:  # fmt: skip
    """Run `argv` in a session of its own; returns (stdout, stderr, exit code), each stream cut at
    MAX_OUTPUT_BYTES. Kills everything it started at the timeout, on Ctrl-C and on SIGTERM."""
    try:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
    except OSError as error:
        raise UserError(f"cannot run `{shown}`: {error}") from None
    assert process.stdout is not None and process.stderr is not None
    out_fd, err_fd = process.stdout.fileno(), process.stderr.fileno()
    pipes = {out_fd: _Output(bytearray()), err_fd: _Output(bytearray())}
    inodes = {os.fstat(fd).st_ino for fd in pipes}
    finished = False
    try:
        with _stop_signals_raise():
            waiting = (
                f"waiting for `{shown}`: the script imports its libraries before its parser prints its flags "
                f"(up to {timeout_s:g} s; --help-timeout sets it)"
            )
            timed_out = _read_until_done(
                process, pipes, time.monotonic() + timeout_s, notice and (lambda: notice(waiting))
            )
        finished = not timed_out
    finally:
        _kill_everything(process, env[TOKEN_VARIABLE], inodes)
        process.stdout.close()
        process.stderr.close()
    if not finished:
        raise UserError(
            f"`{shown}` did not finish within {timeout_s:g} s; ddpcli init only reads the flags from --help "
            "(raise --help-timeout if the script is slow to import)"
        )
    return _decoded(pipes[out_fd]), _decoded(pipes[err_fd]), process.returncode


def _read_until_done(
    process: subprocess.Popen[bytes], pipes: dict[int, _Output], deadline: float,
    notice: Callable[[], None] | None = None,
) -> bool:  # fmt: skip
    """Read both pipes until they close and the process exits; True when the deadline came first. Once the
    process has exited, pipes still open after PIPE_GRACE_S belong to something it left behind: stop reading."""
    selector = selectors.DefaultSelector()
    for fd in pipes:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    exited_at: float | None = None
    notice_at = time.monotonic() + NOTICE_AFTER_S if notice is not None else math.inf
    try:
        while selector.get_map():
            now = time.monotonic()
            if now >= notice_at and exited_at is None and notice is not None:
                notice()
                notice_at = math.inf
            if now >= deadline:
                return True
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > PIPE_GRACE_S:
                break
            for key, _ in selector.select(timeout=min(0.1, deadline - now)):
                _drain(key.fd, pipes[key.fd], selector)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        try:
            process.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            return True
        return False
    finally:
        selector.close()


def _drain(fd: int, output: _Output, selector: selectors.BaseSelector) -> None:
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return
    if not chunk:
        selector.unregister(fd)
        return
    room = MAX_OUTPUT_BYTES - len(output.kept)
    output.kept += chunk[: max(room, 0)]
    output.dropped += max(len(chunk) - max(room, 0), 0)


def _decoded(output: _Output) -> str:
    return output.kept.decode("utf-8", errors="replace")


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


class _Stopped(Exception):
    """SIGTERM or SIGHUP arrived while the help ran: clean up, then exit as that signal would."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise inside the read loop (Ctrl-C already raises KeyboardInterrupt), so that the
    `finally` that kills the help run always runs; the signal's exit status is kept (128 + signum)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise _Stopped(signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    except _Stopped as stopped:
        raise SystemExit(128 + stopped.signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _kill_everything(process: subprocess.Popen[bytes], token: str, inodes: set[int]) -> None:
    """The script's process group (whatever of it is left), then any process with this run's token or one of
    its pipes: a helper that moved to a session of its own."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for pid in _left_behind(token, inodes):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _left_behind(token: str, inodes: set[int]) -> list[int]:
    """Processes (Linux /proc) whose environment holds `token` or which hold one of the pipes; never this one."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    pipe_links = {f"pipe:[{inode}]" for inode in inodes}
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            holds = needle in (entry / "environ").read_bytes()
            if not holds:
                holds = any(os.readlink(fd) in pipe_links for fd in (entry / "fd").iterdir())
        except OSError:
            continue
        if holds:
            found.append(int(entry.name))
    return found


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
