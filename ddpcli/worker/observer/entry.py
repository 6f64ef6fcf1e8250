"""Run a script or module as `python SCRIPT` / `python -m MODULE` would, under the observer, and exit cleanly.

Same `__main__`, `sys.argv`, `sys.path[0]`, exit code and traceback as plain python; inside torchrun's error
recording, so a failing rank of any script gets its traceback (from the script's first frame) in error.json.
After the script, the observer writes its last rows and the final parameters, atexit handlers run, and the
process ends with `os._exit`: the interpreter's own teardown, where gloo's threads abort a worker in about one
run of four (see process_group.py), never runs.
"""

import atexit
import contextlib
import os
import runpy
import signal
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ddpcli.worker.observer.watchdog import watch_parent

USAGE = "usage: python -m ddpcli.worker.observer (SCRIPT | -m MODULE) [ARGS...]"


@dataclass(frozen=True)
class Target:
    path: str | None  # a script
    module: str | None
    args: list[str]


def parse(argv: Sequence[str]) -> Target:
    if len(argv) >= 2 and argv[0] == "-m":
        return Target(None, argv[1], list(argv[2:]))
    if argv and not argv[0].startswith("-"):
        return Target(argv[0], None, list(argv[1:]))
    raise SystemExit(USAGE)


def main(argv: Sequence[str] | None = None) -> None:
    target = parse(sys.argv[1:] if argv is None else argv)
    watch_parent()
    observer = _install()
    code = _run_recorded(target)
    if observer is not None:
        observer.finish()
    _exit(code)


def _install():  # -> Observer | None
    if os.environ.get("DDPCLI_OBSERVE", "1") == "0":
        from ddpcli.worker import process_group  # the clean-exit fix alone

        process_group.hold_world_group()
        return None
    try:
        from ddpcli.worker.observer.hooks import Observer

        observer = Observer.install()
        if observer is not None:
            _flush_on_sigterm(observer)
            _finish_before_os_exit(observer)
        return observer
    except Exception as error:  # observation must never stop a script from running
        print(f"ddpcli observer: not installed ({type(error).__name__}: {error})", file=sys.stderr)
        return None


def _flush_on_sigterm(observer) -> None:
    """torchrun stops a worker group with SIGTERM (a failed rank, a restart, ddpcli's own stop): write what was
    observed before dying the way SIGTERM kills, unless the script handles SIGTERM itself."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def flush_then_die(signum: int, frame: object) -> None:
        with contextlib.suppress(Exception):
            observer.stream.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, flush_then_die)


def _finish_before_os_exit(observer) -> None:
    """A script that ends with os._exit skips everything after it: the observer's last rows (up to FLUSH_S of
    steps) and the final parameters would be lost. os._exit finishes the observation first, in this process only
    (a forked child, a DataLoader worker, leaves through os._exit too and must not write the parent's rows)."""
    original, pid = os._exit, os.getpid()

    def finish_then_exit(code: int) -> None:
        if os.getpid() == pid:
            with contextlib.suppress(Exception):
                observer.finish()
        original(code)

    os._exit = finish_then_exit


def _run_recorded(target: Target) -> int:
    """The script's exit code: 0, SystemExit's code, or 1 after printing an exception's traceback as python does.

    A failure goes to torchrun's error.json the way torch's `record` decorator writes it, but with the traceback
    starting at the user's code: the frames of this entry and of runpy, through which the script was started, are
    cut (plain `python train.py` shows none of them either).
    """
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    handler = get_error_handler()
    handler.initialize()
    try:
        _run(target)
    except SystemExit as exit_:
        return _exit_code(exit_.code)
    except Exception as error:
        error.__traceback__ = users_frames(error.__traceback__)
        handler.record_exception(error)  # formats sys.exc_info(), which follows error.__traceback__ (3.11+)
        traceback.print_exception(error)
        return 1
    return 0


def users_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from its first frame that is neither this module's nor runpy's."""
    while tb is not None and _launching_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _launching_frame(filename: str) -> bool:
    return filename == __file__ or filename == runpy.__file__ or filename == "<frozen runpy>"


def _run(target: Target) -> None:
    if target.module is not None:
        sys.argv = [target.module, *target.args]  # runpy replaces argv[0] with the module's file, as python -m does
        runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        return
    assert target.path is not None
    sys.argv = [target.path, *target.args]
    sys.path[0] = str(Path(target.path).resolve().parent)  # python SCRIPT puts the script's folder first
    runpy.run_path(target.path, run_name="__main__")


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # SystemExit("message"): python prints it and exits with 1
    return 1


def _exit(code: int) -> None:
    from ddpcli.worker import process_group

    try:
        atexit._run_exitfuncs()  # the script's own atexit handlers (loggers, trackers) still run
        process_group.release_groups()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
