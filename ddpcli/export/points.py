"""Which metrics rows a viewer gets, at which step: each row once, at step = samples seen.

A row's values are the record's: loss (NaN and inf kept: a loss that blew up is a finding, not a gap), lr (the
first param group's where a row holds one per group), the optimizer step as its own scalar, and two values worked
out from the row and the one before it, since metrics.jsonl holds cumulative counters only: samples per second
(samples between the rows / seconds between them) and step time (seconds between them / optimizer steps between
them). The first row has neither: nothing came before it, and its time holds the start-up.

Wall time is the record's too: run.json's `started_at` plus the row's `time` (seconds since the worker started,
so it is late by the worker's start-up, under a few seconds; the export's own clock is never used).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ddpcli.compare.metrics import resolve_restarts
from ddpcli.jsonvalues import finite_or_none, number_or_none, whole_or_none

LOSS, LR, SAMPLES_PER_S, STEP_TIME, OPTIMIZER_STEP = "loss", "lr", "samples_per_s", "step_time_s", "optimizer_step"


@dataclass(frozen=True)
class Point:
    """One metrics row as a viewer writes it: at `samples` (the step), `wall_time` (seconds since the epoch)."""

    samples: int
    wall_time: float
    values: dict[str, float]


def points(rows: Iterable[dict[str, Any]], *, started_at: float, global_batch_size: int | None = None) -> list[Point]:
    """Every usable row once, in samples order; a restarted attempt's rows replace the failed one's from where it
    started again (compare's own rule, ddpcli.compare.metrics.resolve_restarts). Rows without `samples` (a script
    that logged without knowing its batch) get step x global batch, as compare gives them."""
    kept = resolve_restarts(rows, global_batch_size)
    result: list[Point] = []
    previous: dict[str, Any] | None = None
    for row in kept:
        samples = finite_or_none(row.get("samples"))
        if samples is None:  # resolve_restarts keeps numeric samples only; a guard for the type checker
            continue
        time = finite_or_none(row.get("time"))
        values = _values(row, previous)
        result.append(Point(_whole(samples), started_at + (time or 0.0), values))
        previous = row
    return result


def _values(row: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, float]:
    values: dict[str, float] = {}
    loss = number_or_none(row.get(LOSS))
    if loss is not None:
        values[LOSS] = loss
    lr = row.get(LR)
    lr = number_or_none(lr[0] if isinstance(lr, list) and lr else lr)
    if lr is not None:
        values[LR] = lr
    step = whole_or_none(row.get("step"))
    if step is not None:
        values[OPTIMIZER_STEP] = float(step)
    if previous is not None:
        values.update(_rates(row, previous))
    return values


def _rates(row: dict[str, Any], previous: dict[str, Any]) -> dict[str, float]:
    """Samples per second and seconds per step between two rows, where both are known and time went forward."""
    time, before = finite_or_none(row.get("time")), finite_or_none(previous.get("time"))
    if time is None or before is None or time <= before:
        return {}
    seconds = time - before
    rates: dict[str, float] = {}
    samples, samples_before = finite_or_none(row.get("samples")), finite_or_none(previous.get("samples"))
    if samples is not None and samples_before is not None:
        rates[SAMPLES_PER_S] = (samples - samples_before) / seconds
    step, step_before = whole_or_none(row.get("step")), whole_or_none(previous.get("step"))
    if step is not None and step_before is not None and step > step_before:
        rates[STEP_TIME] = seconds / (step - step_before)
    return rates


def epoch_seconds(iso: str | None) -> float | None:
    """An ISO 8601 time of run.json as seconds since the epoch; None when missing or malformed."""
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return None


def after(found: Sequence[Point], samples: float | None) -> list[Point]:
    """The points past `samples`: what an earlier export (which wrote up to `samples`) has not written yet."""
    return list(found) if samples is None else [point for point in found if point.samples > samples]


def _whole(samples: float) -> int:
    """Viewers' steps are integers; samples seen is a count (a float only in a hand-written file: rounded)."""
    return round(samples)
