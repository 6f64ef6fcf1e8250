"""Where a run's step time went, per rank and the median over ranks, from each rank's last `timing` row. Pure.

The observer (ddpcli.worker.observer.timing) sums, over the optimizer steps after the first: the data wait, forward
+ backward (up to the return of backward, which on a DDP model waits for the last all-reduce), the optimizer step
and the step itself. The DDP reducer's own timers give the exposed communication of one synchronising backward:
backward_comm_time - backward_compute_comm_overlap_time (ns; the all-reduce time that backward computation did not
hide) of each iteration it sampled in the same steps (`ddp_samples`: iterations up to 10 one by one, then one in
100; ddpcli.worker.observer.reducer_samples), averaged as the window's iterations: each of the first ten stands for
itself, the later samples share the iterations after them equally (without a later sample, the mean of the first
ones). Rows without samples (older runs) fall back on the reducer's avg_* timers, which hold iteration 1 too (the
first step's all-reduce, left out of the window). Per optimizer step, in seconds:

    comm    = exposed communication per synchronising backward x synchronising backwards per step
    compute = forward + backward - comm
    other   = step - data - forward + backward - optimizer (the loop's own work, logging, a scheduler; >= 0)

Without a DDP reducer, the script's own collectives (`dist.all_reduce` of the gradients by hand, FSDP's all-gathers
and reduce-scatters: ddpcli.worker.observer.collectives) are the communication, timed on the host: comm is their
seconds per step, taken out of forward + backward for the part inside it and out of `other` for the rest. What was
not measured is null, never 0: `comm_from` says where comm came from (`ddp_reducer`, `script_collectives`,
`no_collectives`: the script called none, so 0 is what happened) or why it is null (`not_measured: ...`).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict

PARTS = ("data_s", "compute_s", "comm_s", "optimizer_s", "other_s")


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=True)


class StepTime(_Model):
    """Seconds per optimizer step, and the peak memory."""

    step_s: float | None = None
    data_s: float | None = None
    compute_s: float | None = None
    comm_s: float | None = None
    optimizer_s: float | None = None
    other_s: float | None = None
    peak_memory_bytes: int | None = None
    cpu_share: float | None = None  # process CPU seconds / wall seconds over the timed steps (cores' worth used)
    forward_backward_sd_s: float | None = None  # standard deviation over steps of forward + backward (host clock)


class RankTime(StepTime):
    rank: int
    steps: int  # optimizer steps timed (the first is left out)
    micro_batches_per_step: float | None = None
    all_reduces_per_step: float | None = None  # backwards of a DDP model that synchronised, per optimizer step
    load_average: float | None = None  # the host's 1-minute load average at the run's end
    cpu_wait_s: float | None = None  # the training thread runnable but not running (waiting for a CPU), per step
    comm_from: str | None = None  # where comm_s came from on this rank, or why it is null (module docstring)


class TimeBreakdown(_Model):
    clock: str | None = None  # "host" (CPU) or "cuda_events"
    comm_from: str | None = None  # "ddp_reducer" when the exposed communication was measured, else None
    comm_samples: int | None = None  # the reducer's sampled iterations of the window it came from (None: avg_*)
    memory_source: str | None = None  # "peak_rss" or "cuda_max_allocated"
    median: StepTime
    ranks: list[RankTime]


class ModelState(_Model):
    """What the parameters and the optimizer hold on one device (rank 0), in bytes: the static memory."""

    optimizer: str | None = None
    optimizer_options: dict[str, Any] = {}
    param_count: int | None = None
    param_dtype: str | None = None
    param_bytes: int | None = None  # this rank's: a sharded run's shard
    full_param_bytes: int | None = None  # the whole parameters, where the rank held a shard of them
    grad_bytes: int | None = None
    optimizer_state_bytes: int | None = None
    bucket_cap_bytes: int | None = None
    gradient_as_bucket_view: bool | None = None
    memory_at_first_forward_bytes: int | None = None  # the process with its model, before any activation
    peak_memory_bytes: int | None = None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def exposed_comm_per_sync(ddp: Any) -> float | None:
    """Seconds of one synchronising backward's all-reduce not hidden behind backward computation (reducer timers)."""
    if not isinstance(ddp, dict):
        return None
    comm, overlap = (
        _number(ddp.get("avg_backward_comm_time")),
        _number(ddp.get("avg_backward_compute_comm_overlap_time")),
    )
    if comm is None or overlap is None or not _whole(ddp.get("iteration")):
        return None
    return max(comm - overlap, 0.0) / 1e9


EARLY_SAMPLES = 10  # the reducer samples each of its first 10 iterations, then one in its sample rate (100)


def exposed_comm_in_window(samples: Any, syncs: float) -> float | None:
    """Seconds of one synchronising backward's exposed all-reduce, the mean over the `syncs` synchronising
    backwards of the window, from the reducer's samples of it (module docstring); None without a usable sample."""
    if not isinstance(samples, list) or syncs <= 0:
        return None
    early, late = [], []
    for sample in samples:
        if not (isinstance(sample, list) and len(sample) == 5 and all(_whole(value) is not None for value in sample)):
            return None
        iteration, _, _, comm, overlap = sample
        (early if iteration <= EARLY_SAMPLES else late).append(max(comm - overlap, 0) / 1e9)
    if not early and not late:
        return None
    if not late:
        return sum(early) / len(early)
    rest = max(syncs - len(early), len(late))
    return (sum(early) + rest * sum(late) / len(late)) / (len(early) + rest)


def rank_time(rank: int, row: dict[str, Any]) -> RankTime | None:
    steps = _whole(row.get("steps"))
    step, fb = _number(row.get("step_s")), _number(row.get("forward_backward_s"))
    if not steps or step is None or fb is None:
        return None
    data, optimizer = _number(row.get("data_s")) or 0.0, _number(row.get("optimizer_s")) or 0.0
    syncs = (_number(row.get("synced_backwards")) or 0.0) / steps
    per_sync = exposed_comm_in_window(row.get("ddp_samples"), syncs * steps)
    if per_sync is None:
        per_sync = exposed_comm_per_sync(row.get("ddp"))
    inside, outside, source = 0.0, 0.0, "ddp_reducer"
    if per_sync is not None:
        comm: float | None = min(per_sync * syncs, fb / steps)
        inside = comm * steps
    else:
        comm, inside, outside, source = _script_comm(row, fb)
    micro = _number(row.get("micro_batches"))
    return RankTime(
        rank=rank,
        steps=steps,
        step_s=step / steps,
        data_s=data / steps,
        compute_s=(fb - inside) / steps,
        comm_s=comm / steps if comm is not None and per_sync is None else comm,
        comm_from=source,
        optimizer_s=optimizer / steps,
        other_s=max(step - data - fb - optimizer - outside, 0.0) / steps,
        peak_memory_bytes=_whole(row.get("peak_memory_bytes")),
        micro_batches_per_step=micro / steps if micro is not None else None,
        all_reduces_per_step=syncs if isinstance(row.get("ddp"), dict) else None,
        cpu_share=cpu / step if (cpu := _number(row.get("cpu_s"))) is not None and step > 0 else None,
        load_average=_number(row.get("load_average")),
        cpu_wait_s=wait / steps if (wait := _number(row.get("cpu_wait_s"))) is not None else None,
        forward_backward_sd_s=_sd(fb, _number(row.get("forward_backward_squares")), steps),
    )


def _script_comm(row: dict[str, Any], fb: float) -> tuple[float | None, float, float, str | None]:
    """(comm seconds over the window or None, the part inside forward + backward, the part outside, comm_from)
    where no DDP reducer timed the communication."""
    if isinstance(row.get("ddp"), dict):
        return None, 0.0, 0.0, "not_measured: the DDP reducer recorded no communication time"
    seen = row.get("script_collectives")
    if not isinstance(seen, dict):
        return 0.0, 0.0, 0.0, None  # a record from before the script's collectives were timed
    calls, untimed = _whole(seen.get("calls")) or 0, _whole(seen.get("untimed")) or 0
    total, inside = _number(seen.get("seconds")), _number(seen.get("inside_forward_backward_s"))
    if not calls and isinstance(row.get("sharded"), str):
        return None, 0.0, 0.0, f"not_measured: the sharding collectives ({row['sharded']}) run inside torch, untimed"
    if not calls:
        return 0.0, 0.0, 0.0, "no_collectives"
    if untimed or total is None or inside is None:
        return None, 0.0, 0.0, "not_measured: the script's collectives were asynchronous or on a GPU"
    inside = min(inside, fb)
    return total, inside, max(total - inside, 0.0), "script_collectives"


def _sd(total: float, squares: float | None, count: int) -> float | None:
    """Standard deviation of per-step values from their sum and sum of squares (None without the squares)."""
    if squares is None or count < 2:
        return None
    mean = total / count
    return math.sqrt(max(squares / count - mean * mean, 0.0) * count / (count - 1))


def time_breakdown(rows: dict[int, dict[str, Any]]) -> TimeBreakdown | None:
    """The breakdown from each rank's last `timing` row (rank -> row); None when no rank timed a step."""
    ranks = [found for rank, row in sorted(rows.items()) if row and (found := rank_time(rank, row)) is not None]
    if not ranks:
        return None
    median = StepTime(
        **{
            key: _median([getattr(r, key) for r in ranks])
            for key in ("step_s", *PARTS, "cpu_share", "forward_backward_sd_s")
        }
    )
    memories = [r.peak_memory_bytes for r in ranks if r.peak_memory_bytes is not None]
    median.peak_memory_bytes = int(statistics.median(memories)) if memories else None
    first = rows[ranks[0].rank]
    return TimeBreakdown(
        clock=first.get("clock") if isinstance(first.get("clock"), str) else None,
        comm_from="ddp_reducer" if exposed_comm_per_sync(first.get("ddp")) is not None else ranks[0].comm_from,
        comm_samples=_window_samples(first),
        memory_source=first.get("memory_source") if isinstance(first.get("memory_source"), str) else None,
        median=median,
        ranks=ranks,
    )


def _window_samples(row: dict[str, Any]) -> int | None:
    """How many reducer samples of the window the rank's exposed communication was averaged over (None: none)."""
    steps, syncs = _whole(row.get("steps")), _number(row.get("synced_backwards"))
    if not steps or not syncs or exposed_comm_in_window(row.get("ddp_samples"), syncs) is None:
        return None
    return len(row["ddp_samples"])


def model_state(rows: dict[int, dict[str, Any]]) -> ModelState | None:
    """Rank 0's (else the lowest rank's) parameter, gradient and optimizer-state bytes."""
    row = next((rows[rank] for rank in sorted(rows) if rows[rank].get("param_bytes") is not None), None)
    if row is None:
        return None
    ddp = row.get("ddp") if isinstance(row.get("ddp"), dict) else {}
    view = _whole(ddp.get("gradient_as_bucket_view"))
    options = row.get("optimizer_options")
    return ModelState(
        optimizer=row.get("optimizer") if isinstance(row.get("optimizer"), str) else None,
        optimizer_options=options if isinstance(options, dict) else {},
        param_count=_whole(row.get("param_count")),
        param_dtype=row.get("param_dtype") if isinstance(row.get("param_dtype"), str) else None,
        param_bytes=_whole(row.get("param_bytes")),
        full_param_bytes=_whole(row.get("full_param_bytes")),
        grad_bytes=_whole(row.get("grad_bytes")),
        optimizer_state_bytes=_whole(row.get("optimizer_state_bytes")),
        bucket_cap_bytes=_whole(ddp.get("bucket_cap_bytes")),
        gradient_as_bucket_view=bool(view) if view is not None else None,
        memory_at_first_forward_bytes=_whole(row.get("memory_at_first_forward_bytes")),
        peak_memory_bytes=_whole(row.get("peak_memory_bytes")),
    )


def _median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None
