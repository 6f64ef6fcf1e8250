"""torchrun's failure summary, parsed (ddpcli.launch.supervisor.failed_ranks), on output captured from real torchrun
2.13 runs: three ranks that raised under `@record` (rank 0 first, so it is the root cause), and two ranks ended by
signals with no error file (one SIGKILLed itself, torchrun SIGTERMed the other)."""

from __future__ import annotations

import json
from pathlib import Path

from ddpcli.launch.supervisor import failed_ranks

CAPTURED = Path(__file__).parent / "fixtures" / "torchrun"


def agent_log(tmp_path: Path, name: str, logs: Path) -> Path:
    text = (CAPTURED / name).read_text(encoding="utf-8").replace("{LOGS}", str(logs))
    path = tmp_path / "torchrun.log"
    path.write_text(text, encoding="utf-8")
    return path


def error_file(logs: Path, local_rank: int, message: str, stderr: str) -> None:
    folder = logs / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True)
    payload = {"message": {"message": message, "extraInfo": {"py_callstack": "...", "timestamp": "1796135124"}}}
    (folder / "error.json").write_text(json.dumps(payload), encoding="utf-8")
    (folder / "stderr.log").write_text(stderr, encoding="utf-8")


def test_three_failed_ranks_root_cause_first_each_with_its_error_and_log(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    error_file(logs, 0, "ValueError: rank zero broke", "Traceback ...\nValueError: rank zero broke\n")
    for rank in (1, 2):
        error_file(logs, rank, "RuntimeError: rank one broke too", "about to fail\nRuntimeError: rank one broke too\n")
    found = failed_ranks(agent_log(tmp_path, "three_ranks_failed.log", logs), [logs])
    assert [(entry["rank"], entry["exit_code"], entry["root_cause"]) for entry in found] == [
        (0, 1, True), (1, 1, False), (2, 1, False)
    ]  # fmt: skip
    assert [entry["error"] for entry in found] == [
        "ValueError: rank zero broke", "RuntimeError: rank one broke too", "RuntimeError: rank one broke too"
    ]  # fmt: skip
    assert found[1]["log_tail"].splitlines()[0] == "about to fail"


def test_ranks_ended_by_signals_name_the_signal(tmp_path: Path) -> None:
    found = failed_ranks(agent_log(tmp_path, "killed_by_signals.log", tmp_path / "logs"), [])
    assert [(entry["rank"], entry["exit_code"], entry["error"], entry["root_cause"]) for entry in found] == [
        (1, -9, "killed by SIGKILL", True),
        (0, -15, "killed by SIGTERM", False),
    ]


def test_only_the_last_summary_after_the_offset_counts(tmp_path: Path) -> None:
    """A restarted group appends to the same log: the failures of an earlier attempt are not this one's."""
    first = agent_log(tmp_path, "killed_by_signals.log", tmp_path / "logs")
    offset = first.stat().st_size
    with first.open("a", encoding="utf-8") as handle:
        handle.write("INFO: restarting the worker group\n")
    assert failed_ranks(first, [], offset=offset) == []
