"""A run's prediction (made from the baseline before it ran, run.json `prediction`) scored against what it measured.
Pure.

error = predicted samples/s / measured samples/s - 1 (compare's samples/s: first to last metrics row). When
|error| > NOTE_ABOVE, the note names the term of the step (data, compute, comm, optimizer, other) whose predicted
seconds are furthest from the run's measured time breakdown (its median rank). A prediction is of the plan's
processes, batch and accumulation: a run that ran others (a hard-coded batch) was not the run predicted, and the note
says that first, as the cause of the miss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ddpcli.rundir.record import RunRecord

NOTE_ABOVE = 0.25
TERMS = ("data_s", "compute_s", "comm_s", "optimizer_s", "other_s")
PREDICTED_FOR = (  # (field of the plan and of Observed, how a difference reads)
    ("world_size", "{ran} processes, predicted for {planned}"),
    ("per_device_batch_size", "batch per process {ran}, predicted for {planned}"),
    ("grad_accum_steps", "{ran} micro-batches per optimizer step, predicted for {planned}"),
)


@dataclass(frozen=True)
class PredictionScore:
    predicted_samples_per_s: float
    error: float | None  # predicted / measured - 1; None when the run measured no samples/s
    furthest_term: str | None = None  # the term furthest off, when the breakdown is known
    predicted_term_s: float | None = None
    measured_term_s: float | None = None
    unplanned: tuple[str, ...] = ()  # what the run ran that the prediction (of its plan) did not assume
    sharded: bool = False  # the run held shards of its parameters (FSDP): a DDP prediction does not apply


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def score(record: RunRecord, measured_samples_per_s: float | None) -> PredictionScore | None:
    prediction = record.prediction if isinstance(record.prediction, dict) else {}
    predicted = _number(prediction.get("predicted_samples_per_s"))
    if predicted is None:
        return None
    error = predicted / measured_samples_per_s - 1 if measured_samples_per_s else None
    unplanned = _unplanned(record)
    if _sharded(record):
        return PredictionScore(predicted, error, unplanned=unplanned, sharded=True)
    model = prediction.get("prediction")
    terms = model.get("step_terms_s") if isinstance(model, dict) else None
    breakdown = record.observed.time_breakdown if record.observed is not None else None
    if not isinstance(terms, dict) or breakdown is None:
        return PredictionScore(predicted, error, unplanned=unplanned)
    gaps = {
        key: (guess, seen)
        for key in TERMS
        if (guess := _number(terms.get(key))) is not None and (seen := getattr(breakdown.median, key)) is not None
    }
    if not gaps:
        return PredictionScore(predicted, error, unplanned=unplanned)
    key = max(gaps, key=lambda name: abs(gaps[name][0] - gaps[name][1]))
    return PredictionScore(predicted, error, key, *gaps[key], unplanned=unplanned)


def _separate(observed: Any, planned: Any) -> str | None:
    """The planned processes ran, but each trained alone (no group, or nothing averaged): torch's world size of 1
    is not a run of 1 process."""
    processes, together = observed.processes, observed.data_parallel_size
    if not isinstance(planned, int) or planned < 2 or processes != planned or together is None or together >= planned:
        return None
    trainings, each = planned // max(together, 1), f"{together} process{'es' if together != 1 else ''}"
    return f"{trainings} separate trainings of {each}, predicted for one training over {planned} processes"


def _unplanned(record: RunRecord) -> tuple[str, ...]:
    """The planned numbers the run did not run, as observed (unobserved ones say nothing)."""
    if record.observed is None:
        return ()
    found = []
    for field, words in PREDICTED_FOR:
        planned, ran = record.plan.get(field), getattr(record.observed, field)
        if field == "world_size" and (separate := _separate(record.observed, planned)):
            found.append(separate)
            continue
        if isinstance(planned, int) and isinstance(ran, int) and planned != ran:
            found.append(words.format(ran=ran, planned=planned))
    return tuple(found)


def _sharded(record: RunRecord) -> bool:
    state = record.observed.model_state if record.observed is not None else None
    return state is not None and state.full_param_bytes is not None


class ScoredRow(Protocol):
    """What prediction_note reads of a comparison row (ddpcli.compare.row's, which scores its run here: diagnosis
    imports no command, not even for a type)."""

    @property
    def label(self) -> str: ...

    @property
    def prediction(self) -> PredictionScore | None: ...


def prediction_note(row: ScoredRow) -> str | None:
    """The note of a run whose prediction missed by more than NOTE_ABOVE, naming the term furthest off."""
    found = row.prediction
    if found is not None and found.sharded:
        return (
            f"{row.label}: its ranks held shards of the parameters (FSDP), and predictions model DDP runs (one "
            "all-reduce per step, full parameters): its prediction does not apply to it."
        )
    if found is None or found.error is None or abs(found.error) <= NOTE_ABOVE:
        return None
    text = (
        f"{row.label}: predicted {found.predicted_samples_per_s:,.0f} samples/s from the baseline, measured "
        f"{found.predicted_samples_per_s / (1 + found.error):,.0f} ({found.error:+.0%})"
    )
    if found.unplanned:
        text += f"; the run was not the one predicted ({'; '.join(found.unplanned)})"
    if found.furthest_term is not None:
        term = found.furthest_term.removesuffix("_s")
        text += (
            f"; furthest off: {term}, predicted {found.predicted_term_s * 1000:.3g} ms a step, measured "  # type: ignore[operator]
            f"{found.measured_term_s * 1000:.3g} ms"  # type: ignore[operator]
        )
    return text + "."
