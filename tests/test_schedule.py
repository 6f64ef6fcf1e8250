"""lr schedules against samples seen (ddpcli.compare.schedule): the same schedule at any batch size agrees with
itself; one that advanced k times as fast, ended early or sat at 0 does not, and says by what factor."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcli.diagnosis import schedule
from ddpcli.diagnosis.schedule import Point, ScheduleMismatch, compare_schedules, points

TOTAL = 512  # samples every run trains on
Schedule = Callable[[float], float]  # progress in [0, 1) -> lr multiplier


def run(schedule: Schedule, batch: int, lr: float = 1e-3, speed: float = 1.0, at_end: bool = False) -> list[Point]:
    """A run of TOTAL samples at `batch` per step: step i's lr is the schedule where it starts (a scheduler steps
    after the optimizer) or, `at_end`, where it ends ((done + 1) / warmup), advanced `speed` times as fast."""
    steps = TOTAL // batch
    done = (lambda i: i) if at_end else (lambda i: i - 1)
    return points([(batch * i, lr * schedule(min(speed * done(i) / steps, 1.0)), i) for i in range(1, steps + 1)])


def linear(progress: float) -> float:
    return max(0.0, 1 - progress)


def warmup_cosine(warmup: float, floor: float) -> Schedule:
    def schedule(progress: float) -> float:
        if progress < warmup:
            return (progress + 1e-3) / warmup
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (progress - warmup) / (1 - warmup)))

    return schedule


batches = st.sampled_from([4, 8, 16, 32])
schedules = st.one_of(
    st.just(linear),
    st.just(lambda progress: 1.0),
    st.builds(warmup_cosine, st.floats(0.05, 0.3), st.floats(0.0, 0.5)),
    # a cosine that starts one step in never reaches its base lr (timm's per-epoch cosine)
    st.just(lambda progress: 0.75 * 0.5 * (1 + math.cos(math.pi * progress))),
)


@settings(max_examples=60, deadline=None)
@given(schedule=schedules, mine=batches, theirs=batches, ratio=st.sampled_from([0.5, 1.0, 2.0, 4.0]))
def test_one_schedule_at_any_batch_size_and_scaled_lr_agrees_with_itself(
    schedule: Schedule, mine: int, theirs: int, ratio: float
) -> None:
    assert compare_schedules(run(schedule, mine, lr=1e-3 * ratio), run(schedule, theirs), ratio) is None


@settings(max_examples=40, deadline=None)
@given(warmup=st.sampled_from([0.0625, 0.125, 0.25]), mine=batches, theirs=batches)
def test_a_warmup_of_done_plus_one_steps_agrees_with_itself_at_any_batch(warmup: float, mine: int, theirs: int) -> None:
    """The runtime example's warmup: step 1 already runs at 1 / warmup steps of the lr; a run whose warmup is one
    step long starts at the full lr, where its baseline with 4 steps of a quarter of its batch starts at a quarter."""

    def schedule(progress: float) -> float:
        return min(1.0, progress / warmup)

    assert compare_schedules(run(schedule, mine, at_end=True), run(schedule, theirs, at_end=True), 1.0) is None


@settings(max_examples=40, deadline=None)
@given(factor=st.sampled_from([2, 3, 4]), mine=batches, theirs=batches)
def test_a_schedule_advanced_k_times_as_fast_is_found_with_k(factor: int, mine: int, theirs: int) -> None:
    found = compare_schedules(run(linear, mine, speed=factor), run(linear, theirs), 1.0)
    assert found is not None and found.factor == factor
    steps = TOTAL // mine
    assert found.steps == steps
    ended = math.ceil(steps / factor)  # the last step before the schedule reached 0
    assert found.first_zero == ended + 1
    # at lr 0 from there on; the last few only where the reference's own lr was not yet within tolerance of 0
    # (TOLERANCE of its peak, and one of its steps' change)
    assert 0.9 * (steps - ended) <= found.zero_steps <= steps - ended


@settings(max_examples=30, deadline=None)
@given(factor=st.sampled_from([2, 4]), mine=batches, theirs=batches)
def test_a_schedule_advanced_k_times_slower_is_found_with_1_over_k(factor: int, mine: int, theirs: int) -> None:
    found = compare_schedules(run(linear, mine, speed=1 / factor), run(linear, theirs), 1.0)
    assert found is not None and found.factor == pytest.approx(1 / factor) and found.zero_steps == 0


def test_accelerates_per_process_stepping_in_numbers() -> None:
    """run_glue_no_trainer.py at 2 processes against its 1-process partner: 24 steps of 16, the linear schedule
    over 24 steps stepped twice per optimizer step, so it ended at step 12 and 12 steps ran at lr 0."""
    found = compare_schedules(run(linear, 16, speed=2), run(linear, 8), 1.0)
    assert found == ScheduleMismatch(
        steps=32, steps_off=found.steps_off, first_off=found.first_off, zero_steps=16, first_zero=17, factor=2.0
    )
    assert found.steps_off >= 28 and found.first_off <= 3


def test_a_schedule_that_is_no_copy_at_another_speed_has_no_factor() -> None:
    constant = run(lambda progress: 1.0, 8)
    found = compare_schedules(constant, run(linear, 8), 1.0)
    assert found is not None and found.factor is None and found.zero_steps == 0


def test_a_constant_lr_at_another_value_is_no_schedule_mismatch_once_scaled() -> None:
    assert compare_schedules(run(linear, 8, lr=2e-3), run(linear, 8), 2.0) is None
    assert compare_schedules(run(linear, 8, lr=2e-3), run(linear, 8), 1.0) is not None


def test_one_odd_step_is_no_schedule_mismatch() -> None:
    odd = run(linear, 8)
    odd[10] = Point(odd[10].samples, 0.0, odd[10].step, odd[10].start)
    assert compare_schedules(odd, run(linear, 8), 1.0) is None
    for index in (20, 30, 40):
        odd[index] = Point(odd[index].samples, 0.0, odd[index].step, odd[index].start)
    found = compare_schedules(odd, run(linear, 8), 1.0)
    assert found is not None and (found.steps_off, found.zero_steps, found.factor) == (4, 4, None)  # 4 of 64


def test_only_the_samples_both_ran_are_compared() -> None:
    """A run that went on past its reference's samples is judged on what they share."""
    longer = points([(8 * i, 1e-3 * max(0.0, 1 - (i - 1) / 64), i) for i in range(1, 129)])
    assert compare_schedules(longer, run(linear, 8), 1.0) is None


def test_too_little_to_compare_is_no_finding() -> None:
    assert compare_schedules(run(linear, 8)[:1], run(linear, 8), 1.0) is None
    assert compare_schedules(run(linear, 8), [], 1.0) is None
    assert compare_schedules(run(linear, 8), run(linear, 8), math.nan) is None
    assert compare_schedules(run(linear, 8), run(lambda progress: 0.0, 8), 1.0) is None  # the reference never trained


def test_points_keep_finite_rows_in_order_and_estimate_where_each_step_starts() -> None:
    rows = [(16.0, 0.1, 2), (None, 0.1, 3), (48.0, math.nan, 4), (8.0, 0.2, 1), (64.0, 0.05, 8)]
    assert points(rows) == [Point(8.0, 0.2, 1, 0.0), Point(16.0, 0.1, 2, 8.0), Point(64.0, 0.05, 8, 56.0)]
    assert points(rows, scale=2.0)[0] == Point(4.0, 0.2, 1, 0.0)
    assert points([(8.0, 0.1, 2), (16.0, 0.1, 1)]) == []  # steps going back as samples grow: no one timeline


def test_a_scheduler_stepped_per_epoch_where_the_reference_steps_per_step() -> None:
    """A linear schedule over 64 steps, stepped once per epoch of 16 steps: 16x slower than the reference's."""
    per_epoch = points([(8 * i, 1e-3 * (1 - ((i - 1) // 16) / 64), i) for i in range(1, 65)])
    found = compare_schedules(per_epoch, run(linear, 8), 1.0, preferred=[1 / 16])
    assert found is not None and found.factor == pytest.approx(1 / 16) and found.zero_steps == 0
    alone = compare_schedules(per_epoch, run(linear, 8), 1.0)  # 1/14 to 1/16 all fit a schedule this slow
    assert alone is not None and alone.factor is not None and 1 / 16 <= alone.factor <= 1 / 14


def exhaustive_factor(
    run: list[Point], ref: schedule._Reference, factors: set[float], preferred: set[float]
) -> float | None:
    """_best_factor's definition, every factor checking every step (what it did before its checks stopped early)."""
    total = max(run[-1].step - run[0].step + 1, 1)
    best = None
    for factor in sorted(factors):
        if not math.isfinite(factor) or factor <= 0 or factor == 1:
            continue
        checked, off = schedule._check(run, ref, factor)
        steps, wrong = sum(checked.values()), sum(off.values())
        if steps < schedule.MIN_COVERAGE * total or len(checked) < 3 or wrong > (1 - schedule.FIT) * steps:
            continue
        candidate = (-wrong / steps, factor in preferred, -abs(math.log(factor)), steps / total, factor)
        if best is None or candidate > best:
            best = candidate
    return best[-1] if best is not None else None


SHAPES = [linear, lambda p: 1.0, lambda p: min(1.0, 8 * p + 0.1), lambda p: 0.5 * (1 + math.cos(math.pi * p))]


@settings(max_examples=150, deadline=None)
@given(
    shape=st.sampled_from(SHAPES), other=st.sampled_from(SHAPES), batch=st.sampled_from([4, 8, 16, 32]),
    reference_batch=st.sampled_from([4, 8, 16]), speed=st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0, 7.0]),
    at_end=st.booleans(), preferred=st.sets(st.sampled_from([2.0, 4.0, 0.5, 3.0]), max_size=2),
)  # fmt: skip
def test_the_best_factor_is_the_one_every_step_checked_would_find(
    shape: Schedule, other: Schedule, batch: int, reference_batch: int, speed: float, at_end: bool,
    preferred: set[float],
) -> None:  # fmt: skip
    ran = run(shape, batch, speed=speed, at_end=at_end)
    ref = schedule._Reference(run(other, reference_batch), 1.0)
    factors = {*schedule.FACTORS, *preferred}
    assert schedule._best_factor(ran, ref, factors, preferred) == exhaustive_factor(ran, ref, factors, preferred)
