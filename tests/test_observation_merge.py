"""Merging the observer's per-rank files (ddpcli.rundir.merge) and the findings on them (ddpcli.rundir.findings).

Pure: the rank files are written here as the observer writes them, so every case is exact and fast.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcli.diagnosis.findings import run_findings
from ddpcli.noise_scale import simple_noise_scale
from ddpcli.rundir.merge import summarize
from ddpcli.rundir.merged_rows import iter_merged_metrics
from ddpcli.rundir.observations import read_observations


def write_ranks(run_dir: Path, ranks: dict[int, list[dict[str, Any]]]) -> None:
    folder = run_dir / "observed"
    folder.mkdir(parents=True, exist_ok=True)
    for rank, rows in ranks.items():
        (folder / f"rank-{rank}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def step(number: int, samples: int = 8, micro: int = 1, **extra: Any) -> dict[str, Any]:
    return {"kind": "step", "step": number, "micro_batches": micro, "samples": samples, "loss": 1.0, "lr": [0.1],
            "time": 0.01 * number, **extra}  # fmt: skip


def run_row(world: int, norms: int = 0, synchronized: int = 0) -> dict[str, Any]:
    return {"kind": "run", "world_size": world, "backend": "gloo", "device": "cpu", "ddp": world > 1,
            "batchnorm_layers": norms, "batchnorm_synchronized": synchronized}  # fmt: skip


def findings_of(run_dir: Path, plan: dict[str, Any] | None = None) -> list[str]:
    ranks = read_observations(run_dir)
    observed = summarize(ranks)
    assert observed is not None
    return [finding.code for finding in run_findings(plan or {}, observed, ranks, completed=True)]


# -- the noise scale from per-step norms ------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    grad_sq=st.floats(0.01, 100.0),
    trace=st.floats(0.01, 1e4),
    world=st.integers(2, 8),
    batch=st.integers(1, 64),
    steps=st.integers(1, 30),
)
def test_exact_norms_give_the_exact_noise_scale(
    tmp_path_factory: pytest.TempPathFactory, grad_sq: float, trace: float, world: int, batch: int, steps: int
) -> None:
    """With E|G_B|^2 = |G|^2 + tr(Sigma)/B exactly at both sizes, B_simple = tr(Sigma)/|G|^2 whatever the EMA."""
    run_dir = tmp_path_factory.mktemp("noise")
    small, big = grad_sq + trace / batch, grad_sq + trace / (batch * world)
    write_ranks(run_dir, {rank: [step(n, batch, sq_small=small, sq_big=big) for n in range(1, steps + 1)]
                          for rank in range(world)})  # fmt: skip
    rows = list(iter_merged_metrics(read_observations(run_dir)))
    assert len(rows) == steps
    assert rows[-1]["noise_scale"] == pytest.approx(trace / grad_sq, rel=1e-6)
    assert rows[-1]["grad_sq_small"] == pytest.approx(small)
    assert rows[-1]["grad_sq_big"] == pytest.approx(big)


def test_small_norms_are_averaged_over_ranks_and_batches_come_from_the_samples(tmp_path: Path) -> None:
    """B_small is what one rank put into the step (batch x accumulation), B_big what all ranks did."""
    write_ranks(tmp_path, {
        0: [step(1, samples=16, micro=2, sq_small=3.0, sq_big=2.5)],
        1: [step(1, samples=16, micro=2, sq_small=5.0, sq_big=2.5)],
    })  # fmt: skip
    [row] = list(iter_merged_metrics(read_observations(tmp_path)))
    assert row["grad_sq_small"] == pytest.approx(4.0)
    assert row["noise_scale"] == pytest.approx(simple_noise_scale(4.0, 2.5, 16, 32)) == pytest.approx(48.0)
    assert row["samples"] == 32


def test_a_step_a_rank_did_not_measure_is_left_out(tmp_path: Path) -> None:
    write_ranks(tmp_path, {
        0: [step(1, sq_small=3.0, sq_big=2.0), step(2, sq_small=3.0, sq_big=2.0), step(3, sq_small=9.0, sq_big=1.0)],
        1: [step(1, sq_small=3.0, sq_big=2.0), step(2), step(3, sq_small="nan", sq_big=1.0)],
    })  # fmt: skip
    rows = list(iter_merged_metrics(read_observations(tmp_path)))
    assert ["grad_sq_small" in row for row in rows] == [True, False, False]  # the EMAs leave steps 2 and 3 out
    assert "noise_scale" in rows[0] and "noise_scale" not in rows[1] and "noise_scale" not in rows[2]
    assert all(math.isfinite(row["loss"]) for row in rows)


def test_one_process_has_no_noise_scale(tmp_path: Path) -> None:
    """B_small = B_big: the two sizes that the estimate needs are not there."""
    write_ranks(tmp_path, {0: [step(n, sq_small=3.0, sq_big=3.0) for n in (1, 2)]})
    rows = list(iter_merged_metrics(read_observations(tmp_path)))
    assert "noise_scale" not in rows[-1] and rows[-1]["grad_sq_small"] == pytest.approx(3.0)


def test_logged_rows_carry_the_observers_noise_scale_over_every_step(tmp_path: Path) -> None:
    """The runtime helper logs steps 2 and 4 without norms (the observer measured its DDP model): the logged rows are
    the rows, with the EMAs over all four steps, not over the logged ones."""
    norms = {1: (3.0, 2.0), 2: (4.0, 2.5), 3: (3.5, 2.0), 4: (5.0, 3.0)}
    logs = [{"kind": "log", "step": n, "time": n / 10, "loss": 0.5, "lr": 0.2, "acc": 0.9} for n in (2, 4)]
    write_ranks(tmp_path, {
        rank: [*[step(n, sq_small=small, sq_big=big) for n, (small, big) in norms.items()], *logs] for rank in (0, 1)
    })  # fmt: skip
    rows = list(iter_merged_metrics(read_observations(tmp_path)))
    unlogged = tmp_path / "unlogged"  # the same steps without the helper's rows: a row for every step
    write_ranks(unlogged, {rank: [step(n, sq_small=small, sq_big=big) for n, (small, big) in norms.items()]
                           for rank in (0, 1)})  # fmt: skip
    every_step = {row["step"]: row for row in iter_merged_metrics(read_observations(unlogged))}
    assert [row["step"] for row in rows] == [2, 4]
    assert [row["samples"] for row in rows] == [32, 64]
    for row in rows:
        assert row["grad_sq_small"] == pytest.approx(every_step[row["step"]]["grad_sq_small"])
        assert row["noise_scale"] == pytest.approx(every_step[row["step"]]["noise_scale"])
    assert (rows[-1]["loss"], rows[-1]["lr"], rows[-1]["acc"], rows[-1]["time"]) == (0.5, 0.2, 0.9, 0.4)


def test_a_logged_row_without_a_loss_takes_the_observed_one(tmp_path: Path) -> None:
    write_ranks(tmp_path, {0: [step(1), {"kind": "log", "step": 1, "time": 0.5, "acc": 0.75}]})
    [row] = list(iter_merged_metrics(read_observations(tmp_path)))
    assert (row["loss"], row["lr"], row["acc"], row["samples"]) == (1.0, 0.1, 0.75, 8)


def test_logs_without_any_observed_step_are_the_rows(tmp_path: Path) -> None:
    """A script run under plain torchrun with a run directory: only the helper's rows, its own samples count."""
    logs = [{"kind": "log", "step": n, "time": n, "samples": 16 * n, "loss": 1.0 / n} for n in (1, 2)]
    write_ranks(tmp_path, {0: logs})
    rows = list(iter_merged_metrics(read_observations(tmp_path)))
    assert rows == [{"step": n, "samples": 16 * n, "time": n, "loss": 1.0 / n} for n in (1, 2)]


# -- findings -----------------------------------------------------------------------------------------------------


def end_row(**fields: Any) -> dict[str, Any]:
    return {"kind": "end", "steps": 1, "loaders": [], "amp": None, **fields}


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        ({"noise_scale_requested": True, "script_comm_hook": True, "noise_scale_by": None}, True),
        ({"noise_scale_requested": True, "script_comm_hook": False, "noise_scale_by": "observer"}, False),
        ({"noise_scale_requested": False, "script_comm_hook": True, "noise_scale_by": None}, False),
        ({"noise_scale_requested": True, "script_comm_hook": True, "noise_scale_by": "runtime"}, False),
    ],
)
def test_noise_scale_not_measured_only_when_the_scripts_hook_prevented_it(
    tmp_path: Path, end: dict[str, Any], expected: bool
) -> None:
    write_ranks(tmp_path, {0: [step(1), run_row(2), end_row(**end)], 1: [step(1), run_row(2), end_row(**end)]})
    assert ("noise_scale_not_measured" in findings_of(tmp_path)) is expected


def test_batchnorm_is_only_unsynchronised_with_several_processes(tmp_path: Path) -> None:
    write_ranks(tmp_path / "one", {0: [step(1), run_row(1, norms=2)]})
    write_ranks(tmp_path / "two", {rank: [step(1), run_row(2, norms=2, synchronized=1)] for rank in (0, 1)})
    one, two = summarize(read_observations(tmp_path / "one")), summarize(read_observations(tmp_path / "two"))
    assert one is not None and two is not None
    assert one.batchnorm_synchronized is None and two.batchnorm_synchronized is False
    assert "batchnorm_not_synchronized" not in findings_of(tmp_path / "one")
    assert "batchnorm_not_synchronized" in findings_of(tmp_path / "two")


def test_identical_fingerprints_on_every_rank_are_the_same_samples(tmp_path: Path) -> None:
    same = {"kind": "fingerprint", "index": 1, "values": [1.0, 2.0, 3.0]}
    write_ranks(tmp_path, {rank: [same, step(1), run_row(2)] for rank in (0, 1)})
    assert findings_of(tmp_path) == ["same_samples_across_ranks"]


def test_a_batch_the_plan_did_not_say_is_a_mismatch_with_both_numbers(tmp_path: Path) -> None:
    write_ranks(tmp_path, {0: [step(n, samples=8) for n in (1, 2)] + [run_row(1)]})
    ranks = read_observations(tmp_path)
    observed = summarize(ranks)
    assert observed is not None
    plan = {"per_device_batch_size": 32, "grad_accum_steps": 1, "global_batch_size": 32, "world_size": 1,
            "total_steps": 2, "lr": 0.1}  # fmt: skip
    found = {f.field: f for f in run_findings(plan, observed, ranks, completed=True) if f.code == "plan_mismatch"}
    assert set(found) == {"per_device_batch_size", "global_batch_size"}
    assert (found["per_device_batch_size"].planned, found["per_device_batch_size"].observed) == (32, 8)
