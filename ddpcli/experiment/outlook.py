"""What a known gradient noise scale says about each planned global batch (McCandlish et al. 2018).

With the critical batch B_crit taken as the simple noise scale B_simple, a run at global batch B needs
(1 + B_crit/B0) / (1 + B_crit/B) times fewer optimizer steps than the baseline at B0, and uses a fraction
1 / (1 + B/B_crit) of its samples as efficiently as a tiny batch would. Far above B_crit, more devices buy
almost no fewer steps. Pure arithmetic over ddpcli.noise_scale: no files (a run directory's measured noise
scale is read by ddpcli.rundir.metrics.measured_noise_scale), no torch, no rich.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddpcli.errors import UserError
from ddpcli.experiment.resolved import ResolvedRun
from ddpcli.noise_scale import data_efficiency, step_speedup

FAR_ABOVE_CRITICAL = 4  # a global batch this many times the critical batch wastes most of its samples


@dataclass(frozen=True)
class BatchOutlook:
    critical_batch_size: float
    predicted_step_speedup: float  # fewer steps than the baseline's global batch needs, as a factor
    data_efficiency: float  # E_min / E

    @classmethod
    def of(cls, batch: int, baseline_batch: int, critical_batch: float) -> BatchOutlook:
        return cls(
            critical_batch_size=critical_batch,
            predicted_step_speedup=step_speedup(batch, baseline_batch, critical_batch),
            data_efficiency=data_efficiency(batch, critical_batch),
        )

    def as_json(self) -> dict[str, float]:
        return {
            "critical_batch_size": self.critical_batch_size,
            "predicted_step_speedup": self.predicted_step_speedup,
            "data_efficiency": self.data_efficiency,
        }


def batch_outlook(run: ResolvedRun, baseline: ResolvedRun, critical_batch: float | None) -> BatchOutlook | None:
    b_crit = critical_batch if critical_batch is not None else run.known_noise_scale
    if b_crit is None:
        return None
    global_batch = run.plan.global_batch_size
    if not math.isfinite(global_batch / b_crit):
        raise UserError(f"noise scale {b_crit:g} is too small to compare with global batch {global_batch}")
    return BatchOutlook.of(global_batch, baseline.plan.global_batch_size, b_crit)


def far_above_critical(batch: float, critical_batch: float) -> str | None:
    """The warning clause for a batch far above the critical batch, or None."""
    ratio = batch / critical_batch
    if ratio <= FAR_ABOVE_CRITICAL:
        return None
    return f"at {ratio:.0f}x the critical batch, more devices buy almost no fewer steps"


def outlook_note(run: ResolvedRun, outlook: BatchOutlook) -> str | None:
    warning = far_above_critical(run.plan.global_batch_size, outlook.critical_batch_size)
    if warning is None:
        return None
    return (
        f"Global batch {run.plan.global_batch_size} (noise scale {outlook.critical_batch_size:.3g}) should need only "
        f"{outlook.predicted_step_speedup:.2f}x fewer steps than the baseline and uses {outlook.data_efficiency:.0%} "
        f"of its samples efficiently: {warning}."
    )
