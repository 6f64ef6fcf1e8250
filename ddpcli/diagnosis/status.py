"""Why a run did not complete, in one line, from what the launcher recorded: failed ranks and their error, a
timeout, a launcher gone. The first of compare's notes on a run. Pure."""

from __future__ import annotations

from typing import Any

from ddpcli.rundir.record import LOST, RunRecord


def status_reason(record: RunRecord) -> str | None:
    """Why a run did not complete, in one line, from what the launcher recorded (failed ranks, exit code)."""
    if record.status == "completed":
        return None
    if record.failed_ranks:
        first = record.failed_ranks[0]
        ranks = ", ".join(_or_unknown(entry.rank) for entry in record.failed_ranks)
        prefix = f"rank {ranks}" if len(record.failed_ranks) == 1 else f"ranks {ranks} failed; rank {first.rank}"
        detail = f"{prefix} exited with code {_or_unknown(first.exit_code)}"
        error = _nonblank_line(first.error, 0) or _nonblank_line(first.log_tail, -1)
        return f"{detail}: {error}" if error else detail
    if record.status == "timed_out":
        after = f" after {record.wall_time_s:.0f} s" if record.wall_time_s is not None else ""
        return f"stopped: past its timeout{after}"
    if record.status == "running" and record.supervisor_pid is None:
        return "no end recorded: still running, or the launcher itself was killed"
    if record.status == "running":
        return "no end recorded: still running (its launcher is alive, or on another host)"
    if record.status == LOST:
        return "its launcher is gone and nothing recorded an end: it was killed (e.g. its terminal closed)"
    if record.exit_code is not None:
        return f"exit code {record.exit_code}"
    return None


def _or_unknown(value: int | None) -> str:
    return "?" if value is None else str(value)


def _nonblank_line(value: Any, index: int, limit: int = 200) -> str | None:
    """The `index`-th non-blank line of a text (0: the first, -1: the last), stripped and cut to `limit`."""
    lines = [line.strip() for line in str(value).splitlines() if line.strip()] if value else []
    return lines[index][:limit] if lines else None
