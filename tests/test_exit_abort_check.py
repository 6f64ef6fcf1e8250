"""tests/helpers.aborted_at_exit, the observer's half of the exit soak: it must name an observed run whose rank
aborted, and leave alone a bare run (the soak file checks those itself) and a clean one."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import aborted_at_exit, observed_multi_process_runs


def _run(root: Path, name: str, observe: bool, rank_logs: list[str]) -> None:
    run_dir = root / "runs" / name / "20261205T000000Z-000001"
    for rank, text in enumerate(rank_logs):
        log = run_dir / "logs" / "attempt_0" / str(rank) / "stderr.log"
        log.parent.mkdir(parents=True)
        log.write_text(text)
        (log.parent / "stdout.log").write_text("")
    (run_dir / "run.json").write_text(json.dumps({"name": name, "observe": observe}))


def test_an_observed_rank_that_aborted_is_named_with_its_log(tmp_path: Path) -> None:
    sweep = tmp_path / "0123abcd"  # a sweep's folder under the session's sweeps/
    abort = "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
    _run(sweep, "clean", True, ["", ""])
    _run(sweep, "aborted", True, ["", abort])
    _run(sweep, "bare", False, [abort, ""])
    _run(sweep, "single", True, [""])
    assert aborted_at_exit(sweep) == ["runs/aborted/20261205T000000Z-000001/logs/attempt_0/1/stderr.log"]
    assert observed_multi_process_runs(tmp_path) == 2
