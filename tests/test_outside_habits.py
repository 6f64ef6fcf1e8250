"""Processes a script starts itself and files every rank writes (issue 27, items 6 and 7), from the observer on a
fixture of ours (tests/observe_scripts/outside_habits.py) and from hand-written observation files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpcli.diagnosis.findings import run_findings
from ddpcli.rundir.merge import summarize
from ddpcli.rundir.observations import read_observations
from ddpcli.rundir.record import Finding
from tests.conftest import REPO

pytestmark = pytest.mark.interpreters

SCRIPT = REPO / "tests" / "observe_scripts" / "outside_habits.py"


def launch(run_dir: Path, pattern: str, rank: int = 0, out: Path | None = None) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DDPCLI_", "TORCHELASTIC"))}
    for key in ("WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update({"DDPCLI_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1", "RANK": str(rank)})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "ddpcli.worker.observer", str(SCRIPT), "--pattern", pattern,
               "--out", str(out or run_dir)]  # fmt: skip
    return subprocess.Popen(command, env=env, text=True, stderr=subprocess.PIPE, start_new_session=True)


def findings_of(run_dir: Path, completed: bool = True) -> list[Finding]:
    ranks = read_observations(run_dir)
    observed = summarize(ranks)
    assert observed is not None
    return run_findings({"total_steps": 4}, observed, ranks, completed=completed)


def ran(run_dir: Path, pattern: str) -> list[Finding]:
    process = launch(run_dir, pattern)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    return findings_of(run_dir)


def spawned(findings: list[Finding]) -> list[str]:
    return [finding.message for finding in findings if finding.code == "script_spawned_processes"]


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("mp-process", "the script started 2 processes of its own (2 with multiprocessing.Process) running worker"),
        ("pool", "the script started 2 processes of its own (2 with multiprocessing.Pool)"),
        ("subprocess", "the script started 1 process of its own (1 with subprocess (python))"),
    ],
)
def test_any_process_the_script_starts_is_named(tmp_path: Path, pattern: str, says: str) -> None:
    (message,) = spawned(ran(tmp_path, pattern))
    assert message.startswith(says) and "optimizer steps 4 here" in message


def test_a_libraries_processes_are_not_the_scripts(tmp_path: Path) -> None:
    """DataLoader workers are multiprocessing processes torch starts; `ls` is no Python interpreter."""
    assert spawned(ran(tmp_path, "workers")) == []


def test_a_run_killed_while_its_own_processes_wait_still_says_why(tmp_path: Path) -> None:
    """dist_tuto under torchrun: its 2 mp.Process workers wait on port 29500 until the run's timeout kills it."""
    process = launch(tmp_path, "mp-hang")
    rows = tmp_path / "observed" / "rank-0.jsonl"
    deadline = time.monotonic() + 60
    # Both workers' rows: one is written as each starts, and a kill after the first (a race seen under load: "1
    # process of its own") would test what was flushed by then, not what the finding says of two.
    while time.monotonic() < deadline and (rows.read_text() if rows.exists() else "").count('"spawn"') < 2:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    (message,) = spawned(findings_of(tmp_path, completed=False))
    assert "2 processes of its own (2 with multiprocessing.Process) running waiting" in message
    assert "optimizer steps 0 here" in message


def test_every_rank_writing_one_file_is_named_with_its_ranks(tmp_path: Path) -> None:
    """mnist at 2 processes: both ranks torch.save mnist_cnn.pt; a rank-0 guard is the fix."""
    out = tmp_path / "work"
    out.mkdir()
    processes = [launch(tmp_path / "run", "same-file", rank, out) for rank in (0, 1)]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr[-3000:]
    (finding,) = [f for f in findings_of(tmp_path / "run") if f.code == "same_file_written_by_ranks"]
    assert finding.severity == "warning"
    assert finding.message.startswith(
        f"2 files were written by several ranks: {out / 'model.pt'} (torch.save) by ranks 0, 1; "
        f"{out / 'log.txt'} (open) by ranks 0, 1: "
    )
    assert "rank 0 only (`if dist.get_rank() == 0:`)" in finding.message
    one = tmp_path / "one"
    _, stderr = launch(one, "same-file", 0, out).communicate(timeout=120)
    assert "same_file_written_by_ranks" not in [f.code for f in findings_of(one)]
