"""A failing rank's traceback starts at the user's code, in the terminal (the rank's stderr) and in error.json:
no frame of ddpcli's observer entry, of torch's `record` wrapper or of runpy, as under plain `python train.py`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpcli.jsonvalues import read_json
from tests.conftest import REPO, write_toml

CRASH = REPO / "tests" / "observe_scripts" / "crash.py"
FILE = f"""
[defaults]
script = "{CRASH}"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "crash"
per_device_batch_size = 4
lr = 0.1
"""


def frames(traceback_text: str) -> list[str]:
    return [line.strip() for line in traceback_text.splitlines() if line.strip().startswith("File ")]


@pytest.mark.e2e
def test_a_failing_ranks_traceback_starts_in_the_users_code(tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, str(CRASH)], capture_output=True, text=True, check=False)
    result = subprocess.run(
        [sys.executable, "-m", "ddpcli", "launch", str(write_toml(tmp_path, FILE))],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    (run_dir,) = (tmp_path / "runs" / "crash").iterdir()
    (error_file,) = run_dir.glob("logs/*/attempt_0/0/error.json")
    callstack = json.loads(error_file.read_text())["message"]["extraInfo"]["py_callstack"]
    stderr_log = (error_file.parent / "stderr.log").read_text()
    expected = frames(plain.stderr)
    assert [frame.split(",")[0] for frame in expected] == [f'File "{CRASH}"'] * 3
    assert frames(callstack) == expected, callstack
    assert frames(stderr_log) == expected, stderr_log
    assert stderr_log.strip().endswith("ValueError: deliberate failure in the user's code")
    record = read_json(run_dir / "run.json")
    assert record["failed_ranks"][0]["error"] == "ValueError: deliberate failure in the user's code"
