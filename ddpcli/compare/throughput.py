"""Throughput that measures DDP, or none: a speedup from a starved baseline is no speedup. Pure.

dist_tuto at 2 processes once showed 4.10x (205% efficiency) because its baseline ran at 15% of a core (the host's
load 9.6 on 2 cores); repeated, 0.57x and 1.0x. A CPU training process busy computing uses about one core's worth
of CPU time per second (`time_breakdown` `cpu_share`); one far below that, in steps neither waiting on data nor
on communication, was waiting for the cores: its samples/s measures the host's other work. Such a run, or its
baseline, gets a note, and its speedup and efficiency are marked in the table (`?`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ddpcli.compare.row import ComparisonRow
from ddpcli.compare.runs import ComparedRun

STARVED_SHARE = 0.35  # of one core, over the timed steps (the median rank)
WAITING_SHARE = 0.3  # a step whose data wait or exposed communication is this share: its idle CPU is explained


def cpu_starved(run: ComparedRun) -> float | None:
    """The run's CPU share (cores' worth per process) when it was far below what a CPU run needs; else None."""
    observed = run.record.observed
    breakdown = observed.time_breakdown if observed is not None else None
    if breakdown is None or breakdown.clock != "host" or (observed is not None and observed.device != "cpu"):
        return None
    median = breakdown.median
    share, step = median.cpu_share, median.step_s
    if share is None or not step or share >= STARVED_SHARE:
        return None
    if (median.data_s or 0.0) / step >= WAITING_SHARE or (median.comm_s or 0.0) / step >= WAITING_SHARE:
        return None
    return share


def _load(run: ComparedRun) -> str:
    breakdown = run.record.observed.time_breakdown if run.record.observed is not None else None
    loads = [rank.load_average for rank in (breakdown.ranks if breakdown else []) if rank.load_average is not None]
    return f", the host's load average {max(loads):.1f} at its end" if loads else ""


def speed_unreliable(run: ComparedRun, base: ComparedRun) -> bool:
    return cpu_starved(run) is not None or cpu_starved(base) is not None


def throughput_notes(rows: Sequence[ComparisonRow]) -> list[str]:
    """A note for each run whose throughput (or its baseline's) measured the host, and for each run with no timed
    step after the first."""
    base = next((row for row in rows if row.is_baseline), None)
    notes = []
    for row in rows:
        run = row.run.record
        if (share := cpu_starved(run)) is not None:
            notes.append(
                f"{row.label}: its processes got {share:.0%} of a core each{_load(run)}: the host's other work set "
                "its samples/s, so its speedup (marked ?) is not a measure of DDP; rerun on a quiet host"
            )
        elif base is not None and not row.is_baseline and (share := cpu_starved(base.run.record)) is not None:
            notes.append(
                f"{row.label}: its baseline {base.label} got {share:.0%} of a core per process"
                f"{_load(base.run.record)}: the host's other work set the baseline's samples/s, so this speedup "
                "(marked ?) is not a measure of DDP"
            )
        steps = row.run.metrics.rows
        if steps == 1 and row.run.metrics.samples_per_s is None:
            notes.append(
                f"{row.label}: 1 logged step, none timed after the first (whose time holds the start-up): no "
                "samples/s, speedup or prediction error"
            )
        notes += _token_note(row)
    return [f"{note}." for note in notes]


def _token_note(row: ComparisonRow) -> list[str]:
    """A model fed token ids: its steps and throughput in tokens, what its own script counts (build-nanogpt)."""
    observed = row.run.record.record.observed
    if observed is None or not observed.tokens_per_step or not observed.tokens_per_micro_batch:
        return []
    per_device = observed.per_device_batch_size
    length = observed.tokens_per_micro_batch // per_device if per_device else None
    sequence = f" (a sample is a sequence of {length} tokens)" if length else ""
    speed = row.samples_per_s
    rate = f", {speed * length:,.0f} tokens/s" if speed is not None and length else ""
    return [f"{row.label}: {observed.tokens_per_step:,} tokens per optimizer step{sequence}{rate}"]
