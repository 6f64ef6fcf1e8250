"""compare's score of a run's prediction (ddpcli.compare.prediction): the error, the term furthest off, and the
real cause when the run did not run what was predicted (the prediction is of the plan's batch and processes)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ddpcli.diagnosis.prediction import prediction_note, score
from ddpcli.rundir.record import Observed, RunRecord
from ddpcli.rundir.timing import StepTime, TimeBreakdown

PLAN = {"world_size": 2, "per_device_batch_size": 8, "grad_accum_steps": 1}
TERMS = {"data_s": 0.0001, "compute_s": 0.001, "comm_s": 0.0018, "optimizer_s": 0.0001, "other_s": 0.0001}


def record(predicted: float, *, ran: dict[str, Any] | None = None, comm_s: float = 0.0003) -> RunRecord:
    breakdown = TimeBreakdown(
        median=StepTime(
            step_s=0.002, data_s=0.0001, compute_s=0.0012, comm_s=comm_s, optimizer_s=0.0001, other_s=0.0001
        ),
        ranks=[],
    )
    observed = Observed(**{**PLAN, **(ran or {})}, time_breakdown=breakdown)
    prediction = {"predicted_samples_per_s": predicted, "prediction": {"step_terms_s": TERMS}}
    return RunRecord(run_id="r", name="2x8", status="completed", plan=PLAN, observed=observed, prediction=prediction)


def notes(run: RunRecord, measured: float) -> list[str]:
    note = prediction_note(SimpleNamespace(label=run.name, prediction=score(run, measured)))
    return [note] if note is not None else []


def test_the_error_and_the_term_furthest_off() -> None:
    found = score(record(6985.0), 14800.0)
    assert found is not None and found.error == pytest.approx(6985 / 14800 - 1)
    assert (found.furthest_term, found.predicted_term_s, found.measured_term_s) == ("comm_s", 0.0018, 0.0003)
    assert found.unplanned == ()
    assert notes(record(6985.0), 14800.0) == [
        "2x8: predicted 6,985 samples/s from the baseline, measured 14,800 (-53%); furthest off: comm, predicted "
        "1.8 ms a step, measured 0.3 ms."
    ]


def test_a_run_that_ran_another_batch_than_predicted_says_so_first() -> None:
    """The prediction is of the plan's numbers: a script that ran batch 16 where the plan said 8 was not the run
    predicted, which is the cause of the miss, not the comm term."""
    run = record(6985.0, ran={"per_device_batch_size": 16})
    assert score(run, 14800.0).unplanned == ("batch per process 16, predicted for 8",)  # type: ignore[union-attr]
    [note] = notes(run, 14800.0)
    assert note.startswith(
        "2x8: predicted 6,985 samples/s from the baseline, measured 14,800 (-53%); the run was not the one predicted "
        "(batch per process 16, predicted for 8); furthest off: comm"
    )


@pytest.mark.parametrize(
    "ran, said",
    [
        ({"world_size": 1}, "1 processes, predicted for 2"),
        # Both processes ran, each alone (no group): not "1 processes" (issue 34).
        (
            {"world_size": 1, "processes": 2, "data_parallel_size": 1},
            "2 separate trainings of 1 process, predicted for one training over 2 processes",
        ),
        ({"world_size": 2, "processes": 2, "data_parallel_size": 2}, None),
        ({"grad_accum_steps": 4}, "4 micro-batches per optimizer step, predicted for 1"),
        ({"per_device_batch_size": None}, None),  # not observed: nothing to say
    ],
)
def test_each_planned_number_is_checked(ran: dict[str, Any], said: str | None) -> None:
    found = score(record(1000.0, ran=ran), 2000.0)
    assert found is not None and found.unplanned == ((said,) if said else ())


def test_within_the_margin_no_note() -> None:
    assert notes(record(1100.0), 1000.0) == []
    assert notes(record(1100.0, ran={"per_device_batch_size": 16}), 1000.0) == []


def test_a_sharded_run_is_told_its_ddp_prediction_does_not_apply() -> None:
    """FSDP: rank 0 held a shard of the parameters (model_state.full_param_bytes beside its own): no DDP numbers."""
    from ddpcli.rundir.timing import ModelState

    run = record(6985.0)
    assert run.observed is not None
    run.observed.model_state = ModelState(param_bytes=100, full_param_bytes=200)
    [note] = notes(run, 14800.0)
    assert "held shards of the parameters" in note and "does not apply" in note and "furthest off" not in note
