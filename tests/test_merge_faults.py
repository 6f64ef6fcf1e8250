"""The merge after training can fail without losing the run: a full disk or any value a rank file holds.

The runs here are real processes started by the real sweep (run_to_end), standing in for torchrun: they write
observed/rank-<r>.jsonl as observers do, so the merge, the record and the sweep run exactly as after a training
job, in a fraction of the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpcli.diagnosis.finish import observe
from ddpcli.experiment.planning import load_plan
from ddpcli.jsonvalues import read_json
from ddpcli.launch.argv import LaunchSpec
from ddpcli.launch.supervisor import StopRequest
from ddpcli.launch.sweep import SweepOptions, prepare, run_sweep
from ddpcli.rundir.record import RunRecord
from tests.builders import WRITER, Reporter
from tests.conftest import REPO, write_toml

FILE = f"""
[defaults]
script = "{REPO / "tests" / "launch_scripts" / "steps.py"}"
max_steps = 6

[baseline]
name = "big"
per_device_batch_size = 4
lr = 0.1

[[experiments]]
name = "small"
per_device_batch_size = 4
"""


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MB tmpfs (root only: skipped where mount is not permitted)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def sweep_with_writers(experiments: Path, runs_dir: Path, steps: dict[str, int]) -> tuple[list, Reporter]:
    plan = load_plan(experiments)
    options = SweepOptions(runs_dir=runs_dir)
    specs = [
        replace(spec, argv=[sys.executable, "-c", WRITER, str(steps[spec.run.name])])
        for spec in prepare(plan, plan.runs, options)
    ]
    reporter = Reporter()
    return run_sweep(plan, specs, options, reporter, StopRequest()), reporter


def test_a_full_disk_in_the_merge_finishes_the_record_and_the_sweep_goes_on(tmp_path: Path, small_disk: Path) -> None:
    """12k step rows (1.1 MB) fit on the 2 MB disk; their metrics.jsonl does not: ENOSPC in the merge."""
    experiments = write_toml(tmp_path, FILE)
    results, reporter = sweep_with_writers(experiments, small_disk / "runs", {"big": 12_000, "small": 5})
    assert [result.spec.run.name for result in results] == ["big", "small"]
    assert reporter.ended == ["completed", "completed"]
    big = read_json(results[0].spec.run_dir / "run.json")
    assert (big["status"], big["exit_code"]) == ("completed", 0)
    (finding,) = [finding for finding in big["findings"] if finding["code"] == "observer_error"]
    assert "No space left on device" in finding["message"] and "\n" not in finding["message"]
    assert not list(small_disk.rglob("*.tmp"))
    small = read_json(results[1].spec.run_dir / "run.json")
    assert small["status"] == "completed" and small["observed"]["optimizer_steps"] == 5


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([10**400, -(10**400), 2**63, 2**1024]),
    st.floats(),
    st.text(max_size=6),
    st.lists(st.one_of(st.integers(min_value=-(10**400), max_value=10**400), st.floats(), st.text(max_size=3))),
    st.dictionaries(st.text(max_size=3), st.one_of(st.floats(), st.integers(), st.text(max_size=3)), max_size=2),
)
KINDS = ["step", "log", "resume", "run", "end", "fingerprint", "error", "start", None]
KEYS = ["step", "micro_batches", "samples", "loss", "lr", "time", "sq_small", "sq_big", "values", "noise_batches",
        "world_size", "batchnorm_layers", "batchnorm_synchronized", "loaders", "amp", "ddp", "message", "accuracy",
        "grad_sq_small", "grad_sq_big", "noise_scale_requested", "script_comm_hook"]  # fmt: skip


def rows() -> st.SearchStrategy[dict[str, Any]]:
    plain_step = st.fixed_dictionaries(
        {"kind": st.just("step"), "step": st.integers(1, 4), "micro_batches": st.integers(1, 2),
         "samples": st.integers(1, 8)},
        optional={key: HOSTILE for key in KEYS if key not in ("step", "micro_batches", "samples")},
    )  # fmt: skip
    anything = st.fixed_dictionaries({"kind": st.sampled_from(KINDS)}, optional={key: HOSTILE for key in KEYS})
    return st.one_of(plain_step, anything)


def dumped(row: dict[str, Any]) -> str:
    return json.dumps(row)  # Python's json writes NaN and Infinity, which its reader takes back


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=st.lists(st.lists(rows(), max_size=8), min_size=1, max_size=3), completed=st.booleans())
def test_no_value_in_a_rank_file_crashes_the_merge(files: list[list[dict[str, Any]]], completed: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        run_dir = Path(directory)
        (run_dir / "observed").mkdir()
        for rank, lines in enumerate(files):
            text = "\n".join(map(dumped, lines)) + "\n"
            (run_dir / "observed" / f"rank-{rank}.jsonl").write_text(text)
        plan = {"per_device_batch_size": 4, "grad_accum_steps": 1, "global_batch_size": 8, "world_size": 2,
                "total_steps": 4, "lr": 0.1}  # fmt: skip
        record = RunRecord(run_id="r", name="n", plan=plan, status="completed" if completed else "failed")
        finished = observe(record, run_dir)
        finished.write(run_dir / "run.json")
        assert read_json(run_dir / "run.json")["status"] == record.status
        if (run_dir / "metrics.jsonl").exists():
            for line in (run_dir / "metrics.jsonl").read_text().splitlines():
                json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in metrics.jsonl"))


def test_a_400_digit_loss_is_no_crash(tmp_path: Path) -> None:
    """The issue's case: one rank's loss is an integer beyond float range."""
    (tmp_path / "observed").mkdir()
    for rank, loss in ((0, 10**400), (1, 0.5)):
        row = {"kind": "step", "step": 1, "micro_batches": 1, "samples": 4, "loss": loss, "lr": [0.1]}
        (tmp_path / "observed" / f"rank-{rank}.jsonl").write_text(json.dumps(row) + "\n")
    plan = {"per_device_batch_size": 4, "global_batch_size": 10**400, "total_steps": 10**400, "lr": 10**400}
    record = observe(RunRecord(run_id="r", name="n", plan=plan, status="completed"), tmp_path)
    assert record.observed is not None and record.observed.optimizer_steps == 1
    assert read_json_lines(tmp_path / "metrics.jsonl")[0]["step"] == 1


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@settings(max_examples=200, deadline=None)
@given(row=st.fixed_dictionaries({}, optional={key: HOSTILE for key in ("step", "loss", "samples", "time")}))
def test_no_value_in_a_progress_row_crashes_the_progress_bar(row: dict[str, Any]) -> None:
    """Rank 0's rows feed the live progress while the run goes on: a 400-digit loss or a string time there must
    not stop the launcher (whose exit would stop torchrun)."""
    from rich.console import Console

    from ddpcli.cli.render.progress import RichReporter

    plan = load_plan(write_toml(Path(tempfile.mkdtemp()), FILE))
    spec = LaunchSpec(run=plan.baseline, run_dir=Path("/nonexistent/run"), argv=["true"], env_added={},
                      log_dir=Path("/nonexistent/run/logs"))  # fmt: skip
    reporter = RichReporter(Console(file=open(os.devnull, "w"), force_terminal=False))  # noqa: SIM115
    reporter.run_started(spec)
    reporter.metrics(spec, [row])
