"""What compare finds between runs (ddpcli.compare.run_checks) on hand-made run directories: an lr schedule that
advanced at another rate than its reference's, and throughput per model for runs of separate models."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ddpcli import compare as cmp
from ddpcli.cli.render.compare import _marks
from tests.builders import make_run, records, row_of


def observed(world: int, steps: int, **more: Any) -> dict[str, Any]:
    return {"world_size": world, "optimizer_steps": steps, "per_device_batch_size": 16, "grad_accum_steps": 1,
            "global_batch_size": 16 * world, **more}  # fmt: skip


def with_schedule(run_dir: Path, lr: Callable[[float], float]) -> None:
    """Rewrite metrics.jsonl with lr = lr(share of the run done before the step)."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["lr"] = lr((row["step"] - 1) / len(rows))
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def linear(speed: float = 1.0) -> Callable[[float], float]:
    return lambda done: 0.05 * max(0.0, 1 - speed * done)


ACCELERATE = {"imported": ["accelerate"], "optimizer_stepped_by": ["accelerate"],
              "schedulers": [{"class": "LambdaLR", "steps": 32, "stepped_by": ["accelerate"]}]}  # fmt: skip


def schedule_runs(
    tmp_path: Path, speed: float, script: str = "train.py", frameworks: dict[str, Any] | None = ACCELERATE
) -> tuple[Path, Path]:
    base = make_run(tmp_path, "1x16", steps=32, extra={"launch": {"script": "train.py"}, "observed": observed(1, 32)})
    two = make_run(
        tmp_path, "2x16", nproc=2, steps=16,
        extra={"launch": {"script": script}, "observed": observed(2, 16, frameworks=frameworks)},
    )  # fmt: skip
    with_schedule(base, linear())
    with_schedule(two, linear(speed))
    return base, two


def test_a_schedule_twice_as_fast_as_the_baselines_is_found_and_marked(tmp_path: Path) -> None:
    result = cmp.compare_runs(records(*schedule_runs(tmp_path, speed=2.0)))
    row = row_of(result, "2x16")
    (finding,) = row.compare_findings
    assert finding.code == "lr_schedule_mismatch" and finding.severity == "warning"
    data = finding.model_dump()
    assert (data["reference"], data["factor"], data["steps"], data["zero_steps"]) == ("1x16", 2.0, 16, 8)
    assert "advanced 2x as fast as 1x16's" in finding.message
    assert "accelerate steps a prepared scheduler once per process" in finding.message  # 2 processes against 1
    assert row.marked and _marks(row) == " !"
    assert not result.baseline.marked and not result.baseline.compare_findings
    assert [entry["code"] for entry in row.as_json()["findings"]] == ["lr_schedule_mismatch"]
    assert any(note.startswith("2x16: the lr schedule advanced 2x") for note in result.notes)


def test_accelerates_cause_is_named_only_where_accelerate_stepped_the_scheduler(tmp_path: Path) -> None:
    """A loop of its own (no accelerate on any stack) gets what was seen: which scheduler stepped how often."""
    plain = {"imported": [], "optimizer_stepped_by": [],
             "schedulers": [{"class": "LambdaLR", "steps": 32, "stepped_by": []}]}  # fmt: skip
    for frameworks in (plain, None):
        folder = tmp_path / str(frameworks is None)
        (finding,) = row_of(cmp.compare_runs(records(*schedule_runs(folder, 2.0, frameworks=frameworks))),
                            "2x16").compare_findings  # fmt: skip
        assert "advanced 2x as fast as 1x16's" in finding.message
        assert "accelerate" not in finding.message.lower() and "Accelerator" not in finding.message
    (finding,) = row_of(cmp.compare_runs(records(*schedule_runs(tmp_path / "p", 2.0, frameworks=plain))),
                        "2x16").compare_findings  # fmt: skip
    assert "its LambdaLR stepped 32 times over 16 optimizer steps: check where the lr is set" in finding.message


def test_a_batch_the_script_derives_is_compared_on_what_ran(tmp_path: Path) -> None:
    """build-nanogpt at 2 processes: its accumulation halves (total_batch_size // (B x T x world)), its lr is its
    own; per optimizer step it ran the baseline's tokens and lr. No schedule finding, and no accelerate advice."""
    seen = observed(1, 32, per_device_batch_size=8, grad_accum_steps=2, lr_base=0.05)
    base = make_run(tmp_path, "1x16", per_device=8, accum=2, steps=32,
                    extra={"launch": {"script": "train.py"}, "observed": seen})  # fmt: skip
    mismatches = [{"code": "plan_mismatch", "severity": "warning", "message": "m", "field": field,
                   "planned": planned, "observed": seen}
                  for field, planned, seen in (("grad_accum_steps", 2, 1), ("global_batch_size", 32, 16),
                                               ("lr", 0.1, 0.05))]  # fmt: skip
    run = make_run(tmp_path, "2x16", nproc=2, per_device=8, accum=2, lr=0.1, steps=32,
                   extra={"launch": {"script": "train.py"}, "findings": mismatches,
                          "observed": {**observed(2, 32, per_device_batch_size=8, grad_accum_steps=1),
                                       "global_batch_size": 16, "lr_base": 0.05}})  # fmt: skip
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**row, "samples": row["step"] * 16}) + "\n" for row in rows))
    with_schedule(base, linear())
    with_schedule(run, linear())
    assert row_of(cmp.compare_runs(records(base, run)), "2x16").compare_findings == ()


def test_a_schedule_stepped_per_epoch_names_the_epoch(tmp_path: Path) -> None:
    """2x8: a linear schedule over its 32 steps, stepped once per epoch of 4 steps: 4x slower than 1x16's."""
    base = make_run(tmp_path, "1x16", steps=32, extra={"launch": {"script": "train.py"}, "observed": observed(1, 32)})
    run = make_run(
        tmp_path, "2x8", nproc=2, per_device=8, steps=32,
        extra={"launch": {"script": "train.py"}, "observed": observed(2, 32)},
    )  # fmt: skip
    path = run / "run.json"
    record = json.loads(path.read_text())
    record["plan"]["steps_per_epoch"] = 4
    path.write_text(json.dumps(record))
    with_schedule(base, linear())
    with_schedule(run, lambda done: 0.05 * (1 - ((done * 32) // 4) / 32))
    (finding,) = row_of(cmp.compare_runs(records(base, run)), "2x8").compare_findings
    assert finding.model_dump()["factor"] == 0.25
    assert "advanced 4x slower than 1x16's" in finding.message
    assert "a scheduler stepped once per epoch (4 steps) where 1x16's steps once per optimizer step" in finding.message


def test_the_same_schedule_at_another_batch_is_no_finding(tmp_path: Path) -> None:
    result = cmp.compare_runs(records(*schedule_runs(tmp_path, speed=1.0)))
    row = row_of(result, "2x16")
    assert row.compare_findings == () and not row.marked and _marks(row) == ""


def test_schedules_of_different_scripts_are_not_compared(tmp_path: Path) -> None:
    result = cmp.compare_runs(records(*schedule_runs(tmp_path, speed=2.0, script="other.py")))
    assert row_of(result, "2x16").compare_findings == ()


def test_schedules_whose_plans_set_different_warmups_are_not_compared(tmp_path: Path) -> None:
    base, two = schedule_runs(tmp_path, speed=2.0)
    path = two / "run.json"
    record = json.loads(path.read_text())
    record["plan"]["warmup_steps"] = 4  # 4 of 16 steps, where the baseline planned none
    path.write_text(json.dumps(record))
    assert row_of(cmp.compare_runs(records(base, two)), "2x16").compare_findings == ()


def test_a_run_of_separate_models_shows_throughput_per_model_and_no_speedup(tmp_path: Path) -> None:
    # 1x16: 1000 samples/s. 4x16: 64 samples per 0.02 s over 4 processes that each trained their own model.
    base = make_run(tmp_path, "1x16", steps=100, step_time=0.016, extra={"observed": observed(1, 100)})
    separate = make_run(
        tmp_path, "4x16", nproc=4, lr=0.2, steps=25, step_time=0.02,
        extra={"observed": observed(4, 25, data_parallel_size=1)},
    )  # fmt: skip
    result = cmp.compare_runs(records(base, separate))
    row = row_of(result, "4x16")
    assert "4x16: its 4 processes trained 4 separate models (data_parallel_size 1): samples/s is one model's, and " \
        "no speedup is shown." in result.notes  # fmt: skip
    assert row.run.metrics.samples_per_s == pytest.approx(3200.0)  # every process's samples
    assert row.samples_per_s == pytest.approx(800.0)  # one model's
    assert row.speedup is None and row.scaling_efficiency is None
    data = row.as_json()
    assert data["samples_per_s"] == pytest.approx(800.0) and data["speedup"] is None


@pytest.mark.parametrize("data_parallel_size", [4, None])
def test_one_model_over_every_process_keeps_its_speedup(tmp_path: Path, data_parallel_size: int | None) -> None:
    base = make_run(tmp_path, "1x16", steps=100, step_time=0.016, extra={"observed": observed(1, 100)})
    one = make_run(
        tmp_path, "4x16", nproc=4, lr=0.2, steps=25, step_time=0.02,
        extra={"observed": observed(4, 25, data_parallel_size=data_parallel_size)},
    )  # fmt: skip
    row = row_of(cmp.compare_runs(records(base, one)), "4x16")
    assert row.samples_per_s == pytest.approx(3200.0) and row.speedup == pytest.approx(3.2)


def test_two_groups_of_two_processes_count_per_model(tmp_path: Path) -> None:
    base = make_run(tmp_path, "1x16", steps=100, step_time=0.016, extra={"observed": observed(1, 100)})
    groups = make_run(
        tmp_path, "4x16", nproc=4, lr=0.2, steps=25, step_time=0.02,
        extra={"observed": observed(4, 25, data_parallel_size=2)},
    )  # fmt: skip
    row = row_of(cmp.compare_runs(records(base, groups)), "4x16")
    assert row.samples_per_s == pytest.approx(1600.0) and row.speedup is None
