"""A worker killed mid-run costs the steps since the last checkpoint, never the run (torchrun restarts, gloo)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from ddpcli.jsonvalues import read_json
from ddpcli.rundir.metrics import read_metrics
from tests.conftest import final_params, max_abs_diff, write_toml

pytestmark = pytest.mark.e2e

STEPS = 24
FILE = f"""
[defaults]
module = "ddpcli.examples.regression"
args = ["--steps", "{{total_steps}}", "--batch-size", "{{per_device_batch_size}}", "--lr", "{{lr}}",
        "--dataset-size", "{{dataset_size}}", "--seed", "{{seed}}", "--momentum", "0.9", "--no-noise-scale",
        "--checkpoint-every", "5", "--step-delay", "0.15"]
dataset_size = 256
max_steps = {STEPS}
timeout_s = 240
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "steady"
nproc_per_node = 2
per_device_batch_size = 8
lr = 0.05

[[experiments]]
name = "restarts"
nproc_per_node = 2
per_device_batch_size = 8
max_restarts = 1

[[experiments]]
name = "no-restarts"
nproc_per_node = 2
per_device_batch_size = 8
"""


def launch(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ddpcli", "launch", "experiments.toml", *args], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = process.communicate(timeout=300)
    return process.returncode, out + err


def not_errors(record: dict[str, Any]) -> list[str]:
    """The findings other than why it was slow (a shared machine) of a run that should have none."""
    return [found["code"] for found in record["findings"] if found["code"] not in SLOWNESS_CODES]


def run_dir_of(root: Path, name: str) -> Path:
    (run_dir,) = (root / "runs" / name).iterdir()
    return run_dir


def kill_rank_after(root: Path, name: str, rank: int, step: int) -> int:
    """Wait until rank 0's observations (flushed every 2 s) show `step`, then SIGKILL the worker of that rank;
    returns its pid."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = list((root / "runs" / name).glob("*/observed/rank-0.jsonl"))
        if runs and sum(row.get("kind") == "step" for row in read_metrics(runs[0]).rows) >= step:
            marker = f"DDPCLI_RUN_DIR={runs[0].parent.parent}".encode()
            for pid in Path("/proc").iterdir():
                try:
                    environ = (pid / "environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if marker in environ and f"RANK={rank}".encode() in environ:
                    os.kill(int(pid.name), signal.SIGKILL)
                    return int(pid.name)
        time.sleep(0.05)
    raise AssertionError(f"{name} never reached step {step}")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("restarts")
    write_toml(root, FILE)
    code, output = finish(launch(root, "--only", "steady"))
    assert code == 0, output
    return root


def test_killed_worker_restarts_from_the_checkpoint(root: Path) -> None:
    process = launch(root, "--only", "restarts")
    kill_rank_after(root, "restarts", rank=1, step=12)
    code, output = finish(process)
    assert code == 0, output
    run_dir = run_dir_of(root, "restarts")
    record = read_json(run_dir / "run.json")
    assert (record["status"], record["restarts"]) == ("completed", 1)
    assert record["env_added"]["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert not_errors(record) == [], record["findings"]  # its own checkpoint is not another run's
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl").rows] == list(range(1, STEPS + 1))
    assert max_abs_diff(final_params(run_dir), final_params(run_dir_of(root, "steady"))) <= 1e-6


def test_without_restarts_it_fails_and_resume_finishes_it(root: Path) -> None:
    process = launch(root, "--only", "no-restarts")
    kill_rank_after(root, "no-restarts", rank=1, step=12)
    code, output = finish(process)
    assert code == 1, output
    run_dir = run_dir_of(root, "no-restarts")
    failed = read_json(run_dir / "run.json")
    assert failed["status"] == "failed" and failed["metrics_from_observations"], failed["findings"]
    assert "observer_error" not in not_errors(failed)  # the merge of a killed rank's run failed once
    assert (run_dir / "checkpoint.pt").exists()
    code, output = finish(launch(root, "--resume", str(run_dir)))
    assert code == 0, output
    record = read_json(run_dir / "run.json")
    assert (record["status"], record["resumes"]) == ("completed", 1)
    assert not_errors(record) == [] and record["metrics_from_observations"], record["findings"]
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl").rows] == list(range(1, STEPS + 1))
    assert max_abs_diff(final_params(run_dir), final_params(run_dir_of(root, "steady"))) <= 1e-6
    code, output = finish(launch(root, "--resume", str(run_dir)))
    assert code == 2 and "already completed" in output
