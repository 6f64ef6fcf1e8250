"""`python SCRIPT` and `python -m MODULE` for tests, forked from an interpreter that has imported torch already.

An `import torch` costs ~3 CPU-seconds, more than most of the observer's pattern scripts take to train; tests that
run dozens of them (the observer's loop patterns, with and without the observer) paid it every time. The zygote is
one interpreter per test process that imports torch once, then forks a child per command: each child is a process
of its own (its own pid, environment, working directory, file descriptors, exit code, signals), which imports
ddpcli and runs the command as python would, and ends with the code python would end with. torch's import is the
only thing it shares, as a copy.

What it is not: a fresh interpreter's start (whatever runs before `import torch` would run before it here too, but
under a different environment), and a process that may start threads before the fork. Tests whose point is the
interpreter's own exit (gloo's teardown), a spawn or a script's atexit order keep `subprocess`.

    run([sys.executable, "-m", "ddpcli.worker.observer", script, ...], env=..., timeout=120)

returns a `subprocess.CompletedProcess` with text stdout and stderr, as `subprocess.run(capture_output=True,
text=True)` does.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

_SERVER: subprocess.Popen[str] | None = None
_STARTED_WITH: tuple[tuple[str, str], ...] | None = None
# What torch reads once, when its libraries load: a child's value would come too late, so the zygote takes it.
_READ_AT_IMPORT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH")


def run(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `argv` (`python SCRIPT ARGS` or `python -m MODULE ARGS`) in a child forked from the zygote."""
    if argv[0] != sys.executable or len(argv) < 2:
        raise ValueError(f"not a python command: {argv}")
    server = _server(env)
    with tempfile.TemporaryDirectory(prefix="zygote-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        request = {"argv": list(argv[1:]), "env": dict(env), "cwd": str(cwd or os.getcwd()),
                   "stdout": str(out), "stderr": str(err)}  # fmt: skip
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid = int(server.stdout.readline())
        timer = threading.Timer(timeout, _kill, (pid,))
        timer.start()
        try:
            code = int(server.stdout.readline())
        finally:
            timer.cancel()
        if timer.finished.is_set() and code == -signal.SIGKILL:
            raise subprocess.TimeoutExpired(list(argv), timeout)
        return subprocess.CompletedProcess(list(argv), code, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))  # fmt: skip


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _server(env: Mapping[str, str]) -> subprocess.Popen[str]:
    """This test process's zygote, started again if what torch reads at import differs from the one running."""
    global _SERVER, _STARTED_WITH
    wanted = tuple((key, env.get(key, "")) for key in _READ_AT_IMPORT)
    if _SERVER is not None and (_SERVER.poll() is not None or wanted != _STARTED_WITH):
        _stop()
    if _SERVER is None:
        server_env = {**os.environ, **{key: value for key, value in wanted if value}}
        _SERVER = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, env=server_env)  # fmt: skip
        _STARTED_WITH = wanted
    return _SERVER


@atexit.register
def _stop() -> None:
    global _SERVER
    if _SERVER is not None:
        if _SERVER.stdin is not None:
            _SERVER.stdin.close()
        _SERVER.wait(timeout=30)
        _SERVER = None


# -- the zygote itself ----------------------------------------------------------------------------------------


def _serve() -> None:
    # The point: imported once, before any fork. torch imports dynamo itself at the first optimizer step (1.5 s).
    import torch
    import torch._dynamo
    import torch.distributed
    import torch.distributed.elastic.multiprocessing.errors  # the observer's entry records errors with it
    import torch.nn
    import torch.optim
    import torch.utils.checkpoint  # noqa: F401

    replies = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns
        print(pid, file=replies, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), file=replies, flush=True)


def _child(request: dict) -> None:
    """Become `python ARGV` in request's environment and folder; end with python's exit code, never return."""
    code = 1
    try:
        os.setpgrp()  # its own group, as a fresh process started by a test would have none of the zygote's
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run_as_python(request["argv"])
        _at_exit()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _run_as_python(argv: list[str]) -> int:
    """What `python ARGV` does with the command: sys.argv and sys.path[0] as python sets them, its exit code."""
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _at_exit() -> None:
    """The interpreter's own end after the script: non-daemon threads joined, then atexit handlers."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()


if __name__ == "__main__":
    _serve()
