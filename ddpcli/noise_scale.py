"""The gradient noise scale and what it implies for the batch size: pure arithmetic, no torch.

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training". With G the true gradient and Sigma the
per-example gradient covariance, a batch of B examples has E|G_B|^2 = |G|^2 + tr(Sigma) / B. Measuring the
squared gradient norm at two batch sizes B_small < B_big (in data-parallel training: one rank's gradient before
averaging, and the averaged one) gives unbiased estimates of both terms (their Appendix A.1). Each estimate is
noisy, so one keeps exponential moving averages and takes the ratio of the averages: the simple noise scale
B_simple = tr(Sigma) / |G|^2, which approximates the critical batch B_crit beyond which more examples per step
buy almost no fewer steps.

Kept apart from the runtime so that `plan` and `compare` can use it without torch, and so it is easy to test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def true_grad_sq(sq_small: float, sq_big: float, b_small: float, b_big: float) -> float:
    """Unbiased |G|^2 from E|G_B|^2 = |G|^2 + tr(Sigma)/B at two batch sizes: (B_big|G_big|^2 - B_small|G_small|^2)
    / (B_big - B_small)."""
    _check_batches(b_small, b_big)
    return (b_big * sq_big - b_small * sq_small) / (b_big - b_small)


def trace_sigma(sq_small: float, sq_big: float, b_small: float, b_big: float) -> float:
    """Unbiased tr(Sigma): (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)."""
    _check_batches(b_small, b_big)
    return (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)


def simple_noise_scale(sq_small: float, sq_big: float, b_small: float, b_big: float) -> float | None:
    """B_simple = tr(Sigma) / |G|^2 from (averaged) squared norms; None while either estimate is not positive.

    Each estimate is a difference of two noisy numbers, so early in a measurement either can come out zero or
    negative; the ratio means nothing then, and no value is better than a huge or negative one.
    """
    grad_sq = true_grad_sq(sq_small, sq_big, b_small, b_big)
    trace = trace_sigma(sq_small, sq_big, b_small, b_big)
    return trace / grad_sq if grad_sq > 0 and trace > 0 else None


def _check_batches(b_small: float, b_big: float) -> None:
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < B_small < B_big, got B_small={b_small}, B_big={b_big}")


@dataclass
class NoiseScaleTracker:
    """EMAs of |G_small|^2 and |G_big|^2 over optimizer steps; the noise scale is the ratio of their estimates.

    The EMA starts at zero and is divided by the accumulated weight (1 - beta^n), so the first steps are not
    biased towards zero. Averaging the squared norms rather than the per-step estimates gives the same EMAs of
    |G|^2 and tr(Sigma) (the estimators are linear in the two norms), and it lets each rank keep its own tracker
    of its local norm and average the three numbers over ranks only when a value is read. Non-finite steps (an
    AMP overflow) are skipped.
    """

    beta: float = 0.99
    ema_small: float = 0.0
    ema_big: float = 0.0
    weight: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.beta < 1.0:
            raise ValueError(f"the EMA factor beta must be in [0, 1), got {self.beta}")

    def update(self, sq_small: float, sq_big: float) -> None:
        if not (math.isfinite(sq_small) and math.isfinite(sq_big)):
            return
        self.ema_small = self.beta * self.ema_small + (1.0 - self.beta) * sq_small
        self.ema_big = self.beta * self.ema_big + (1.0 - self.beta) * sq_big
        self.weight = self.beta * self.weight + (1.0 - self.beta)

    @property
    def grad_sq_small(self) -> float | None:
        return self.ema_small / self.weight if self.weight else None

    @property
    def grad_sq_big(self) -> float | None:
        return self.ema_big / self.weight if self.weight else None

    def noise_scale(self, b_small: float, b_big: float) -> float | None:
        """B_simple from the averages (the start-up weight cancels in the ratio)."""
        return simple_noise_scale(self.ema_small, self.ema_big, b_small, b_big) if self.weight else None


# -- what B_crit ~ B_simple implies -------------------------------------------------------------------------
# Steps and examples trade off as (S/S_min - 1)(E/E_min - 1) = 1, with B_crit = E_min / S_min (their eq. 2.11).


def step_speedup(batch: float, baseline_batch: float, b_crit: float) -> float:
    """How many times fewer steps batch B needs than the baseline batch B0: (1 + B_crit/B0) / (1 + B_crit/B).

    Bounded by 1 + B_crit/B0 however large B grows: past B_crit, more devices buy almost no fewer steps.
    """
    return (1.0 + b_crit / baseline_batch) / (1.0 + b_crit / batch)


def data_efficiency(batch: float, b_crit: float) -> float:
    """E_min / E = 1 / (1 + B/B_crit): the fraction of examples that were not wasted at batch B (1/2 at B_crit)."""
    return 1.0 / (1.0 + batch / b_crit)
