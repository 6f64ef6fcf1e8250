"""torchrun's interpreter started before the command is known (ddpcli.launch.prestart) runs torchrun as
`python -m torch.distributed.run ARGS` would: the same exit code, the run's environment, output in the log."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpcli.launch import prestart
from tests.conftest import REPO

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


@pytest.fixture(autouse=True)
def nothing_waiting() -> Iterator[None]:
    yield
    if prestart._waiting is not None:
        prestart._discard(prestart._waiting)
        prestart._waiting = None


@pytest.mark.e2e
def test_the_prestarted_interpreter_runs_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys, torch.distributed as dist\n"
        "dist.init_process_group('gloo'); dist.barrier(); dist.destroy_process_group()\n"
        "print('marker', os.environ['PRESTART_PROBE'], sys.stdin.read() == '', flush=True)\n"
        "sys.exit(3)\n"
    )
    prestart.prestart(["launch", "experiments.toml"])
    waiting = prestart._waiting
    assert waiting is not None
    log = tmp_path / "torchrun.log"
    argv = [*TORCHRUN, "--nproc-per-node", "1", "--standalone", "--log-dir", str(tmp_path / "logs"), "--tee", "3",
            str(script)]  # fmt: skip
    process = prestart.take(argv, {**os.environ, "PRESTART_PROBE": "seen", "OMP_NUM_THREADS": "1"}, log)
    assert process is waiting and prestart._waiting is None
    assert process.wait(120) == 1  # torchrun's own exit code for a failed worker, as from the command line
    text = log.read_text()
    assert "marker seen True" in text and "ChildFailedError" in text


def test_no_prestart_for_a_dry_run_or_another_command() -> None:
    for argv in (["launch", "--dry-run", "x.toml"], ["plan"], ["launch", "--help"], []):
        prestart.prestart(argv)
        assert prestart._waiting is None


def test_another_command_line_gets_a_fresh_process(tmp_path: Path) -> None:
    prestart.prestart(["launch", "x.toml"])
    waiting = prestart._waiting
    assert waiting is not None
    assert prestart.take(["torchrun", "--standalone", str(REPO)], dict(os.environ), tmp_path / "log") is None
    assert waiting.poll() is not None and prestart._waiting is None  # killed, not left waiting
