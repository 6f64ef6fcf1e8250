"""Real torchrun jobs (gloo, CPU) started by `ddpcli launch`, read back from their run directories.

These use tests/launch_scripts/steps.py, a plain torch.distributed script, so they prove the launcher works with
any torchrun script; the bundled example and the numerical equivalence are tested in test_runtime.py and
test_compare_e2e.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpcli.jsonvalues import read_json
from ddpcli.launch.supervisor import worker_pids
from ddpcli.rundir.metrics import read_metrics
from ddpcli.rundir.record import RUN_FIELDS
from tests.conftest import REPO, final_params, max_abs_diff, write_toml
from tests.helpers import Sweep
from tests.helpers import launch as launch_once
from tests.sweeps import REGRESSION, REGRESSION_STEPS, regression_root

pytestmark = pytest.mark.e2e

STEPS = REPO / "tests" / "launch_scripts" / "steps.py"
FILE = f"""
[defaults]
script = "{STEPS}"
args = ["{{total_steps}}"]
max_steps = 6
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "one"
per_device_batch_size = 4
lr = 0.1

[[experiments]]
name = "crash"
nproc_per_node = 2
args = ["{{total_steps}}", "--crash-rank", "1", "--crash-step", "3"]

[[experiments]]
name = "slow"
nproc_per_node = 2
max_steps = 1000
args = ["{{total_steps}}", "--sleep", "0.2"]

[[experiments]]
name = "two"
nproc_per_node = 2
"""


def launch(path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddpcli", "launch", str(path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=path.parent,
    )


def only_run_dir(root: Path, name: str) -> Path:
    (run_dir,) = (root / "runs" / name).iterdir()
    return run_dir


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """one, crash and two, in one sweep: crash fails on rank 1, and the sweep goes on without --fail-fast."""
    return launch_once(tmp_path_factory, FILE, "--only", "one", "--only", "crash", "--only", "two")


def test_completed_runs_are_recorded(sweep: Sweep) -> None:
    path = sweep.root / "experiments.toml"
    for name, world_size in (("one", 1), ("two", 2)):
        run_dir = only_run_dir(sweep.root, name)
        record = read_json(run_dir / "run.json")
        assert set(RUN_FIELDS) <= set(record)
        assert (record["status"], record["exit_code"], record["failed_ranks"]) == ("completed", 0, [])
        assert record["name"] == name and record["run_id"] == run_dir.name
        assert record["plan"]["world_size"] == world_size and record["plan"]["total_steps"] == 6
        assert record["experiment_file"] == str(path) and len(record["experiment_file_sha256"]) == 64
        assert record["torch_version"].startswith("2.") and record["wall_time_s"] > 0
        assert record["started_at"] < record["ended_at"]
        rows = read_metrics(run_dir / "metrics.jsonl").rows
        assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]
        assert [row["samples"] for row in rows] == [step * 4 * world_size for step in range(1, 7)]
        assert list((run_dir / "logs").glob("*/attempt_0/0/stdout.log"))
    assert "completed" in sweep.stdout and "one" in sweep.stdout


def test_crash_on_rank_1_is_reported(sweep: Sweep) -> None:
    assert sweep.returncode == 1
    record = read_json(only_run_dir(sweep.root, "crash") / "run.json")
    assert (record["status"], record["exit_code"]) == ("failed", 1)
    root_cause = record["failed_ranks"][0]
    assert (root_cause["rank"], root_cause["exit_code"], root_cause["root_cause"]) == (1, 1, True)
    assert root_cause["error"] == "RuntimeError: deliberate crash on rank 1 at step 3"
    assert "deliberate crash on rank 1" in root_cause["log_tail"]
    assert "rank 1 exited 1: RuntimeError: deliberate crash on rank 1 at step 3" in sweep.stderr
    # Without --fail-fast the sweep goes on: "two" ran after "crash" failed.
    assert read_json(only_run_dir(sweep.root, "two") / "run.json")["status"] == "completed"


def test_fail_fast_stops_the_sweep(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE)
    result = launch(path, "--only", "crash", "--only", "two", "--fail-fast")
    assert result.returncode == 1
    assert not (tmp_path / "runs" / "two").exists()


def wait_for_metrics(root: Path, name: str, deadline_s: float = 60) -> Path:
    """The run directory, once steps.py (which logs its own metrics.jsonl) has done a step."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = list((root / "runs" / name).glob("*/metrics.jsonl"))
        if found and found[0].stat().st_size > 0:
            return found[0].parent
        time.sleep(0.1)
    raise AssertionError("the run never started writing metrics")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_interrupts_and_leaves_no_worker_behind(tmp_path: Path, signum: int) -> None:
    """Ctrl-C, kill and a closed terminal: the run is recorded as interrupted, every process is gone."""
    path = write_toml(tmp_path, FILE)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ddpcli", "launch", str(path), "--only", "slow", "--only", "two"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_dir = wait_for_metrics(tmp_path, "slow")
    assert worker_pids(f"DDPCLI_RUN_DIR={run_dir}".encode())  # the workers are there...
    launcher.send_signal(signum)
    _, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 128 + signum, err
    record = read_json(run_dir / "run.json")
    assert record["status"] == "interrupted" and record["wall_time_s"] < 60
    assert worker_pids(f"DDPCLI_RUN_DIR={run_dir}".encode()) == []  # ...and now they are gone
    assert not (tmp_path / "runs" / "two").exists()  # an interrupted sweep starts nothing more


def test_timeout_marks_timed_out(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE)
    result = launch(path, "--only", "slow", "--timeout", "6")
    assert result.returncode == 1
    run_dir = only_run_dir(tmp_path, "slow")
    record = read_json(run_dir / "run.json")
    assert record["status"] == "timed_out" and 6 <= record["wall_time_s"] < 30
    assert worker_pids(f"DDPCLI_RUN_DIR={run_dir}".encode()) == []


def test_two_launches_at_once_do_not_clash(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE)
    command = [sys.executable, "-m", "ddpcli", "launch", str(path), "--only", "two"]
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for process in (first, second):
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    run_dirs = sorted((tmp_path / "runs" / "two").iterdir())
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        assert read_json(run_dir / "run.json")["status"] == "completed"
        assert len(read_metrics(run_dir / "metrics.jsonl").rows) == 6
    # Both used --standalone (torchrun picks a free port each time): a clash would have failed one of them.
    assert all("--standalone" in read_json(run_dir / "run.json")["argv"] for run_dir in run_dirs)


# The regression sweep (tests/sweeps.py, launched once per session) and one more run: its 2x8 on two nodes of one
# process each. Same resolved arguments as the sweep's 2x8 (global batch 16, the baseline's lr and warmup).
TWO_NODES = f"""{REGRESSION}
[[experiments]]
name = "2nodes"
nnodes = 2
nproc_per_node = 1
per_device_batch_size = 8
"""


def test_two_agents_on_loopback_form_one_world(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two `ddpcli launch` agents (nnodes 2 x 1 process) on 127.0.0.1 end like one node with 2 processes (the
    regression sweep's 2x8)."""
    import socket

    path = write_toml(tmp_path, TWO_NODES)
    with socket.socket() as probe:  # a free loopback port for the c10d store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent = [sys.executable, "-m", "ddpcli", "launch", str(path), "--only", "2nodes", "--rdzv-endpoint",
             f"127.0.0.1:{port}", "--rdzv-id", "job-e2e"]  # fmt: skip
    agent += ["--runs-dir", str(tmp_path / "multi")]
    agents = [
        subprocess.Popen(agent, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for process in agents:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    run_dir = tmp_path / "multi" / "2nodes" / "job-e2e"
    record = read_json(run_dir / "run.json")
    assert record["status"] == "completed"
    assert record["plan"]["world_size"] == 2, record["plan"]
    assert record["plan"]["nnodes"] == 2 and record["plan"]["nproc_per_node"] == 1
    assert sorted(path.name for path in run_dir.glob("node-*.json")) == ["node-0.json", "node-1.json"]
    assert sorted(path.name for path in (run_dir / "logs").iterdir()) == ["node-0", "node-1"]
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl").rows] == list(range(1, REGRESSION_STEPS + 1))
    (single_dir,) = (regression_root(tmp_path_factory) / "runs" / "2x8").iterdir()
    single_argv = read_json(single_dir / "run.json")["argv"]
    script = record["argv"].index("ddpcli.examples.regression")
    assert single_argv[single_argv.index("ddpcli.examples.regression") :] == record["argv"][script:]  # same args
    assert max_abs_diff(final_params(run_dir), final_params(single_dir)) <= 1e-6
