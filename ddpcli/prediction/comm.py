"""The communication side of a prediction: DDP's buckets, the ring all-reduce, and the wait for the slowest rank.
Pure, and no pydantic at import (the all-reduce probe, a worker, imports ddp_bucket_sizes through predict).

Waiting for the slowest of W ranks: every rank all-reduces at the end of its backward and waits there for the last,
so a step costs the maximum of W ranks' work, not its mean. With W independent draws of a step's duration from
the baseline's own steps (their empirical distribution, no shape assumed), the expected excess is

    E[max of W] - mean = sum over the sorted durations x_(i), i = 1..n, of x_(i) ((i/n)^W - ((i-1)/n)^W) - mean

(for W = 2 this is half the mean absolute difference of two steps); without per-step durations, the normal
approximation k(W) x sd (k: the expected maximum of W standard normals, 0.56 for 2, 1.03 for 4).

The all-reduce itself is measured as a step meets it (ddpcli.worker.allreduce_probe): after each rank has done
the CPU work a step does before it (probe_work_s), timed from the last rank's arrival, so the wait is not counted
twice.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # predict imports this module
    from ddpcli.prediction.baseline import Baseline
    from ddpcli.prediction.compute import ComputeModel
    from ddpcli.prediction.target import Target

DDP_FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES

# E[max of n standard normals] for n = 1..8; beyond, Blom's approximation (within 1% there).
_EXPECTED_MAX = (0.0, 0.5642, 0.8463, 1.0294, 1.1630, 1.2672, 1.3522, 1.4236)


def expected_max(n: int) -> float:
    """The expected maximum of n independent standard normal variables."""
    if n <= len(_EXPECTED_MAX):
        return _EXPECTED_MAX[max(n, 1) - 1]
    return statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def excess_of_max(durations: Sequence[float], world: int) -> float:
    """E[max of `world` independent draws from `durations`] - their mean, as a fraction of the mean (module
    docstring); 0 for one rank or fewer than two durations."""
    if world <= 1 or len(durations) < 2:
        return 0.0
    ordered, n = sorted(durations), len(durations)
    mean = sum(ordered) / n
    if mean <= 0:
        return 0.0
    expected = sum(value * ((i / n) ** world - ((i - 1) / n) ** world) for i, value in enumerate(ordered, start=1))
    return max(expected - mean, 0.0) / mean


def ring_allreduce_s(size_bytes: int, world: int, link_gbps: float, latency_s: float = 0.0) -> float:
    """Ring all-reduce (Patarasuk and Yuan 2009): 2 (n-1)/n x S / B + 2 (n-1) alpha."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) / world * size_bytes / (link_gbps * 1e9 / 8) + 2 * (world - 1) * latency_s


def ddp_bucket_sizes(size_bytes: int, cap_bytes: int = 25 * 1024 * 1024) -> list[int]:
    """The bucket sizes DDP all-reduces gradients of `size_bytes` in: a small first bucket, then up to the cap."""
    sizes, left = [], size_bytes
    first = min(left, DDP_FIRST_BUCKET_BYTES)
    if first:
        sizes.append(first)
        left -= first
    while left > 0:
        sizes.append(min(left, cap_bytes))
        left -= sizes[-1]
    return sizes


PROBE_WORK_MIN_S, PROBE_WORK_MAX_S, PROBE_WORK_STEP_S = 0.005, 0.03, 0.005


def probe_work_s(compute_per_all_reduce_s: float, cpu_share: float | None) -> float:
    """CPU seconds of busy work a rank does before each busy round of the all-reduce probe: the compute a planned
    rank does between two all-reduces at the baseline's pace (its wall seconds x the cores' worth it got), rounded
    to 5 ms (so the cache is shared by near batches) within 5 to 30 ms (the probe stays under a few seconds)."""
    cpu = max(compute_per_all_reduce_s, 0.0) * (cpu_share if cpu_share and cpu_share > 0 else 1.0)
    steps = round(min(max(cpu, PROBE_WORK_MIN_S), PROBE_WORK_MAX_S) / PROBE_WORK_STEP_S)
    return round(steps * PROBE_WORK_STEP_S, 3)


def all_reduces_per_step(baseline: Baseline, target: Target) -> float:
    """All-reduces of a planned optimizer step: the baseline's per micro-batch (1 without no_sync, 1/A with it) x
    the target's accumulation, at least 1; where the baseline had no DDP model to tell, 1 (none on one process)."""
    if baseline.all_reduces_per_micro_batch is None:
        return 1.0 if target.world_size > 1 else 0.0
    return max(baseline.all_reduces_per_micro_batch * target.grad_accum_steps, 1.0)


def work_before(baseline: Baseline, target: Target, compute: ComputeModel) -> float:
    """CPU seconds a planned rank computes before each all-reduce, for the probe (probe_work_s): its micro-batches
    between two all-reduces, each at the compute line's wall seconds."""
    micro_batches = target.grad_accum_steps / max(all_reduces_per_step(baseline, target), 1.0)
    return probe_work_s(compute.per_micro_batch(target.per_device_batch_size) * micro_batches, baseline.cpu_share)
