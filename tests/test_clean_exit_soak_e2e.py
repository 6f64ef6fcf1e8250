"""Soak: 20 two-process runs of a plain gloo script under `ddpcli launch`, every one of which must exit cleanly.

With torch 2.13 a plain gloo script aborts at interpreter teardown in about one run of four; the observer's exit
(ddpcli/worker/process_group.py) prevents it. Minutes of launches for a rare failure: CI runs it (CI=true), a
developer's `pytest` skips it (tests/conftest.py). A file of its own so that pytest-xdist gives it a worker of its
own (`--dist loadfile`), early in the session: it is the longest single test of the suite.
"""

from __future__ import annotations

import time

import pytest

from tests.helpers import OBSERVE_SCRIPTS as SCRIPTS
from tests.helpers import launch

pytestmark = pytest.mark.e2e

CLEAN_EXIT_RUNS = 20


@pytest.mark.slow  # a soak test (about 2 minutes): CI runs it, a developer's `pytest` skips it (conftest.py)
def test_twenty_plain_two_process_runs_all_exit_cleanly(tmp_path_factory: pytest.TempPathFactory) -> None:
    experiments = "\n".join(
        f'[[experiments]]\nname = "run{index:02d}"\nnproc_per_node = 2\n' for index in range(1, CLEAN_EXIT_RUNS)
    )
    text = f"""
[defaults]
script = "{SCRIPTS / "plain.py"}"
args = ["--batch-size", "{{per_device_batch_size}}", "--steps", "{{total_steps}}", "--dataset-size", "64"]
max_steps = 2
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "run00"
nproc_per_node = 2
per_device_batch_size = 4
lr = 0.1

{experiments}
"""
    started = time.perf_counter()
    sweep = launch(tmp_path_factory, text)
    runs = sweep.runs()
    elapsed = time.perf_counter() - started
    assert len(runs) == CLEAN_EXIT_RUNS
    statuses = {name: (run["record"]["status"], run["record"]["exit_code"]) for name, run in runs.items()}
    assert set(statuses.values()) == {("completed", 0)}, statuses
    logs = [path.read_text(errors="replace") for path in sweep.root.glob("runs/*/*/logs/**/*.log")]
    assert not [text for text in logs if "terminate called" in text or "SIGABRT" in text]
    print(f"{CLEAN_EXIT_RUNS} runs of 2 processes in {elapsed:.1f} s")
