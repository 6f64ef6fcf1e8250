"""The compute term of a prediction: forward + backward of one micro-batch as a function of its size. Pure.

A micro-batch of B samples costs a fixed part (Python, dispatch, a kernel launch per layer: the same for 1 sample
or 1,000) plus a part per sample:

    compute per micro-batch = fixed + per_sample x B

One run measures one point of that line, so one baseline alone gives no fixed part: the model is then linear
(fixed = 0), and says so. Several finished runs of the same kind (device, world size, processes per node, threads)
with different per-device batches measure several points: the least-squares line through them, each run's compute
first brought to the first run's conditions (times its own share of a core / the first run's, and its median step
/ mean step, ddpcli.prediction.baseline). A fit with a negative part falls back to linear, saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpcli.prediction.baseline import Baseline


@dataclass(frozen=True)
class ComputeModel:
    fixed_s: float  # seconds per micro-batch whatever its size, at the first baseline's conditions
    per_sample_s: float
    source: str  # how it was found, in words

    def per_micro_batch(self, batch: int) -> float:
        return self.fixed_s + self.per_sample_s * batch

    def as_json(self) -> dict[str, float | str]:
        return {"fixed_s": self.fixed_s, "per_sample_s": self.per_sample_s, "source": self.source}


def same_kind(one: Baseline, other: Baseline) -> bool:
    """Runs whose compute can share one line: same device, world size, processes per node and threads."""
    return (one.device, one.world_size, one.nproc_per_node, one.threads) == (
        other.device, other.world_size, other.nproc_per_node, other.threads
    )  # fmt: skip


def micro_batch_compute(run: Baseline, reference: Baseline) -> float:
    """Seconds of forward + backward per micro-batch of `run`, at the conditions of `reference` (module docstring)."""
    seconds = run.step["compute_s"] / run.grad_accum_steps * run.robust_scale
    if run.device == "cpu" and run.cpu_share and reference.cpu_share:
        seconds *= run.cpu_share / reference.cpu_share
    return seconds


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y) points with at least two distinct x."""
    n = len(points)
    mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def compute_model(baseline: Baseline, others: Sequence[Baseline] = ()) -> ComputeModel:
    """The compute line from the baseline and the other finished runs of its kind (module docstring)."""
    batch = baseline.per_device_batch_size
    own = micro_batch_compute(baseline, baseline)
    linear = own / batch
    kin = [run for run in others if same_kind(run, baseline)]
    points = [(float(batch), own)]
    points += [(float(run.per_device_batch_size), micro_batch_compute(run, baseline)) for run in kin]
    batches = sorted({int(x) for x, _ in points})
    if len(batches) < 2:
        why = f"one per-device batch measured ({batch}), so no fixed cost per micro-batch is known"
        return ComputeModel(0.0, linear, f"linear in the batch: {why}; give --predict-from runs of other batches")
    fixed, per_sample = least_squares(points)
    sizes = ", ".join(str(size) for size in batches)
    if fixed < 0 or per_sample < 0:
        part = "fixed cost" if fixed < 0 else "cost per sample"
        why = f"the line through per-device batches {sizes} gave a negative {part}"
        return ComputeModel(0.0, linear, f"linear in the batch: {why}")
    line = f"{fixed * 1000:.3g} ms a micro-batch + {per_sample * 1e6:.3g} us a sample"
    return ComputeModel(fixed, per_sample, f"fitted to per-device batches {sizes}: {line}")
