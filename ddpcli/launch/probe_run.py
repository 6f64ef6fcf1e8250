"""Run a probe (a short job on this host that `plan --predict-from` measures with) so that nothing of it outlives
the probe, whatever ends it: its end, its timeout, or a stop signal to `ddpcli plan` (Ctrl-C, SIGTERM, a closed
terminal, Ctrl-\\).

The probe is started as `ddpcli launch` starts torchrun (ddpcli.launch.supervisor): in a session of its own, with a
parent-death signal, and torn down the same way: SIGTERM to its process group (torchrun passes it on to its
workers), SIGKILL after a grace period, then SIGKILL to every process still carrying this probe's marker in its
environment (torchrun's workers, and the CPU probe's ranks, each in a session of its own). Before, plan left
subprocess.run to it: Ctrl-C SIGKILLed torchrun alone and its workers lived on, SIGTERM killed plan and left the
probe running and its temporary folder behind, and a timeout was a traceback with workers left.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.launch.parent_death import die_with_parent
from ddpcli.launch.supervisor import kill_marked, terminate

PROBE_MARKER = "DDPCLI_PROBE"  # its value names one probe: its processes, and only them, are killed after it
POLL_INTERVAL_S = 0.2
STOP_GRACE_S = 5.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

_stop_signal: list[int] = []  # the stop signal that came while `stopping_on_signals` was in force


class ProbeStopped(UserError):
    """A stop signal ended the probe: the command exits with 128 + its number, as a shell reports it."""

    def __init__(self, signum: int) -> None:
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name}; the probe and every process it started are gone")


class ProbeTimedOut(UserError):
    """The probe ran past its time limit; it was stopped like a stopped probe."""


@dataclass(frozen=True)
class ProbeResult:
    returncode: int
    stdout: str
    stderr: str


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While probes may run: a stop signal is noted (never acted on inside a handler) and the running probe is torn
    down within POLL_INTERVAL_S; leaving the block after one raises ProbeStopped."""
    _stop_signal.clear()
    previous = {signum: signal.signal(signum, lambda signum, frame: _stop_signal.append(signum))
                for signum in STOP_SIGNALS}  # fmt: skip
    try:
        yield
        _raise_if_stopped()
    finally:
        _stop_signal.clear()
        for signum, old in previous.items():
            signal.signal(signum, old)


def _raise_if_stopped() -> None:
    if _stop_signal:
        raise ProbeStopped(_stop_signal[0])


def run_probe(
    command: Sequence[str], env: dict[str, str], timeout: float, what: str = "the probe", **_: object
) -> ProbeResult:
    """Run `command` to its end and return its exit code and output; ProbeTimedOut past `timeout` seconds,
    ProbeStopped on a stop signal. Either way, and on any error here, nothing it started is left running."""
    _raise_if_stopped()
    token = uuid.uuid4().hex
    marker = f"{PROBE_MARKER}={token}".encode()
    with tempfile.TemporaryDirectory(prefix="ddpcli-probe-output-") as folder:
        out_path, err_path, scratch = Path(folder) / "stdout", Path(folder) / "stderr", Path(folder) / "tmp"
        scratch.mkdir()  # its TMPDIR: torchrun's torchelastic_* folder goes with this one, however it ends
        with out_path.open("wb") as out, err_path.open("wb") as err:
            env = {**env, PROBE_MARKER: token, "TMPDIR": str(scratch)}
            process = subprocess.Popen(
                list(command), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                preexec_fn=die_with_parent(),
            )  # fmt: skip
            try:
                _wait(process, time.monotonic() + timeout, timeout, what)
            finally:
                if process.poll() is None:
                    terminate(process, STOP_GRACE_S)
                kill_marked(marker, STOP_GRACE_S)
        return ProbeResult(process.returncode, _text(out_path), _text(err_path))


def _wait(process: subprocess.Popen[bytes], deadline: float, timeout: float, what: str) -> None:
    while True:
        try:
            process.wait(POLL_INTERVAL_S)
            return
        except subprocess.TimeoutExpired:
            pass
        _raise_if_stopped()
        if time.monotonic() > deadline:
            raise ProbeTimedOut(
                f"{what} did not finish in {timeout:.0f} s; it was stopped with every process it started "
                "(--link-gbps predicts without probing)"
            )


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")
