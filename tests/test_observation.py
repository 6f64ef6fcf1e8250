"""What a run did, from hand-written observation files: the merge, the summary and the findings (pure, no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpcli.diagnosis.findings import plan_mismatches, run_findings
from ddpcli.rundir.layout import METRICS_FILE
from ddpcli.rundir.merge import summarize
from ddpcli.rundir.merged_rows import iter_merged_metrics
from ddpcli.rundir.metrics import write_metrics
from ddpcli.rundir.observations import read_observations
from ddpcli.rundir.record import Observed
from tests.builders import end, run_rows, steps, write_rank

PLAN = {"world_size": 2, "per_device_batch_size": 8, "grad_accum_steps": 2, "global_batch_size": 32,
        "total_steps": 4, "lr": 0.1}  # fmt: skip


@pytest.fixture
def two_ranks(tmp_path: Path) -> Path:
    """2 processes x 8 x 2 micro-batches for 4 steps, lr warming up to 0.1, distinct batches."""
    for rank in (0, 1):
        fingerprint = {"kind": "fingerprint", "index": 1, "values": [float(rank), 2.0, 3.0]}
        write_rank(tmp_path, rank, [{"kind": "start", "rank": rank}, fingerprint, *steps(4, per_device=8, accum=2,
                   loss=1.0 + rank), run_rows(2), end()])  # fmt: skip
    return tmp_path


def test_summary_is_what_most_steps_did(two_ranks: Path) -> None:
    observed = summarize(read_observations(two_ranks))
    assert observed is not None
    assert (observed.world_size, observed.per_device_batch_size, observed.grad_accum_steps) == (2, 8, 2)
    assert (observed.global_batch_size, observed.optimizer_steps, observed.samples_seen) == (32, 4, 128)
    assert (observed.lr_first, observed.lr_peak, observed.lr_last) == (0.05, 0.1, 0.1)
    assert (observed.sampler, observed.distinct_samples_across_ranks, observed.backend) == (
        "DistributedSampler", True, "gloo"
    )  # fmt: skip
    assert observed.ranges == {}
    assert run_findings(PLAN, observed, read_observations(two_ranks), completed=True) == []


def test_metrics_are_cumulative_samples_and_the_mean_loss_over_ranks(two_ranks: Path) -> None:
    rows = list(iter_merged_metrics(read_observations(two_ranks)))
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert [row["samples"] for row in rows] == [32, 64, 96, 128]
    assert rows[0]["loss"] == pytest.approx((1.0 + 2.0) / 2) and rows[1]["loss"] == pytest.approx(0.75)
    assert [row["lr"] for row in rows] == [0.05, 0.1, 0.1, 0.1]


def test_a_short_last_step_is_a_range_not_the_value(tmp_path: Path) -> None:
    rows = [*steps(3, per_device=8), {"kind": "step", "step": 4, "micro_batches": 1, "samples": 5, "lr": [0.1]}]
    write_rank(tmp_path, 0, rows)
    observed = summarize(read_observations(tmp_path))
    assert observed is not None and observed.per_device_batch_size == 8
    assert observed.ranges == {"per_device_batch_size": [5, 8], "global_batch_size": [5, 8]}


def test_each_plan_field_that_differs_is_one_finding_with_both_numbers() -> None:
    observed = Observed(world_size=2, per_device_batch_size=16, grad_accum_steps=2, global_batch_size=64,
                        optimizer_steps=3, lr_base=0.05, lr_peak=0.05)  # fmt: skip
    found = {(f.field, f.planned, f.observed) for f in plan_mismatches(PLAN, observed, completed=True)}
    assert found == {("per_device_batch_size", 8, 16), ("global_batch_size", 32, 64), ("total_steps", 4, 3),
                     ("lr", 0.1, 0.05)}  # fmt: skip
    assert "total_steps" not in {f.field for f in plan_mismatches(PLAN, observed, completed=False)}
    message = next(f.message for f in plan_mismatches(PLAN, observed, True) if f.field == "per_device_batch_size")
    assert message == "the script ran batch per process 16; the plan said 8"


@pytest.mark.parametrize(("seen", "mismatch"), [(0.1 * (1 + 1e-9), False), (0.1 * 1.001, True), (0.099, True)])
def test_an_lr_off_by_a_tenth_of_a_percent_is_a_mismatch(seen: float, mismatch: bool) -> None:
    """Only float round-off is forgiven: an lr 0.1% off is another lr (a tolerance of 0.1 once hid it)."""
    observed = Observed(world_size=2, per_device_batch_size=8, grad_accum_steps=2, global_batch_size=32, lr_base=seen)
    assert ("lr" in {f.field for f in plan_mismatches(PLAN, observed, completed=True)}) is mismatch


def test_three_ranks_of_which_one_saw_other_batches_did_not_all_see_the_same(tmp_path: Path) -> None:
    """distinct_samples_across_ranks is False only when EVERY rank saw the same first batches."""
    for rank, first in ((0, 1.0), (1, 1.0), (2, 9.0)):
        fingerprint = {"kind": "fingerprint", "index": 1, "values": [first, 2.0, 3.0]}
        write_rank(tmp_path, rank, [fingerprint, *steps(2, per_device=8), run_rows(3)])
    observed = summarize(read_observations(tmp_path))
    assert observed is not None and observed.distinct_samples_across_ranks is True


def test_ranks_on_the_same_batches_without_set_epoch_and_unsynchronised_batchnorm(tmp_path: Path) -> None:
    for rank in (0, 1):
        fingerprint = {"kind": "fingerprint", "index": 1, "values": [1.0, 2.0, 3.0]}
        rows = [fingerprint, *steps(2 + rank, per_device=8), run_rows(2, norms=2), end(epochs=[0, 0, 0])]
        rows[-1]["loaders"][0]["iterations"] = 3
        write_rank(tmp_path, rank, rows)
    ranks = read_observations(tmp_path)
    observed = summarize(ranks)
    assert observed is not None and observed.distinct_samples_across_ranks is False
    assert observed.batchnorm_synchronized is False
    codes = [finding.code for finding in run_findings({}, observed, ranks, completed=True)]
    assert codes == ["same_samples_across_ranks", "sampler_epoch_not_set", "batchnorm_not_synchronized",
                     "uneven_steps_across_ranks"]  # fmt: skip


def test_an_observer_error_is_an_info_finding(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, [*steps(1, per_device=4), {"kind": "error", "message": "_after_step: KeyError: 'lr'"}])
    ranks = read_observations(tmp_path)
    observed = summarize(ranks)
    assert observed is not None
    (finding,) = run_findings({}, observed, ranks, completed=True)
    assert (finding.code, finding.severity) == ("observer_error", "info") and "KeyError" in finding.message


def test_a_resume_replaces_the_steps_after_its_checkpoint(tmp_path: Path) -> None:
    """The first attempt got to step 5 and died; the second resumed from the checkpoint at 3 and died at 4."""
    first = steps(5, per_device=4, loss=1.0)
    second = [{"kind": "start", "rank": 0}, {"kind": "resume", "step": 3}, *steps(1, per_device=4, loss=9.0, first=4)]
    write_rank(tmp_path, 0, [*first, *second])
    rows = list(iter_merged_metrics(read_observations(tmp_path)))
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert rows[-1]["loss"] == pytest.approx(9.0 / 4)  # the resumed attempt's step 4


def test_runtime_logs_are_the_rows_and_noise_is_averaged_over_ranks(tmp_path: Path) -> None:
    for rank, small in ((0, 10.0), (1, 14.0)):
        logs = [{"kind": "log", "step": step, "time": step / 10, "loss": 1.0 + rank, "lr": 0.1, "grad_sq_small": small,
                 "grad_sq_big": 8.0, "noise_batches": [8, 16]} for step in (2, 4)]  # fmt: skip
        write_rank(tmp_path, rank, [*steps(4, per_device=8), *logs])
    rows = list(iter_merged_metrics(read_observations(tmp_path)))
    assert [(row["step"], row["samples"], row["loss"]) for row in rows] == [(2, 32, 1.5), (4, 64, 1.5)]
    # |G_8|^2 = 12 (the mean over ranks), |G_16|^2 = 8: |G|^2 = (16*8 - 8*12)/8 = 4, tr(S) = (12-8)/(1/8-1/16) = 64
    assert rows[0]["grad_sq_small"] == 12.0 and rows[0]["noise_scale"] == pytest.approx(64 / 4)


def test_a_nan_loss_is_written_as_nan_never_hidden(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, [*steps(1, per_device=4), {**steps(1, per_device=4, first=2)[0], "loss": "nan"}])
    write_rank(tmp_path, 1, steps(2, per_device=4))
    rows = list(iter_merged_metrics(read_observations(tmp_path)))
    write_metrics(tmp_path / METRICS_FILE, rows)
    last = json.loads((tmp_path / METRICS_FILE).read_text().splitlines()[-1])
    assert last["loss"] == "nan"


@given(st.lists(st.one_of(st.binary(max_size=40), st.text(max_size=40)), max_size=12))
def test_damaged_observation_lines_never_break_the_merge(lines: list[bytes | str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder)
        (run_dir / "observed").mkdir()
        data = b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines)
        (run_dir / "observed" / "rank-0.jsonl").write_bytes(data + b'\n{"kind": "step", "step": 1, "samples": 4}\n')
        ranks = read_observations(run_dir)
        observed = summarize(ranks)
        assert observed is not None and observed.optimizer_steps >= 1
        json.dumps(list(iter_merged_metrics(ranks)), allow_nan=False)
        run_findings({}, observed, ranks, completed=True)


def test_not_observed_is_none(tmp_path: Path) -> None:
    assert summarize(read_observations(tmp_path)) is None and list(iter_merged_metrics({})) == []
