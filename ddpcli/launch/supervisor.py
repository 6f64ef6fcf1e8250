"""Run one torchrun job to the end: start it, watch it, stop it cleanly, and say how it ended and why.

torchrun starts every worker in a session of its own, so killing torchrun's process group does not reach them:
a torchrun killed hard leaves orphans. We therefore stop torchrun with SIGTERM first (it forwards the signal to
its workers), escalate to SIGKILL after a grace period, and finally kill any process still carrying this
launch's marker (DDPCLI_RUN_DIR, or DDPCLI_NODE_KEY on a multi-node run) in its environment. No torch and no rich here.

And if the launcher itself dies, even by SIGKILL (nothing of it runs then), torchrun must not go on alone: on Linux it
is started with a parent-death signal (SIGTERM, which it forwards to its workers), and each worker's observer
watches its own parent (ddpcli.worker.observer.watchdog) in case torchrun is killed hard too.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.jsonvalues import read_json
from ddpcli.launch import prestart
from ddpcli.launch.argv import LaunchSpec
from ddpcli.launch.parent_death import die_with_parent, ended
from ddpcli.rundir.layout import OBSERVED_DIR, PROGRESS_KINDS, rank_file_name
from ddpcli.rundir.metrics import iter_new_metrics

POLL_INTERVAL_S = 0.2
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 20

Agent = subprocess.Popen[bytes] | prestart.ForkedAgent  # torchrun: forked by the prestart server, or started


@dataclass
class Outcome:
    status: str  # completed | failed | interrupted | timed_out
    exit_code: int | None
    wall_time_s: float
    failed_ranks: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    group_rank: int | None = None  # this node's rank among the nodes (multi-node runs only)


@dataclass
class StopRequest:
    """Set from a signal handler; the supervision loop notices it within POLL_INTERVAL_S. While a finished run is
    merged (`merging`), a request also stops the merge at once (it raises MergeStopped where the merge is)."""

    reason: str | None = None  # "interrupted" once a stop signal arrived
    signum: int | None = None  # which one: the launcher exits with 128 + signum, as a shell would report it
    merging: bool = False

    def request(self, reason: str = "interrupted", signum: int | None = None) -> None:
        self.reason = reason
        self.signum = self.signum or signum
        if self.merging:
            self.merging = False
            raise MergeStopped(f"stopped by {_signal_name(signum)}")

    def begin_merge(self) -> None:
        """The merge starts: from now a stop request ends it at once, and one that came since torchrun ended (the
        run's record being finished) ends it before it begins."""
        if self.reason is not None:
            raise MergeStopped(f"stopped by {_signal_name(self.signum)}")
        self.merging = True


class MergeStopped(Exception):
    """A stop signal during the merge after a run: the merge ends there, the run's record does not."""


def _signal_name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name if signum else "a stop request"
    except ValueError:
        return f"signal {signum}"


def run_to_end(
    spec: LaunchSpec,
    timeout_s: float | None,
    stop: StopRequest,
    on_rows: Callable[[list[dict[str, Any]]], None] = lambda rows: None,
) -> Outcome:
    """Start torchrun, feed new metrics rows to `on_rows` as they appear, and return how the run ended."""
    spec.log_dir.mkdir(parents=True, exist_ok=True)
    agent_log = spec.log_dir / ("torchrun.log" if spec.node_key is None else f"torchrun-{spec.node_key}.log")
    before = set(spec.log_dir.iterdir())
    log_start = agent_log.stat().st_size if agent_log.exists() else 0  # a resumed run appends to the same log
    started = time.monotonic()
    with agent_log.open("ab") as log:
        env = {**os.environ, **spec.env_added}
        process = prestart.take(spec.argv, env, agent_log, spec.cwd) or subprocess.Popen(
            spec.argv, env=env, cwd=spec.cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent(),
        )  # fmt: skip
        progress = spec.run_dir / OBSERVED_DIR / rank_file_name(0)
        watch = Watch(process, progress, on_rows, find_group_rank=spec.run.plan.is_multi_node)
        try:
            status = watch.until_done(started, timeout_s, stop)
        finally:  # whatever goes wrong here, torchrun (in a session of its own) must not outlive us
            if process.poll() is None:
                terminate(process)
            kill_leftover_workers(spec)
    exit_code = process.returncode if getattr(process, "status_known", True) else None  # prestart.ForkedAgent
    wall_time = time.monotonic() - started
    if status == "completed" and exit_code != 0:
        status = "failed"
    own_logs = sorted(path for path in set(spec.log_dir.iterdir()) - before if path.is_dir())
    failed = failed_ranks(agent_log, own_logs, log_start) if status == "failed" else []
    return Outcome(status, exit_code, wall_time, failed, count_restarts(own_logs), watch.group_rank)


class Watch:
    """Polls a running torchrun: rank 0's new step rows, this node's group rank, the end of the process."""

    def __init__(
        self,
        process: Agent,
        metrics: Path,
        on_rows: Callable[[list[dict[str, Any]]], None],
        find_group_rank: bool,
    ) -> None:
        self.process = process
        self.metrics = metrics
        self.on_rows = on_rows
        self.offset = 0
        self.group_rank: int | None = None
        self.find_group_rank = find_group_rank

    def poll(self) -> None:
        rows, self.offset = iter_new_metrics(self.metrics, self.offset)
        rows = [row for row in rows if row.get("kind") in PROGRESS_KINDS]
        if rows:
            self.on_rows(rows)
        if self.find_group_rank and self.group_rank is None:
            self.group_rank = group_rank_of_workers(self.process.pid)

    def until_done(self, started: float, timeout_s: float | None, stop: StopRequest) -> str:
        while True:
            self.poll()
            if self.process.poll() is not None:
                self.poll()
                return "completed"
            if stop.reason is not None:
                terminate(self.process)
                return stop.reason
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                terminate(self.process)
                return "timed_out"
            # Waiting on the process (not sleeping) notices its exit at once instead of up to a poll later.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(POLL_INTERVAL_S)


def terminate(process: Agent, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to torchrun's group (torchrun passes it on to its workers), SIGKILL after the grace period."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: Agent, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def kill_leftover_workers(spec: LaunchSpec) -> list[int]:
    """SIGKILL every process whose environment marks it as this launch's worker. Linux only (reads /proc).

    The marker is the run directory, or for a multi-node run this node's key: nodes share the run directory,
    and a node that finishes first must not kill a node that shares its host and is still saving.
    """
    marker = f"DDPCLI_NODE_KEY={spec.node_key}".encode() if spec.node_key else run_dir_marker(spec.run_dir)
    return kill_marked(marker)


def kill_marked(marker: bytes, wait_s: float = 0.0) -> list[int]:
    """SIGKILL every process carrying `marker` in its environment (Linux: /proc), wait (up to `wait_s`) until they
    have ended, and say which. A SIGKILLed process takes a moment to go: a caller that must leave nothing running
    (a probe) waits; launch's leftover workers are reaped by the agent's end."""
    killed = []
    for pid in worker_pids(marker):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    while not all(map(ended, killed)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return killed


def group_rank_of_workers(agent_pid: int) -> int | None:
    """GROUP_RANK from the environment of a worker torchrun started: the rendezvous decides it, and torchrun
    logs it only at INFO level. Linux only (reads /proc); None until a worker exists."""
    for entry in _proc_entries():
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat[stat.rfind(")") + 2 :].split()[1])
            if parent != agent_pid:
                continue
            for variable in _environ(entry):
                if variable.startswith(b"GROUP_RANK="):
                    return int(variable.removeprefix(b"GROUP_RANK="))
        except (OSError, ValueError, IndexError):
            continue
    return None


def _proc_entries() -> list[Path]:
    proc = Path("/proc")
    return [entry for entry in proc.iterdir() if entry.name.isdigit()] if proc.is_dir() else []


def _environ(entry: Path) -> list[bytes]:
    """A process's environment as `NAME=value` byte strings; empty when it is gone or not ours to read."""
    try:
        return (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return []


def run_dir_marker(run_dir: Path) -> bytes:
    """The environment entry every worker of a run carries (ddpcli launch sets DDPCLI_RUN_DIR)."""
    return f"DDPCLI_RUN_DIR={run_dir}".encode()


def worker_pids(marker: bytes) -> list[int]:
    """Processes (other than this one) whose environment holds `marker`."""
    me = os.getpid()
    return [int(entry.name) for entry in _proc_entries() if int(entry.name) != me and marker in _environ(entry)]


def count_restarts(own_logs: list[Path]) -> int:
    attempts = [path for log_dir in own_logs for path in log_dir.glob("attempt_*")]
    return max(len(attempts) - 1, 0)


# torchrun's failure summary: "rank      : 1 (local_rank: 1)", "exitcode  : 1 (pid: 42)", "error_file: <path>".
SUMMARY_ENTRY = re.compile(
    r"rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<exit_code>-?\d+)[^\n]*\n"
    r"\s*error_file\s*:\s*(?P<error_file>[^\n]+)"
)


def failed_ranks(agent_log: Path, own_logs: list[Path], offset: int = 0) -> list[dict[str, Any]]:
    """The ranks torchrun reported as failed (in its log from `offset` on), root cause first, each with its
    error and the end of its log."""
    text = ""
    if agent_log.exists():
        with agent_log.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", errors="replace")
    summary = text[text.rfind("Failures:") :] if "Failures:" in text else ""
    root_cause_at = summary.find("Root Cause")
    entries = []
    for match in SUMMARY_ENTRY.finditer(summary):
        rank, local_rank, exit_code = int(match["rank"]), int(match["local_rank"]), int(match["exit_code"])
        error_file = match["error_file"].strip()
        stderr_log = _rank_stderr(error_file, local_rank, own_logs)
        entries.append({
            "rank": rank,
            "exit_code": exit_code,
            "error": _error_message(error_file, stderr_log, exit_code),
            "log_tail": _tail(stderr_log),
            "root_cause": match.start() > root_cause_at >= 0,
        })  # fmt: skip
    entries.sort(key=lambda entry: not entry["root_cause"])
    return entries


def _rank_stderr(error_file: str, local_rank: int, own_logs: list[Path]) -> Path | None:
    if not error_file.startswith("<"):
        return Path(error_file).parent / "stderr.log"
    candidates = sorted(path for log_dir in own_logs for path in log_dir.glob(f"attempt_*/{local_rank}/stderr.log"))
    return candidates[-1] if candidates else None


def _error_message(error_file: str, stderr_log: Path | None, exit_code: int) -> str:
    if not error_file.startswith("<"):
        try:
            message = read_json(Path(error_file))["message"]
            return message["message"] if isinstance(message, dict) else str(message)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if exit_code < 0:
        try:
            return f"killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"killed by signal {-exit_code}"
    lines = _tail(stderr_log).splitlines()
    return lines[-1] if lines else f"exited with code {exit_code}"


def _tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])
