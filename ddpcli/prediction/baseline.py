"""The finished run a prediction starts from: its time breakdown, its steps' durations, its model's bytes. Pure.

The breakdown (ddpcli.rundir.timing) sums each term over the steps after the first, so a noisy spell (a few slow
steps) moves every term. Rank 0's per-step durations (metrics.jsonl's `time`, step to step) say how typical the
mean was: the first WARMUP_FRACTION of them are left out too (warm-up), and the prediction scales the baseline's
host terms by median / mean of the rest (`robust_scale`), when at least MIN_STEPS remain. Not on a CPU baseline
whose share of a core is known: there a spell is mostly other jobs taking the cores, and the contention term
(ddpcli.prediction.contention) already counts the baseline's work in CPU seconds (mean step x mean share),
which such a spell does not change; scaling to the median step as well would count the spell out twice (measured:
a baseline that ran half its steps at a full core and half at half a core, median step at the full core, mean
share 0.70, predicted its 2-process runs 30-80% too fast).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TERMS = ("data_s", "compute_s", "comm_s", "optimizer_s", "other_s")
WARMUP_FRACTION = 0.1  # of the steps after the first, left out of the durations as warm-up (at least one)
MIN_STEPS = 8  # durations needed before their median is trusted over the breakdown's mean


class NoBaseline(ValueError):
    """The run cannot serve as a baseline (not observed, or no step was timed)."""


@dataclass(frozen=True)
class Baseline:
    """The numbers of one finished run the model starts from."""

    world_size: int
    nproc_per_node: int
    per_device_batch_size: int
    grad_accum_steps: int
    device: str
    threads: int
    cores: int
    step: dict[str, float]  # TERMS and step_s, of the median rank
    all_reduces_per_micro_batch: float | None  # None: not DDP
    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    optimizer: str | None
    buckets_are_views: bool
    memory_at_first_forward: int | None
    peak_memory: int | None
    cpu_share: float | None = None  # the cores' worth the baseline's process got (CPU seconds / wall seconds)
    compute_cv: float | None = None  # standard deviation / mean over steps of forward + backward
    load_average: float | None = None  # the host's 1-minute load average when the baseline ended
    step_durations: tuple[float, ...] = ()  # rank 0's steady steps (seconds each, warm-up left out)

    @property
    def samples_per_s(self) -> float:
        return self.world_size * self.per_device_batch_size * self.grad_accum_steps / self.step["step_s"]

    @property
    def gradient_bytes(self) -> int:
        return self.grad_bytes or self.param_bytes

    @property
    def robust_scale(self) -> float:
        """Median / mean of the steady steps' durations (1 with fewer than MIN_STEPS of them, and on CPU with its
        share of a core known: module docstring)."""
        if len(self.step_durations) < MIN_STEPS or (self.device == "cpu" and self.cpu_share):
            return 1.0
        mean = statistics.fmean(self.step_durations)
        return statistics.median(self.step_durations) / mean if mean > 0 else 1.0


def steady_durations(step_times: Sequence[float]) -> tuple[float, ...]:
    """Per-step durations from the times at which consecutive steps ended, warm-up left out: the first duration
    is the second step's (the breakdown leaves the first step out too), then WARMUP_FRACTION more go."""
    durations = [later - earlier for earlier, later in itertools.pairwise(step_times)]
    skip = max(1, math.ceil(len(durations) * WARMUP_FRACTION)) if len(durations) > 1 else 0
    return tuple(value for value in durations[skip:] if value > 0)


SHARDED = (
    "it was a sharded run (its ranks held shards of the parameters: FSDP): predictions model DDP, one all-reduce of "
    "the full gradients per step and the full parameters on every device, not sharded runs"
)


def baseline_from(observed: Any, timing_row: dict[str, Any], step_times: Sequence[float] = ()) -> Baseline:
    """The baseline from a run's `observed` (run.json's, ddpcli.rundir.record.Observed, or None), its rank 0's last
    `timing` row (threads, cores, processes) and the times at which its steps ended (metrics.jsonl, in step order;
    empty when unknown). `observed` is read by attribute: this package is a leaf, which the all-reduce probe (a
    worker) imports too, so it imports no run record, not even for type checking."""
    if observed is None or observed.time_breakdown is None or observed.model_state is None:
        raise NoBaseline("it was not observed, or it timed no optimizer step after its first")
    median, state = observed.time_breakdown.median, observed.model_state
    if state.full_param_bytes is not None:
        raise NoBaseline(SHARDED)
    if not median.step_s or not observed.per_device_batch_size or state.param_bytes is None:
        raise NoBaseline("its time breakdown or its batch is unknown")
    first = observed.time_breakdown.ranks[0]
    syncs = first.all_reduces_per_step
    micro = first.micro_batches_per_step or float(observed.grad_accum_steps or 1)
    return Baseline(
        world_size=observed.world_size or 1,
        nproc_per_node=_positive(timing_row.get("local_world_size"), 1),
        per_device_batch_size=observed.per_device_batch_size,
        grad_accum_steps=observed.grad_accum_steps or 1,
        device=observed.device or "cpu",
        threads=_positive(timing_row.get("threads"), 1),
        cores=_positive(timing_row.get("cores"), 1),
        step={"step_s": median.step_s, **{key: getattr(median, key) or 0.0 for key in TERMS}},
        all_reduces_per_micro_batch=syncs / micro if syncs is not None and micro else None,
        param_bytes=state.param_bytes,
        grad_bytes=state.grad_bytes or 0,
        optimizer_state_bytes=state.optimizer_state_bytes or 0,
        optimizer=state.optimizer,
        buckets_are_views=bool(state.gradient_as_bucket_view),
        memory_at_first_forward=state.memory_at_first_forward_bytes,
        peak_memory=state.peak_memory_bytes,
        cpu_share=median.cpu_share,
        load_average=first.load_average,
        compute_cv=_cv(median.forward_backward_sd_s, (median.compute_s or 0.0) + (median.comm_s or 0.0)),
        step_durations=steady_durations(step_times),
    )


def _cv(sd: float | None, mean: float) -> float | None:
    return sd / mean if sd is not None and mean > 0 else None


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
