"""`ddpcli launch` killed with SIGKILL: torchrun and its workers stop within seconds (torchrun gets a parent-death
signal, and each observer notices when torchrun is gone), and compare shows the run as `lost` with what its
observers recorded (steps, samples, loss), finishing its record once nothing of it runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.jsonvalues import read_json
from ddpcli.launch.supervisor import worker_pids
from tests.conftest import REPO, write_toml

pytestmark = pytest.mark.e2e

FILE = f"""
[defaults]
script = "{REPO / "tests" / "observe_scripts" / "slow_steps.py"}"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "slow"
nproc_per_node = 2
per_device_batch_size = 4
lr = 0.1
max_steps = 100000
args = ["--steps", "{{total_steps}}", "--batch-size", "{{per_device_batch_size}}", "--lr", "{{lr}}"]
"""


def wait_for_observed_steps(root: Path, steps: int = 5, deadline_s: float = 90) -> Path:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for path in (root / "runs" / "slow").glob("*/observed/rank-0.jsonl"):
            if path.read_text().count('"kind": "step"') >= steps:
                return path.parent.parent
        time.sleep(0.2)
    raise AssertionError("the run never recorded steps")


def gone_within(marker: bytes, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not worker_pids(marker):
            return True
        time.sleep(0.2)
    return False


def launch_in_background(tmp_path: Path) -> subprocess.Popen[bytes]:
    """`ddpcli launch` of FILE as a user starts it, left running for the test to kill."""
    path = write_toml(tmp_path, FILE)
    return subprocess.Popen(
        [sys.executable, "-m", "ddpcli", "launch", str(path)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_sigkill_of_the_launcher_stops_torchrun_and_workers(tmp_path: Path) -> None:
    launcher = launch_in_background(tmp_path)
    marker = b""
    try:
        run_dir = wait_for_observed_steps(tmp_path)
        marker = f"DDPCLI_RUN_DIR={run_dir}".encode()
        torchrun = int(Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()[0])
        assert len(worker_pids(marker)) >= 2  # the two workers (and torchrun where its environment shows it)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        assert gone_within(marker, 30), f"still running: {worker_pids(marker)}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _state(torchrun) not in "XZ":
            time.sleep(0.2)
        assert _state(torchrun) in "XZ", "torchrun outlived its launcher"
    finally:
        launcher.kill()
        for pid in worker_pids(marker) if marker else []:  # what a failed test left behind
            os.kill(pid, signal.SIGKILL)
    assert read_json(run_dir / "run.json")["status"] == "running"  # nothing wrote its end
    assert not (run_dir / "metrics.jsonl").exists()

    result = CliRunner().invoke(app, ["compare", str(tmp_path / "runs"), "--json"])
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["status"] == "lost"
    assert row["steps"] >= 5 and row["final_loss"] is not None
    record = read_json(run_dir / "run.json")  # compare finished the record from the observations
    assert record["observed"]["optimizer_steps"] >= 5 and record["observed"]["world_size"] == 2
    assert record["metrics_from_observations"] is True and (run_dir / "metrics.jsonl").exists()
    again = CliRunner().invoke(app, ["compare", str(tmp_path / "runs")])
    assert again.exit_code == 0 and "lost" in again.stdout


def test_workers_stop_when_torchrun_and_launcher_are_both_killed(tmp_path: Path) -> None:
    """One level down: torchrun killed hard too (frozen first, so it cannot act on its parent-death signal), the
    workers' parent is gone: each worker's observer notices within seconds and stops its process."""
    launcher = launch_in_background(tmp_path)
    marker = b""
    try:
        run_dir = wait_for_observed_steps(tmp_path)
        marker = f"DDPCLI_RUN_DIR={run_dir}".encode()
        (torchrun,) = map(int, Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split())
        workers = [pid for pid in worker_pids(marker) if pid != torchrun]
        assert len(workers) == 2
        os.kill(torchrun, signal.SIGSTOP)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        os.kill(torchrun, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_state(pid) not in "XZ" for pid in workers):
            time.sleep(0.2)
        alive = [pid for pid in workers if _state(pid) not in "XZ"]  # gone, or dead and not yet reaped
        assert alive == [], f"workers outlived torchrun: {alive}"
    finally:
        launcher.kill()
        for pid in worker_pids(marker) if marker else []:
            os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat[stat.rfind(")") + 2]
