"""torchrun's interpreter started before the command is known (ddpcli.launch.prestart), forked for each run, runs
torchrun as `python -m torch.distributed.run ARGS` would: the same exit code, the run's environment, output in the
log; a second run is forked by the same server; a stop reaches the forked torchrun's group; a server that dies takes
its torchrun with it. Cost: three torchrun jobs of one process and one server (about 6 CPU-seconds)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from ddpcli.cli.render.launch import print_failures
from ddpcli.launch import prestart
from ddpcli.launch.supervisor import terminate
from ddpcli.rundir.record import RunRecord
from tests.conftest import REPO

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
JOB = """\
import os, sys, time, torch.distributed as dist
dist.init_process_group('gloo'); dist.barrier(); dist.destroy_process_group()
agent = os.getppid()
server = int(open(f'/proc/{agent}/stat').read().rsplit(')', 1)[1].split()[1])
print('marker', os.environ['PRESTART_PROBE'], sys.stdin.read() == '', agent, server, os.getsid(agent) == agent,
      flush=True)
time.sleep(float(os.environ.get('JOB_SLEEP', '0')))
sys.exit(int(os.environ['JOB_EXIT']))
"""


@pytest.fixture(autouse=True)
def no_server_left() -> Iterator[None]:
    yield
    prestart.stop()


def torchrun_argv(tmp_path: Path, script: Path, name: str) -> list[str]:
    return [*TORCHRUN, "--nproc-per-node", "1", "--standalone", "--log-dir", str(tmp_path / f"logs-{name}"),
            "--tee", "3", str(script)]  # fmt: skip


def marker(log: Path) -> list[str]:
    return next(line for line in log.read_text().splitlines() if "marker " in line).split("marker ", 1)[1].split()


@pytest.mark.e2e
def test_each_run_is_torchrun_forked_by_one_server(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    prestart.prestart(["launch", "experiments.toml"])
    server = prestart._server
    assert server is not None
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = prestart.take(torchrun_argv(tmp_path, script, "first"), {**env, "PRESTART_PROBE": "one", "JOB_EXIT": "3"},
                          first_log)  # fmt: skip
    assert first is not None
    assert first.wait(120) == 1  # torchrun's own exit code for a failed worker, as from the command line
    assert "ChildFailedError" in first_log.read_text()
    second = prestart.take(torchrun_argv(tmp_path, script, "second"),
                           {**env, "PRESTART_PROBE": "two", "JOB_EXIT": "0"}, second_log, cwd=tmp_path)  # fmt: skip
    assert second is not None and second.wait(120) == 0 and second.poll() == 0
    for log, probe, agent in ((first_log, "one", first), (second_log, "two", second)):
        # the run's environment, stdin from /dev/null, torchrun a child of the server in a session of its own
        assert marker(log) == [probe, "True", str(agent.pid), str(server.process.pid), "True"]
    assert first.pid != second.pid and prestart._server is server and server.process.poll() is None
    prestart.stop()
    assert server.process.returncode == 0  # stdin closed: it ended by itself


@pytest.mark.e2e
def test_a_stop_reaches_the_forked_torchruns_group_and_a_dead_server_takes_its_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    prestart.prestart(["launch", "experiments.toml"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PRESTART_PROBE": "slow", "JOB_EXIT": "0", "JOB_SLEEP": "300"}
    agent = prestart.take(torchrun_argv(tmp_path, script, "stopped"), env, tmp_path / "stopped.log")
    assert agent is not None and agent.poll() is None
    started = time.monotonic()
    terminate(agent, grace_s=30)
    assert agent.returncode is not None and agent.returncode != 0 and time.monotonic() - started < 30
    server = prestart._server
    assert server is not None
    agent = prestart.take(torchrun_argv(tmp_path, script, "orphaned"), env, tmp_path / "orphaned.log")
    assert agent is not None
    os.kill(server.process.pid, signal.SIGKILL)
    assert agent.wait(30) != 0 and not agent.status_known  # its status died with the server: not made up
    # ended by then (gone, or a zombie of its new parent), not merely given up on
    assert not Path(f"/proc/{agent.pid}").exists() or Path(f"/proc/{agent.pid}/stat").read_text().split()[2] == "Z"
    assert prestart.take(torchrun_argv(tmp_path, script, "after"), env, tmp_path / "after.log") is None
    assert prestart._server is None  # the dead server is let go: the supervisor starts torchrun itself


def test_no_prestart_for_a_dry_run_or_another_command() -> None:
    for argv in (["launch", "--dry-run", "x.toml"], ["plan"], ["launch", "--help"], []):
        prestart.prestart(argv)
        assert prestart._server is None


def test_another_command_line_gets_a_fresh_process_and_the_server_stays(tmp_path: Path) -> None:
    prestart.prestart(["launch", "x.toml"])
    server = prestart._server
    assert server is not None
    assert prestart.take(["torchrun", "--standalone", str(REPO)], dict(os.environ), tmp_path / "log") is None
    assert server.process.poll() is None and prestart._server is server  # kept for the runs that are torchrun's
    prestart.stop()
    assert server.process.returncode is not None and prestart._server is None  # never forked: ended at once


def test_a_lost_exit_status_is_said_unknown_not_made_up() -> None:
    """`ddpcli launch`'s failure line for a run whose torchrun status died with its server (record exit_code None)."""
    out = StringIO()
    record = RunRecord(run_id="r", name="2x8", status="failed", exit_code=None, failed_ranks=[])
    print_failures(Console(file=out, width=120), [(record, "runs/2x8/r/logs")])
    assert out.getvalue() == "2x8 failed (exit code unknown); logs in runs/2x8/r/logs\n"
