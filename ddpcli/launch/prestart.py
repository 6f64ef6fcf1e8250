"""torchrun's interpreter: started while `ddpcli launch` itself is still starting, imported once, forked per run.

Most of a short job's time is start-up, and torchrun's is mostly `import torch` (about a CPU-second, more under
load). The launcher needs a few tenths of a second of its own (its modules, pydantic, the plan) before it knows
torchrun's arguments; done one after the other, that made `ddpcli launch` of a no-op job 1.13x the user's own
torchrun. So `ddpcli launch` starts `python -c SERVER` first thing: it imports torchrun's module and waits on stdin.
For each run the launcher sends one line (arguments, environment, working directory, log file); the server forks,
and the child runs torchrun's `main` as `python -m torch.distributed.run ARGS` would: in a session of its own,
stdin from /dev/null, stdout and stderr to the log, the run's environment (torchrun reads its options when main
runs), exit code 0, or 1 with the traceback printed when main raises. The server answers the child's pid, then its
exit status when it ends. A sweep of N runs imports torch for its agents once, not N times: about a CPU-second
and a second of wall time saved per run after the first. Forking a process that imported torch is what
DataLoader's workers do on Linux (torch re-initialises its thread pools in a forked child).

Only variables that torch reads while it is imported are the launcher's environment's for the agent process; the
workers torchrun starts are new interpreters with the run's environment in full. If the launcher sends nothing
(--help, an error) or ends, the server sees stdin close and exits; if the launcher dies, the server dies with it,
and each forked torchrun with the server (PR_SET_PDEATHSIG, as ddpcli.launch.parent_death sets for a Popen).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ddpcli.launch.parent_death import die_with_parent, ended

TORCHRUN_MODULE = "torch.distributed.run"
FORK_ANSWER_S = 60.0  # the server answers a fork at once; this long without the pid, it is given up
CLOSE_S = 5.0  # a server whose stdin is closed ends at once; this long after, it is killed

SERVER = """
import json, os, signal, sys, time
import torch.distributed.run as torchrun
try:
    import ctypes
    prctl = ctypes.CDLL(None).prctl
except (OSError, AttributeError):
    prctl = None
server = os.getpid()
while True:
    line = sys.stdin.readline()
    if not line.strip():
        os._exit(0)
    order = json.loads(line)
    child = os.fork()
    if child == 0:
        break
    while os.getsid(child) != child:  # answered once the child leads its own session: a stop reaches its group
        time.sleep(0.001)
    sys.stdout.write(f"{child}\\n")
    sys.stdout.flush()
    _, status = os.waitpid(child, 0)
    sys.stdout.write(f"{os.waitstatus_to_exitcode(status)}\\n")
    sys.stdout.flush()
os.setsid()
if prctl is not None:
    prctl(1, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != server:
        os.kill(os.getpid(), signal.SIGTERM)
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
log = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
os.dup2(log, 1)
os.dup2(log, 2)
os.close(log)
os.environ.clear()
os.environ.update(order["env"])
if order.get("cwd"):
    os.chdir(order["cwd"])
sys.argv = [torchrun.__file__, *order["args"]]
torchrun.main(order["args"])
"""


class Server:
    """The interpreter that imported torchrun's module, and the lines it answers on its stdout."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.forked = 0  # runs forked so far
        self._buffer = b""

    def send(self, order: dict[str, object]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(order, allow_nan=False).encode() + b"\n")
        self.process.stdin.flush()

    def readline(self, timeout: float | None) -> str | None:
        """The server's next line ("" once it has ended), or None when `timeout` passes first."""
        assert self.process.stdout is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                return ""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        """Ended and reaped: one that forked runs has its stdin closed and ends by itself (killed if it has not in a
        few seconds); one that never forked (an error before the first run) is killed, mid-import or waiting."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(CLOSE_S if self.forked else 0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class ForkedAgent:
    """One run's torchrun, forked by the server: what the supervisor uses of a Popen (pid, poll, wait, returncode).
    The pid leads a process group of its own, as a Popen with start_new_session has it.

    Only the server can wait for its child, so the exit status comes from it. A server that is gone (killed) takes
    that status with it: its child got SIGTERM (its parent-death signal) and the agent ends once the child is gone,
    with `status_known` False, so that the run's record says its exit code is unknown rather than a guessed one."""

    def __init__(self, server: Server, pid: int, args: list[str]) -> None:
        self.server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self.status_known = True
        self._server_gone = False

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._read(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def _read(self, timeout: float | None) -> bool:
        if not self._server_gone:
            line = self.server.readline(timeout)
            if line is None:
                return False
            if line:
                self.returncode = int(line)
                return True
            self._server_gone = True
        if not _gone_within(self.pid, timeout):
            return False
        self.status_known = False
        self.returncode = 1  # ended, not known to have succeeded; the supervisor records no exit code for it
        return True


def _gone_within(pid: int, timeout: float | None) -> bool:
    """Whether process `pid` (not a child of ours: its parent, the server, is gone) has ended, waiting up to
    `timeout` seconds (forever for None)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not ended(pid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


_server: Server | None = None


def prestart(argv: Sequence[str]) -> None:
    """Start the server when the command line is a `launch` that will start torchrun."""
    global _server
    words = list(argv)
    if _server is not None or not words or words[0] != "launch":
        return
    if any(word in ("--dry-run", "--help", "-h") for word in words):
        return
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent(),
        )  # fmt: skip
    except OSError:
        return
    _server = Server(process)
    atexit.register(stop)  # the launcher's end: the server is ended and reaped, not left to init


def take(argv: Sequence[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> ForkedAgent | None:
    """torchrun with `argv`'s arguments, forked by the server; None when there is none (a command that is not
    `python -m torch.distributed.run`, a server that died or did not answer): the caller starts a process."""
    global _server
    server = _server
    if server is None or list(argv[:3]) != [sys.executable, "-m", TORCHRUN_MODULE]:
        return None
    order = {"args": list(argv[3:]), "env": env, "log": str(log), "cwd": str(cwd) if cwd else None}
    try:
        if server.process.poll() is not None:
            raise OSError("the server has ended")
        server.send(order)
        answer = server.readline(FORK_ANSWER_S)
        if not answer:
            raise OSError("the server did not answer")
        pid = int(answer)
    except (OSError, ValueError):
        _server = None
        server.close()
        return None
    server.forked += 1
    return ForkedAgent(server, pid, list(argv))


def stop() -> None:
    """Close the server (the launch has started its last run, or a test is done with it)."""
    global _server
    server, _server = _server, None
    if server is not None:
        server.close()
