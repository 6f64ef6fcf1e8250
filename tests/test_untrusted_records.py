"""compare treats every value of a record as untrusted: a pid that does not fit, a negative one, a hostname that
is not a string. No exception escapes, with or without --json."""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.compare.runs import read_run_record
from tests.builders import make_run

runner = CliRunner()


def running_record(root: Path, **changes: Any) -> Path:
    run_dir = make_run(root, "2x8", nproc=2, per_device=8, steps=4)
    data = json.loads((run_dir / "run.json").read_text())
    data.update({"status": "running", "hostname": socket.gethostname(), **changes})
    (run_dir / "run.json").write_text(json.dumps(data))
    return run_dir


@pytest.mark.parametrize("pid", [2147483648, 2**64, -1, 0, -(2**70)])
def test_a_pid_that_names_no_process_is_no_launcher(tmp_path: Path, pid: int) -> None:
    """os.kill(2147483648, 0) raises OverflowError; os.kill(-1, 0) or (0, 0) asks about whole process groups."""
    run_dir = running_record(tmp_path, supervisor_pid=pid)
    assert read_run_record(run_dir).status == "lost"
    for args in (["--json"], []):
        result = runner.invoke(app, ["compare", str(tmp_path), *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert result.exit_code == 0, result.stderr


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.text(max_size=12),
    st.just(socket.gethostname()),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers() | st.floats() | st.text(max_size=4), max_size=3),
)
FIELDS = (
    "supervisor_pid", "hostname", "status", "exit_code", "wall_time_s", "restarts", "started_at", "ended_at",
    "observed", "findings", "failed_ranks", "observe", "env_added", "argv", "resumes", "group_rank", "timeout_s",
)  # fmt: skip


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.fixed_dictionaries({}, optional={key: HOSTILE for key in FIELDS}), running=st.booleans())
def test_any_record_values_never_crash_compare(values: dict[str, Any], running: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        make_run(root, "1x16", steps=3)
        run_dir = make_run(root, "2x8", nproc=2, per_device=8, steps=3)
        data = json.loads((run_dir / "run.json").read_text())
        data.update(values)
        if running:
            data["status"] = "running"
        (run_dir / "run.json").write_text(json.dumps(data))
        for args in (["--json"], []):
            result = runner.invoke(app, ["compare", str(root), *args])
            assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
            assert result.exit_code in (0, 2), result.stderr
