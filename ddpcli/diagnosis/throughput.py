"""Throughput that measures DDP, or none: a speedup from a starved baseline is no speedup. Pure.

dist_tuto at 2 processes once showed 4.10x (205% efficiency) because its baseline ran at 15% of a core (the host's
load 9.6 on 2 cores); repeated, 0.57x and 1.0x. A CPU training process busy computing uses about one core's worth
of CPU time per second (`time_breakdown` `cpu_share`); one far below that, in steps neither waiting on data nor
on communication, was waiting for the cores: its samples/s measures the host's other work. Such a run, or its
baseline, gets a note, and its speedup and efficiency are marked in the table (`?`).

A scaling efficiency beyond linear is marked too, whatever the CPU shares: N processes do at most N times the work
of one (short of cache effects), so a ported quickstart script's 4.56x (228%) at 2 processes of the baseline's own
per-device batch, on a host at load 2.2, measured the host: the baseline computed 30.6 ms a step where each of the
run's processes took 6-8 ms for the same 64 samples. The note gives those numbers, as recorded.
"""

from __future__ import annotations

from ddpcli.diagnosis.compared import ComparedRun, ComparisonRow
from ddpcli.rundir.timing import TimeBreakdown

STARVED_SHARE = 0.35  # of one core, over the timed steps (the median rank)
BEYOND_LINEAR = 1.25  # scaling efficiency above this is no DDP speedup (step-time noise stays well below it)
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
    load = _max_load(run)
    return f", the host's load average {load:.1f} at its end" if load is not None else ""


def speed_unreliable(run: ComparedRun, base: ComparedRun, efficiency: float | None) -> bool:
    beyond = _beyond(run, base, efficiency)
    return beyond or cpu_starved(run) is not None or cpu_starved(base) is not None


def _beyond(run: ComparedRun, base: ComparedRun, efficiency: float | None) -> bool:
    """Beyond linear at more processes, each with no more samples a step than the baseline's process: a process that
    takes a larger batch may well run faster per sample, and that is no DDP speedup to doubt."""
    if efficiency is None or efficiency <= BEYOND_LINEAR or (run.world_size or 0) <= (base.world_size or 0):
        return False
    work = [_per_process(run), _per_process(base)]
    return None not in work and work[0] <= work[1]  # type: ignore[operator]


def _per_process(run: ComparedRun) -> int | None:
    per_device, accumulation = run.per_device_batch_size, run.grad_accum_steps
    return per_device * (accumulation or 1) if per_device is not None else None


def _beyond_linear(row: ComparisonRow, base: ComparisonRow) -> str | None:
    """The note of a run whose efficiency is beyond linear: what each run's median rank computed a step, as recorded."""
    efficiency = row.scaling_efficiency
    if efficiency is None or not _beyond(row.run.record, base.run.record, efficiency):
        return None
    text = f"{row.label}: {efficiency:.0%} scaling efficiency is beyond linear, which DDP does not give"
    text += " (short of cache effects)"
    run, baseline = row.run.record, base.run.record
    computed = [_compute_s(run), _compute_s(baseline)]
    per_process = [run.per_device_batch_size, baseline.per_device_batch_size]
    if None not in computed and per_process[0] is not None and per_process[0] == per_process[1]:
        text += (
            f": at {per_process[0]} samples per process the baseline {base.label} computed "
            f"{computed[1] * 1000:.3g} ms a step, this run {computed[0] * 1000:.3g} ms (median rank)"
        )
    loads = [_max_load(baseline), _max_load(run)]
    if None not in loads:
        text += f", the host's load average {loads[0]:.1f} and {loads[1]:.1f} at their ends"
    return text + "; the speedup (marked ?) measures how the host served the two runs, not DDP"


def _breakdown(run: ComparedRun) -> TimeBreakdown | None:
    return run.record.observed.time_breakdown if run.record.observed is not None else None


def _compute_s(run: ComparedRun) -> float | None:
    breakdown = _breakdown(run)
    return breakdown.median.compute_s if breakdown is not None else None


def _max_load(run: ComparedRun) -> float | None:
    breakdown = _breakdown(run)
    loads = [rank.load_average for rank in (breakdown.ranks if breakdown else []) if rank.load_average is not None]
    return max(loads) if loads else None


def throughput_row_notes(row: ComparisonRow, base: ComparisonRow | None) -> list[str]:
    """A note if the run's throughput (or its baseline's, the row `base`) measured the host, and if it has no
    timed step after the first."""
    notes = []
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
    elif base is not None and not row.is_baseline and (beyond := _beyond_linear(row, base)) is not None:
        notes.append(beyond)
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
