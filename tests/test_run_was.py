"""What a run was, in the pure parts (issue 26): the loss that stopped being finite, and communication measured or
null, never an unmeasured 0."""

from __future__ import annotations

import pytest

from ddpcli.diagnosis.nonfinite import NonFiniteWatch
from ddpcli.rundir.timing import rank_time, time_breakdown
from tests.builders import ddp, row


def watched(losses: list[object]) -> NonFiniteWatch:
    watch = NonFiniteWatch()
    list(watch.watch({"step": step, "loss": loss, "lr": 0.1} for step, loss in enumerate(losses, start=1)))
    return watch


def test_a_loss_not_finite_from_the_first_step_says_so() -> None:
    """The published FSDP2 example: NaN from step 1 (blocks its init left uninitialised)."""
    finding = watched(["nan", "nan", "nan"]).finding()
    assert finding is not None and (finding.code, finding.severity) == ("loss_not_finite", "error")
    assert "NaN at optimizer step 1," in finding.message and "from the first step" in finding.message
    assert "3 of the 3 steps" in finding.message


def test_a_loss_that_diverged_names_its_first_non_finite_step_and_the_lr() -> None:
    finding = watched([2.0, 1.5, "inf", "nan"]).finding()
    assert finding is not None
    assert "inf at optimizer step 3," in finding.message and "2 steps before it had a finite loss" in finding.message
    assert "lr 0.1" in finding.message
    assert watched([2.0, 1.0, 0.5]).finding() is None


def test_the_scripts_own_collectives_are_its_communication() -> None:
    """dist_tuto: 10 steps, 0.2 s in all_reduce after backward (outside forward + backward), 0.05 s inside."""
    collectives = {"calls": 80, "seconds": 0.25, "inside_forward_backward_s": 0.05, "untimed": 0}
    timed = rank_time(0, row(step=1.0, data=0.1, fb=0.6, opt=0.1, script_collectives=collectives))
    assert timed is not None and timed.comm_from == "script_collectives"
    assert timed.comm_s == pytest.approx(0.025)
    assert timed.compute_s == pytest.approx(0.055)  # (0.6 - 0.05) / 10
    assert timed.other_s == pytest.approx(0.0)  # (1.0 - 0.1 - 0.6 - 0.1 - 0.2) / 10


@pytest.mark.parametrize(
    ("extra", "comm", "source"),
    [
        ({"script_collectives": {"calls": 0, "seconds": 0.0, "inside_forward_backward_s": 0.0, "untimed": 0}},
         0.0, "no_collectives"),
        ({"script_collectives": {"calls": 4, "seconds": 0.0, "inside_forward_backward_s": 0.0, "untimed": 4}},
         None, "not_measured: the script's collectives were asynchronous or on a GPU"),
        ({"script_collectives": {"calls": 0, "untimed": 0}, "sharded": "FSDPModule"},
         None, "not_measured: the sharding collectives (FSDPModule) run inside torch, untimed"),
        ({"ddp": {"iteration": 0}}, None, "not_measured: the DDP reducer recorded no communication time"),
    ],
)  # fmt: skip
def test_communication_not_measured_is_null_with_the_reason(extra: dict, comm: float | None, source: str) -> None:
    breakdown = time_breakdown({0: row(**extra)})
    assert breakdown is not None
    assert (breakdown.median.comm_s, breakdown.comm_from, breakdown.ranks[0].comm_from) == (comm, source, source)


def test_the_ddp_reducer_is_still_where_ddp_communication_comes_from() -> None:
    breakdown = time_breakdown({0: row(synced_backwards=10, ddp=ddp(3, 1))})
    assert breakdown is not None and breakdown.comm_from == "ddp_reducer"
    assert breakdown.median.comm_s == pytest.approx(0.002)
