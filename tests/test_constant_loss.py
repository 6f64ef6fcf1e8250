"""loss_constant: a loss that was the same number at every optimizer step trained nothing it measures.

The DDP tutorial's toy (pytorch/examples `multigpu_torchrun.py`) applies cross_entropy to a one-unit output, which
is 0 whatever the model does: its loss curve is flat at 0 and nothing said so. The rank files are written here as
the observer writes them, and `finish.observe` (what `ddpcli launch` runs after torchrun) merges them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcli.diagnosis import finish
from ddpcli.diagnosis.constant_loss import MIN_STEPS, LossWatch
from ddpcli.rundir.record import RunRecord
from tests.builders import end, run_rows, steps, write_rank


def observe_two_ranks(run_dir: Path, losses: list[list[float | None]]) -> RunRecord:
    for rank, rank_losses in enumerate(losses):
        rows = steps(len(rank_losses), per_device=8)
        for row, loss in zip(rows, rank_losses, strict=True):
            row["loss"] = loss
        write_rank(run_dir, rank, [run_rows(2), *rows, end()])
    return finish.observe(RunRecord(run_id="r", name="n", status="completed"), run_dir)


def constant_loss_findings(record: RunRecord) -> list[str]:
    return [finding.message for finding in record.findings if finding.code == "loss_constant"]


def test_a_loss_of_zero_at_every_step_is_a_finding(tmp_path: Path) -> None:
    record = observe_two_ranks(tmp_path, [[0.0] * 6, [0.0] * 6])
    [message] = constant_loss_findings(record)
    assert message.startswith("the loss was 0 at every one of the 6 optimizer steps")
    assert "cross_entropy over a single class" in message
    assert [finding.severity for finding in record.findings if finding.code == "loss_constant"] == ["warning"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["loss"] for row in rows] == [0.0] * 6  # the metrics are written as before


def test_a_loss_that_moves_on_one_rank_only_is_no_finding(tmp_path: Path) -> None:
    """metrics.jsonl's loss is the mean over ranks: rank 1's moving loss moves it."""
    record = observe_two_ranks(tmp_path, [[0.5] * 6, [0.5, 0.4, 0.3, 0.2, 0.1, 0.05]])
    assert constant_loss_findings(record) == []


def test_too_few_steps_or_no_loss_say_nothing(tmp_path: Path) -> None:
    few = observe_two_ranks(tmp_path / "few", [[1.0] * (MIN_STEPS - 1)] * 2)
    unseen = observe_two_ranks(tmp_path / "unseen", [[None] * 8] * 2)  # the observer found no loss: not constant
    assert constant_loss_findings(few) == constant_loss_findings(unseen) == []


def test_steps_without_a_loss_do_not_count(tmp_path: Path) -> None:
    record = observe_two_ranks(tmp_path, [[2.5, None, 2.5, 2.5, None, 2.5]] * 2)
    [message] = constant_loss_findings(record)
    assert message.startswith("the loss was 2.5 at every one of the 4 optimizer steps with a loss")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=12))
def test_the_finding_is_exactly_a_constant_finite_loss_over_enough_steps(losses: list[float | None]) -> None:
    watch = LossWatch()
    rows = [{"step": number, "loss": loss} for number, loss in enumerate(losses, 1)]
    assert list(watch.watch(iter(rows))) == rows  # passes every row through untouched
    finite = [loss for loss in losses if loss is not None and loss == loss and abs(loss) != float("inf")]
    expected = len(finite) >= MIN_STEPS and len(set(finite)) == 1
    assert (watch.finding() is not None) is expected


@pytest.mark.parametrize("value, shown", [(0.6931471805599453, "0.693147"), (-3.0, "-3"), (1e-12, "1e-12")])
def test_the_value_is_shown_as_measured(value: float, shown: str) -> None:
    watch = LossWatch()
    list(watch.watch(iter([{"loss": value}] * MIN_STEPS)))
    finding = watch.finding()
    assert finding is not None and finding.message.startswith(f"the loss was {shown} at every one of")
