"""Two lr schedules side by side, against samples seen: did a run's schedule do what its reference's did? Pure.

Each run's lr per optimizer step is a function of the samples it had trained on (metrics.jsonl: `samples`, `lr`),
as a share of the samples its plan holds (so runs planned with equal steps and different batches compare per
step, as their schedules are written). Runs planned from one baseline keep its schedule in samples (ddpcli keeps
the warmup's samples, a schedule over the run's own steps covers the same samples), so after scaling by the
planned lr ratio the two functions agree, whatever the batch: a cosine that never reaches its base lr agrees with
itself. They disagree when a schedule advanced at another rate (accelerate steps a prepared scheduler once per
process per optimizer step; a scheduler stepped per micro-batch, or per epoch where the other steps per step),
ended early, or sat at 0.

A step's lr is the schedule's value where the step starts (torch's schedulers step after the optimizer: the lr
of the steps done so far), or where it ends (a warmup of (done + 1) / warmup steps). So the reference is its lr
placed at each step's start, interpolated in between; the run's lr of a step must lie within the reference's range
from where the step starts to the reference's next step, or from the reference's step before where it ends to
there, give or take TOLERANCE of the reference's peak and its change of slope there (batches of different sizes
then line up).
When that fails, time factors are tried: factor k maps the run's samples s to the reference's k x s. The k that
explains the most of the steps it can check (k x s within what the reference ran) says how much faster (k > 1) or
slower the run's schedule advanced.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TOLERANCE = 0.01  # of the reference's (scaled) peak lr
FIT = 0.95  # the share of checkable steps a time factor must explain
MIN_COVERAGE = 0.25  # and the share of the run's steps it must leave checkable
MIN_OFF = 0.05  # a finding needs at least this share of the checked steps off, and 2 steps: one odd step is no schedule
FACTORS = tuple(sorted({float(n) for n in range(2, 17)} | {1 / n for n in range(2, 17)}))


@dataclass(frozen=True)
class Point:
    """One optimizer step: samples seen after it (cumulative), its lr, its number, and the samples seen before it
    (where the previous row is not at hand, a subsampled curve: the mean step since the previous point)."""

    samples: float
    lr: float
    step: int
    start: float = 0.0


@dataclass(frozen=True)
class ScheduleMismatch:
    steps: int  # the run's steps that could be checked against the reference
    steps_off: int  # of those, the steps whose lr the reference's schedule does not give at the same samples
    first_off: int  # the first such step
    zero_steps: int  # steps at lr 0 where the reference's lr was not 0
    first_zero: int | None
    factor: float | None  # the run's schedule advanced this many times as fast per sample; None: no factor fits


def points(rows: Iterable[tuple[float | None, float | None, int | None]], scale: float = 1.0) -> list[Point]:
    """Points from (samples, lr, step) rows with finite values, in increasing samples and steps (samples divided
    by `scale`: what one unit of the other run's samples is worth)."""
    found: dict[float, tuple[float, int]] = {}
    for samples, lr, step in rows:
        if samples is None or lr is None or step is None or not (math.isfinite(samples) and math.isfinite(lr)):
            continue
        if samples > 0 and step > 0:
            found[samples / scale] = (lr, step)
    result: list[Point] = []
    previous_samples, previous_step = 0.0, 0
    for samples in sorted(found):
        lr, step = found[samples]
        if step <= previous_step:
            return []  # steps that do not increase with samples: not one run's timeline
        start = samples - (samples - previous_samples) / (step - previous_step)
        result.append(Point(samples, lr, step, start))
        previous_samples, previous_step = samples, step
    return result


def compare_schedules(
    run: Sequence[Point],
    reference: Sequence[Point],
    lr_ratio: float,
    factors: Iterable[float] = FACTORS,
    preferred: Iterable[float] = (),
) -> ScheduleMismatch | None:
    """How the run's schedule differs from `lr_ratio` x the reference's, per sample seen; None when it does not
    (or when too little overlaps to tell). Among factors that explain the run equally well, one of `preferred`
    (the ratio of the runs' processes, of their accumulation, one step per epoch) wins: a slowly changing schedule
    cannot tell 1/14 from 1/16 by itself."""
    if len(run) < 2 or len(reference) < 2 or not math.isfinite(lr_ratio) or lr_ratio <= 0:
        return None
    ref = _Reference(reference, lr_ratio)
    if ref.peak <= 0:
        return None
    checked, off = _check(run, ref, 1.0)
    steps = sum(checked.values())
    if not steps or sum(off.values()) < max(2, MIN_OFF * steps):
        return None
    zeros = {step: weight for step, weight in checked.items() if _at_zero(run, step, ref)}
    return ScheduleMismatch(
        steps=steps,
        steps_off=sum(off.values()),
        first_off=min(off),
        zero_steps=sum(zeros.values()),
        first_zero=min(zeros) if zeros else None,
        factor=_best_factor(run, ref, {*factors, *preferred}, set(preferred)),
    )


class _Curve:
    """lr at knots (samples), interpolated in between; `held` is a segment (low, high, lr) that was extrapolated,
    over which the lr may also have been `lr`."""

    def __init__(self, knots: list[float], lrs: list[float], held: tuple[float, float, float]) -> None:
        self.knots, self.lrs, self.held = knots, lrs, held
        # |change of slope| at each inner knot: kinks[i] is at knot i + 1 (range() asks for the largest near it)
        self.kinks = [abs(a - 2 * b + c) for a, b, c in zip(lrs, lrs[1:], lrs[2:], strict=False)]

    def at(self, samples: float) -> float:
        index = bisect.bisect_left(self.knots, samples)
        if index <= 0:
            return self.lrs[0]
        if index >= len(self.knots):
            return self.lrs[-1]
        x0, x1 = self.knots[index - 1], self.knots[index]
        t = (samples - x0) / (x1 - x0) if x1 > x0 else 1.0
        return self.lrs[index - 1] + (self.lrs[index] - self.lrs[index - 1]) * t

    def range(self, low: float, high: float) -> tuple[float, float]:
        """Lowest and highest lr over the samples [low, high], widened by the largest change of slope among the
        knots around them: at a kink between two of the reference's steps (a warmup's end) it cannot tell more."""
        start, stop = bisect.bisect_right(self.knots, low), bisect.bisect_left(self.knots, high)
        values = [self.at(low), self.at(high), *self.lrs[start:stop]]
        held_low, held_high, held = self.held
        if low < held_high and high > held_low:
            values.append(held)
        margin = max(self.kinks[max(start - 3, 0) : stop], default=0)  # the knots from start - 2 to stop
        return min(values) - margin, max(values) + margin

    def next_knot(self, samples: float) -> float:
        index = bisect.bisect_right(self.knots, samples)
        return self.knots[index] if index < len(self.knots) else self.knots[-1]

    def previous_knot(self, samples: float) -> float:
        index = bisect.bisect_left(self.knots, samples)
        return self.knots[index - 1] if index > 0 else self.knots[0]


class _Reference:
    """The reference's scaled lr as a function of samples, two ways: each step's lr placed where the step starts
    (extended over its last step as the schedule went on), and placed where it ends (extended back to 0)."""

    def __init__(self, reference: Sequence[Point], ratio: float) -> None:
        lrs = [point.lr * ratio for point in reference]
        first, last = reference[0], reference[-1]
        starts = [point.start for point in reference]
        ends = [point.samples for point in reference]
        self.starts = _Curve(
            [*starts, last.samples], [*lrs, _extended(starts, lrs, last.samples)], (last.start, last.samples, lrs[-1])
        )
        # Within its first step the reference shows nothing of a warmup that ends there: from 0 (a warmup's start)
        # to its schedule extended back.
        backwards = _extended(ends[::-1], lrs[::-1], 0.0)
        self.ends = _Curve([0.0, *ends], [backwards, *lrs], (0.0, first.samples, 0.0))
        self.peak = max(abs(lr) for lr in lrs)
        self.end = last.samples

    def at(self, samples: float) -> float:
        return self.starts.at(samples)

    def explains(self, lr: float, start: float, end: float, tolerance: float) -> bool:
        """Whether `lr` is the schedule's where a step over [start, end] starts (torch's schedulers: the lr of the
        steps done so far) or where it ends (a warmup of (done + 1) / warmup), within one of the reference's steps
        and the tolerance."""
        end = min(end, self.end)
        windows = (
            (self.starts, start, min(self.starts.next_knot(start), end)),
            (self.ends, max(self.ends.previous_knot(end), start), end),
        )
        for curve, low, high in windows:
            at_low, at_high = curve.at(low), curve.at(high)  # within range(low, high) whatever else it holds
            if min(at_low, at_high) - tolerance <= lr <= max(at_low, at_high) + tolerance:
                return True
            lowest, highest = curve.range(low, high)
            if lowest - tolerance <= lr <= highest + tolerance:
                return True
        return False


def _extended(knots: list[float], lrs: list[float], to: float) -> float:
    """The lr at `to`, past the last knot, had the schedule gone on as over the last two (not past 0): a run with
    smaller steps moves on within the reference's first or last step."""
    if len(lrs) < 2 or knots[-1] == knots[-2]:
        return lrs[-1]
    slope = (lrs[-1] - lrs[-2]) / (knots[-1] - knots[-2])
    value = lrs[-1] + slope * (to - knots[-1])
    return max(value, 0.0) if lrs[-1] >= 0 else value


def _check(run: Sequence[Point], ref: _Reference, factor: float) -> tuple[dict[int, int], dict[int, int]]:
    """(step -> steps it stands for, of the run's points that could be checked; the same for those off)."""
    checked: dict[int, int] = {}
    off: dict[int, int] = {}
    previous_step = run[0].step - 1
    tolerance = TOLERANCE * ref.peak
    for point in run:
        low, high = point.start * factor, point.samples * factor
        weight = max(point.step - previous_step, 1)
        previous_step = point.step
        if low >= ref.end:
            continue  # beyond what the reference ran: nothing to check against
        checked[point.step] = weight
        if not ref.explains(point.lr, low, high, tolerance):
            off[point.step] = weight
    return checked, off


def _at_zero(run: Sequence[Point], step: int, ref: _Reference) -> bool:
    """The step ran at lr 0 where the reference's lr was more than TOLERANCE of its peak."""
    point = next(point for point in run if point.step == step)
    return point.lr == 0 and ref.at(point.start) > TOLERANCE * ref.peak


def _best_factor(
    run: Sequence[Point], ref: _Reference, factors: Iterable[float], preferred: set[float]
) -> float | None:
    """The time factor that explains the most of the steps it can check (at least FIT of them, on at least
    MIN_COVERAGE of the run); among equals a preferred one, then the one nearest 1, then the one that checks more.

    A factor's checkable steps are known before its steps are checked, so its check stops as soon as more than
    1 - FIT of them are off: most of the 30 factors miss from the first steps (a sweep of 5,000 runs whose schedules
    all differ from the baseline's spent 12 of its 14 s here when every factor checked every step)."""
    total = max(run[-1].step - run[0].step + 1, 1)
    weights = _weights(run)
    tolerance = TOLERANCE * ref.peak
    best: tuple[float, bool, float, float, float] | None = None  # (-share off, preferred, -|log k|, coverage, k)
    for factor in sorted(factors):
        if not math.isfinite(factor) or factor <= 0 or factor == 1:
            continue
        checkable = [(point, weight) for point, weight in zip(run, weights, strict=True)
                     if point.start * factor < ref.end]  # fmt: skip
        steps = sum(weight for _, weight in checkable)
        if steps < MIN_COVERAGE * total or len(checkable) < 3:
            continue
        wrong = _off(checkable, ref, factor, tolerance, limit=(1 - FIT) * steps)
        if wrong is None:
            continue
        candidate = (-wrong / steps, factor in preferred, -abs(math.log(factor)), steps / total, factor)
        if best is None or candidate > best:
            best = candidate
    return best[-1] if best is not None else None


def _weights(run: Sequence[Point]) -> list[int]:
    """The steps each point stands for (as _check counts them)."""
    weights, previous_step = [], run[0].step - 1
    for point in run:
        weights.append(max(point.step - previous_step, 1))
        previous_step = point.step
    return weights


def _off(
    checkable: list[tuple[Point, int]], ref: _Reference, factor: float, tolerance: float, limit: float
) -> int | None:
    """The steps off among these at `factor`; None as soon as they are more than `limit`."""
    wrong = 0
    for point, weight in checkable:
        if not ref.explains(point.lr, point.start * factor, point.samples * factor, tolerance):
            wrong += weight
            if wrong > limit:
                return None
    return wrong
