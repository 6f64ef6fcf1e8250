"""The schedule as it ran, on real launches (gloo, 1-2 processes): scripts that never import ddpcli.

tests/observe_scripts/accelerate_schedule.py steps a prepared scheduler the way accelerate does by default (once
per process per optimizer step), or once per step with `--no-step-with-optimizer`; schedule_loop.py is a plain DDP
loop with a cosine whose peak stays below its base lr, and `--step-on-modulo` makes its first optimizer step one
micro-batch. Each gets the finding it is due, and no other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests.helpers import OBSERVE_SCRIPTS as SCRIPTS
from tests.helpers import codes, compare_json, compare_text, launch

pytestmark = pytest.mark.e2e

LOOP_ARGS = '["--batch-size", "{per_device_batch_size}", "--grad-accum", "{grad_accum_steps}", "--lr", "{lr}", ' \
    '"--steps", "{total_steps}"'  # fmt: skip
ACCEL_ARGS = '["--batch-size", "{per_device_batch_size}", "--lr", "{lr}", "--steps", "{total_steps}"'

SCHEDULES = f"""
[defaults]
max_steps = 8
dataset_size = 512
scaling = "none"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "loop-1x16"
script = "{SCRIPTS / "schedule_loop.py"}"
args = {LOOP_ARGS}]
per_device_batch_size = 16
lr = 0.05

[[experiments]]
name = "loop-2x8"
script = "{SCRIPTS / "schedule_loop.py"}"
args = {LOOP_ARGS}]
nproc_per_node = 2
per_device_batch_size = 8
lr = 0.05

[[experiments]]
name = "loop-2x8x2-modulo"
script = "{SCRIPTS / "schedule_loop.py"}"
args = {LOOP_ARGS}, "--step-on-modulo"]
nproc_per_node = 2
per_device_batch_size = 8
grad_accum_steps = 2
lr = 0.05

[[experiments]]
name = "accel-1x16"
script = "{SCRIPTS / "accelerate_schedule.py"}"
args = {ACCEL_ARGS}]
per_device_batch_size = 16
lr = 0.02

[[experiments]]
name = "accel-2x8"
script = "{SCRIPTS / "accelerate_schedule.py"}"
args = {ACCEL_ARGS}]
nproc_per_node = 2
per_device_batch_size = 8
lr = 0.02

[[experiments]]
name = "accel-2x8-fixed"
script = "{SCRIPTS / "accelerate_schedule.py"}"
args = {ACCEL_ARGS}, "--no-step-with-optimizer"]
nproc_per_node = 2
per_device_batch_size = 8
lr = 0.02
"""


@pytest.fixture(scope="module")
def schedules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, SCHEDULES).runs()


@pytest.fixture(scope="module")
def compared(schedules: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    root = schedules["loop-1x16"]["dir"].parent.parent
    return {row["name"]: row for row in compare_json(root)}


def schedule_findings(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [finding for finding in row["findings"] if finding["code"] == "lr_schedule_mismatch"]


def test_every_run_completed(schedules: dict[str, dict[str, Any]]) -> None:
    assert {name: run["record"]["status"] for name, run in schedules.items()} == dict.fromkeys(schedules, "completed")


def test_a_scheduler_stepped_once_per_process_is_a_schedule_mismatch(compared: dict[str, dict[str, Any]]) -> None:
    """lr 1, .75, .5, .25, then 0 (x 0.02) against accel-1x16's 1, .875, ..., .125: 2x as fast, and 4 steps at 0;
    steps 2 and 8 lie within one of accel-1x16's steps of its schedule, so 5 are off."""
    (finding,) = schedule_findings(compared["accel-2x8"])
    assert finding["reference"] == "accel-1x16"  # its equivalence partner: the baseline runs another script
    assert (finding["factor"], finding["steps"], finding["steps_off"], finding["zero_steps"]) == (2.0, 8, 5, 4)
    assert "advanced 2x as fast as accel-1x16's" in finding["message"]
    assert "4 steps ran at lr 0 (from step 5)" in finding["message"]
    assert "step_scheduler_with_optimizer=False" in finding["message"]


def test_compare_marks_the_runs_whose_schedule_or_steps_were_off(schedules: dict[str, dict[str, Any]]) -> None:
    shown = compare_text(schedules["loop-1x16"]["dir"])
    labels = {line.split()[0]: line.split()[1] for line in shown.splitlines() if " completed " in line}
    marked = {name for name, mark in labels.items() if mark == "!"}
    assert marked == {"accel-2x8", "loop-2x8x2-modulo"}, shown
    assert "(lr_schedule_mismatch)" in shown  # the divergence note names it as the cause


@pytest.mark.parametrize("name", ["loop-2x8", "accel-2x8-fixed", "loop-2x8x2-modulo"])
def test_schedules_that_ran_as_their_reference_get_no_schedule_finding(
    compared: dict[str, dict[str, Any]], name: str
) -> None:
    assert schedule_findings(compared[name]) == []


def test_a_cosine_below_its_base_lr_is_no_plan_mismatch(schedules: dict[str, dict[str, Any]]) -> None:
    for name in ("loop-1x16", "loop-2x8"):
        observed = schedules[name]["record"]["observed"]
        assert observed["lr_base"] == pytest.approx(0.05)  # the scheduler's initial_lr
        assert observed["lr_peak"] < 0.05 * 0.99  # the cosine starts one step in
        assert [code for code in codes(schedules[name]["record"]) if code not in SLOWNESS_CODES] == []


def test_stepping_on_step_modulo_accumulation_is_found_with_its_step(schedules: dict[str, dict[str, Any]]) -> None:
    record = schedules["loop-2x8x2-modulo"]["record"]
    assert record["observed"]["ranges"]["grad_accum_steps"] == [1, 2]
    assert [code for code in codes(record) if code not in SLOWNESS_CODES] == [
        "uneven_accumulation",
        "samples_below_plan",
    ]
    uneven, short = [finding for finding in record["findings"] if finding["code"] not in SLOWNESS_CODES]
    assert "1 of 8 optimizer steps" in uneven["message"] and "step 1 (1)" in uneven["message"]
    assert "(step + 1) % accumulation == 0" in uneven["message"]
    assert "step 1 (16)" in short["message"]
    assert (short["planned"], short["observed"]) == (8 * 32, 16 + 7 * 32)


def test_the_sampler_behind_accelerates_batch_sampler_shard(schedules: dict[str, dict[str, Any]]) -> None:
    observed = schedules["accel-2x8"]["record"]["observed"]
    assert observed["sampler"] == "RandomSampler"  # the DataLoader's shuffle=True: accelerate keeps it
    assert observed["sampler_chain"] == ["BatchSamplerShard", "BatchSampler", "RandomSampler"]
    assert schedules["accel-1x16"]["record"]["observed"]["sampler_chain"] == ["BatchSampler", "RandomSampler"]
    assert schedules["loop-2x8"]["record"]["observed"]["sampler_chain"] == ["BatchSampler", "DistributedSampler"]


def test_a_library_warning_names_the_scripts_line(schedules: dict[str, dict[str, Any]]) -> None:
    """torch's DDP deprecates broadcast_buffers with a FutureWarning for its caller's line: the script's."""
    run_dir: Path = schedules["loop-2x8"]["dir"]
    logs = "\n".join(path.read_text(errors="replace") for path in run_dir.glob("logs/**/*.log"))
    lines = [line for line in logs.splitlines() if "FutureWarning" in line and "broadcast_buffers" in line]
    assert lines, logs[-2000:]
    assert all("schedule_loop.py:" in line for line in lines), lines
    assert "reading.py" not in logs


def test_the_framework_that_stepped_the_scheduler_is_recorded(schedules: dict[str, dict[str, Any]]) -> None:
    """Accelerate's cause of a fast schedule is named only where accelerate stepped it: the observer records who."""
    loop = schedules["loop-1x16"]["record"]["observed"]["frameworks"]
    assert loop == {"imported": [], "optimizer_stepped_by": [],
                    "schedulers": [{"class": "LambdaLR", "steps": 8, "stepped_by": []}]}  # fmt: skip
    accel = schedules["accel-2x8"]["record"]["observed"]["frameworks"]
    assert accel["optimizer_stepped_by"] == ["accelerate"] and "accelerate" in accel["imported"]
    assert accel["schedulers"] == [{"class": "LambdaLR", "steps": 16, "stepped_by": ["accelerate"]}]
