"""metrics.jsonl's rows, merged from every rank's steps and the runtime helper's logged rows as they stream by:
samples every rank consumed so far, the loss as the mean over ranks, rank 0's lr, and the noise-scale EMAs."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from ddpcli.jsonvalues import finite_or_none, whole_or_none
from ddpcli.noise_scale import NoiseScaleTracker, simple_noise_scale
from ddpcli.rundir.observations import RankObservation, lr_of, main_rank
from ddpcli.rundir.parallel import ParallelCheck, check_run, trained_together
from ddpcli.rundir.timeline import ascending

NOISE_BETA = 0.99  # EMA factor of the observer's noise-scale measurement (the runtime helper's default)


def iter_merged_metrics(
    ranks: dict[int, RankObservation], parallel: ParallelCheck | None = None
) -> Iterator[dict[str, Any]]:
    """metrics.jsonl rows, one kind for every run: per optimizer step of rank 0's timeline, `samples` every rank
    that trained rank 0's model consumed so far (the ranks `parallel`, the run's check, says trained together;
    made here when not given), `loss` the mean over them, rank 0's lr, the noise-scale EMAs over every step. Where
    a script logs through the runtime helper's ctx.log only its logged steps are rows, and what it logged (loss,
    lr, extra scalars, averaged over ranks) stands in the row beside the observed values. Streamed: one step of
    every rank's rows at a time. What `ddpcli launch` writes (ddpcli.diagnosis.finish)."""
    ranks = trained_together(ranks, parallel if parallel is not None else check_run(ranks))
    main = main_rank(ranks)
    if main is None:
        return
    logged_only = bool(main.logs)
    tracker = NoiseScaleTracker(NOISE_BETA)
    for step, rows, logged, samples in _steps_and_logs(ranks):
        noise = _noise_step(tracker, list(rows.values())) if rows else {}
        if logged_only and logged is None:
            continue
        row: dict[str, Any] = {"step": step}
        if rows:
            observed = rows[main.rank]
            loss = _mean([each.get("loss") for each in rows.values()])
            row.update({"samples": samples, "time": observed.get("time"), "loss": loss, "lr": lr_of(observed), **noise})
        if logged is not None:
            row.update(_logged_values(logged[main.rank], list(logged.values()), samples))
        yield row


def _steps_and_logs(
    ranks: dict[int, RankObservation],
) -> Iterator[tuple[int, dict[int, dict[str, Any]], dict[int, dict[str, Any]] | None, int | None]]:
    """(step, each rank's step row ({} without an observed step), each rank's logged row (None where rank 0 logged
    nothing), samples every rank consumed up to it (None without an observed step)), in step order: the observed
    steps and the logged ones side by side (a script run without the observer logs with no step rows at all)."""
    steps, logs = aligned_steps(ranks), _aligned_logs(ranks)
    seen, logged = next(steps, None), next(logs, None)
    while seen is not None or logged is not None:
        if seen is not None and (logged is None or seen[0] <= logged[0]):
            both = logged is not None and logged[0] == seen[0]
            yield seen[0], seen[1], logged[1] if both and logged is not None else None, seen[2]
            seen, logged = next(steps, None), next(logs, None) if both else logged
        elif logged is not None:
            yield logged[0], {}, logged[1], None
            logged = next(logs, None)


def _aligned_logs(ranks: dict[int, RankObservation]) -> Iterator[tuple[int, dict[int, dict[str, Any]]]]:
    """For each step rank 0 logged: each rank's logged row of that step ({} where it has none)."""
    main = main_rank(ranks)
    if main is None:
        return
    cursors = {rank: _Cursor(seen.logs) for rank, seen in ranks.items() if rank != main.rank}
    for step, logged in ascending(main.logs):
        yield step, {main.rank: logged, **{rank: cursor.at(step) for rank, cursor in cursors.items()}}


def aligned_steps(ranks: dict[int, RankObservation]) -> Iterator[tuple[int, dict[int, dict[str, Any]], int]]:
    """For each step of rank 0's timeline: (step, each rank's row of that step ({} where it has none), samples
    every rank consumed up to it), reading every rank's file once, in step order."""
    main = main_rank(ranks)
    if main is None:
        return
    cursors = {rank: _Cursor(seen.steps) for rank, seen in ranks.items()}
    total = 0
    for step, row in ascending(main.steps):
        rows = {rank: row if rank == main.rank else cursor.at(step) for rank, cursor in cursors.items()}
        total += sum(whole_or_none(each.get("samples")) or 0 for each in rows.values())
        yield step, rows, total


class _Cursor:
    """A rank's rows, read forward: `at(step)` for rising steps."""

    def __init__(self, rows: Mapping[int, dict[str, Any]]) -> None:
        self.items = ascending(rows)
        self.step: int | None = None
        self.row: dict[str, Any] = {}

    def at(self, step: int) -> dict[str, Any]:
        while self.items is not None and (self.step is None or self.step < step):
            found = next(self.items, None)
            if found is None:
                self.items = None
                break
            self.step, self.row = found
        return self.row if self.step == step else {}


def _noise_step(tracker: NoiseScaleTracker, rows: list[dict[str, Any]]) -> dict[str, float]:
    measured = _step_norms(rows)
    if measured is None:
        return {}
    small, big, b_small, b_big = measured
    tracker.update(small, big)
    if not tracker.weight:
        return {}
    values = {"grad_sq_small": tracker.ema_small / tracker.weight, "grad_sq_big": tracker.ema_big / tracker.weight}
    if 0 < b_small < b_big and (noise_scale := tracker.noise_scale(b_small, b_big)) is not None:
        values["noise_scale"] = noise_scale
    return values


def _logged_values(logged: dict[str, Any], rows: list[dict[str, Any]], samples: int | None) -> dict[str, Any]:
    """What the runtime helper logged at a step: its time, rank 0's lr, the other scalars averaged over ranks, and
    the noise scale from the EMAs it logged (its own meter, where the observer did not measure); `samples` is the
    helper's own count only where the observer saw no step."""
    values: dict[str, Any] = {}
    samples = samples if samples is not None else logged.get("samples")
    if samples is not None:
        values["samples"] = samples
    values["time"] = logged.get("time")
    keys = [key for key in logged if key not in ("kind", "step", "samples", "time", "noise_batches")]
    for key in keys:
        values[key] = logged[key] if key == "lr" else _mean([each.get(key) for each in rows])
    values.update(_noise_values(values, logged.get("noise_batches")))
    return values


def _noise_values(row: dict[str, Any], batches: Any) -> dict[str, Any]:
    """The noise scale from the rank-averaged small-batch EMA and the big-batch one (see ddpcli.noise_scale)."""
    small, big = finite_or_none(row.get("grad_sq_small")), finite_or_none(row.get("grad_sq_big"))
    if small is None or big is None or not isinstance(batches, list) or len(batches) != 2:
        return {}
    try:
        value = simple_noise_scale(small, big, float(batches[0]), float(batches[1]))
    except (ValueError, TypeError, OverflowError, ZeroDivisionError):
        return {}
    return {"noise_scale": value} if value is not None else {}


def _mean(values: list[Any]) -> float | str | None:
    """Mean of the finite numbers; "nan" when a rank's value was not a finite number (a NaN, an integer beyond float
    range, a string), so a NaN loss is never hidden; "inf" ("-inf") where every such value was that infinity."""
    numbers, infinite = [], set()
    for value in values:
        if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
            number = finite_or_none(value)
            if number is None:
                infinite.add(str(value) if value in ("inf", "-inf") or value in (math.inf, -math.inf) else "nan")
                continue
            numbers.append(number)
    if infinite:
        return infinite.pop() if len(infinite) == 1 and "nan" not in infinite else "nan"
    if not numbers:
        return None
    mean = math.fsum(numbers) / len(numbers)
    return mean if math.isfinite(mean) else "nan"


def _step_norms(rows: list[dict[str, Any]]) -> tuple[float, float, float, int] | None:
    """(rank mean of |G_small|^2, of |G_big|^2, mean samples per rank, samples over ranks) of one step's rows; None
    when a rank's values are missing or not finite."""
    small, big, samples = [], [], []
    for row in rows:
        one, two, count = (
            finite_or_none(row.get("sq_small")),
            finite_or_none(row.get("sq_big")),
            whole_or_none(row.get("samples")),
        )
        if one is None or two is None or count is None:
            return None
        small.append(one)
        big.append(two)
        samples.append(count)
    if not rows:
        return None
    total = sum(samples)
    if finite_or_none(total) is None:
        return None
    return math.fsum(small) / len(small), math.fsum(big) / len(big), total / len(samples), total
