"""compare keeps a finished run's summary in summary.json and reads it back while the run's files are unchanged
(ddpcli.compare.summary_cache); a stale, corrupt or foreign summary is never shown: the summary is derived again."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from ddpcli import compare as cmp
from ddpcli.compare import metrics as compare_metrics
from ddpcli.compare import summary_cache
from ddpcli.rundir.layout import SUMMARY_FILE
from tests.builders import make_run, records


@pytest.fixture
def settled_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by the test count as settled (no 2 s wait for the coarse-clock guard)."""
    monkeypatch.setattr(summary_cache, "RACY_S", -1.0)


def rows(*run_dirs: Path) -> list[dict]:
    return [row.as_json() for row in cmp.compare_runs(records(*run_dirs)).rows]


def two_runs(root: Path) -> tuple[Path, Path]:
    base = make_run(root, "1x16", steps=50, loss=lambda step: 2.0 / step)
    other = make_run(root, "2x16", nproc=2, steps=30, loss=lambda step: 3.0 / step)
    return base, other


def test_a_second_compare_reads_the_summaries_and_shows_the_same(tmp_path: Path, settled_at_once: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    base, other = two_runs(tmp_path)
    first = rows(base, other)
    assert (base / SUMMARY_FILE).is_file() and (other / SUMMARY_FILE).is_file()

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("metrics.jsonl read again")

    monkeypatch.setattr(compare_metrics, "summarize_metrics", no_reading)
    assert rows(base, other) == first


def test_a_changed_metrics_file_is_derived_again(tmp_path: Path, settled_at_once: None) -> None:
    base, other = two_runs(tmp_path)
    before = rows(base, other)
    lines = (other / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1]) | {"loss": 7.25}
    (other / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    after = rows(base, other)
    assert before[1]["final_loss"] == pytest.approx(0.1) and after[1]["final_loss"] == 7.25


def test_a_changed_baseline_target_is_derived_again(tmp_path: Path, settled_at_once: None) -> None:
    """The loss at the baseline's sample count depends on the baseline: a summary for another target is not used."""
    base, other = two_runs(tmp_path)
    assert rows(base, other)[1]["loss_at_baseline_samples"] == pytest.approx(3.0 / 25)  # 800 samples: step 25
    shorter = make_run(tmp_path / "b", "1x16", steps=20, loss=lambda step: 2.0 / step)
    at = rows(shorter, other)[1]["loss_at_baseline_samples"]
    assert at == pytest.approx(3.0 / 10)  # 320 samples: step 10 of 2x16 (32 a step)


@pytest.mark.parametrize(
    "corrupt",
    [
        "not json at all",
        '{"key": 1}',
        "[]",
        "",
    ],
)
def test_a_corrupt_summary_is_derived_again(tmp_path: Path, settled_at_once: None, corrupt: str) -> None:
    base, other = two_runs(tmp_path)
    expected = rows(base, other)
    (other / SUMMARY_FILE).write_text(corrupt)
    assert rows(base, other) == expected


def test_a_summary_with_wrong_values_under_the_right_key_is_derived_again(
    tmp_path: Path, settled_at_once: None
) -> None:
    base, other = two_runs(tmp_path)
    expected = rows(base, other)
    path = other / SUMMARY_FILE
    data = json.loads(path.read_text())
    broken_values = (
        {"final_loss": "3"},
        {"rows": None},
        {"lr_points": [[1, 2]]},
        {"noise_scale": True},
        {"rows": True},
        {"lr_points": [[1, 2, 3.5]]},
        {"lr_points": [[1, False, 3]]},
        {"loss_points": [1.0, True]},
        {"steps": 2.0},
        {"skipped": ["ok", 1]},
        {"full_parse": 1},
        {"noise_problem": 3},
    )  # a bool is no number, a step is whole
    for broken in broken_values:
        path.write_text(json.dumps({"key": data["key"], "values": {**data["values"], **broken}}))
        assert rows(base, other) == expected
    del data["values"]["loss_points"]
    path.write_text(json.dumps(data))
    assert rows(base, other) == expected


def test_a_copied_run_directory_does_not_use_the_summary_of_the_original(tmp_path: Path, settled_at_once: None) -> None:
    """A copy (same files, other path) names its own path in its warnings: its summary is its own."""
    base, other = two_runs(tmp_path)
    with (other / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 31, "loss"')  # a partial last line: a warning naming the file
    rows(base, other)
    copy = tmp_path / "copy" / "2x16" / other.name
    shutil.copytree(other, copy)
    comparison = cmp.compare_runs(records(base, copy))
    assert any(str(copy) in warning for warning in comparison.warnings)
    assert not any(str(other) in warning for warning in comparison.warnings)


def test_fresh_files_and_unfinished_runs_are_not_summarised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file changed less than RACY_S ago may be rewritten within one clock tick at the same size: no summary."""
    base, other = two_runs(tmp_path)
    rows(base, other)
    assert not (base / SUMMARY_FILE).exists()
    monkeypatch.setattr(summary_cache, "RACY_S", -1.0)
    running = make_run(tmp_path / "r", "2x8", nproc=2, per_device=8, status="running")
    rows(base, running)
    assert (base / SUMMARY_FILE).is_file() and not (running / SUMMARY_FILE).exists()


def test_a_run_whose_loss_blew_up_is_shown_as_derived_and_not_kept(tmp_path: Path, settled_at_once: None) -> None:
    """Summaries are strict JSON: a NaN final loss is not written (every compare derives that run)."""
    base = make_run(tmp_path, "1x16", steps=20)
    blown = make_run(tmp_path, "2x16", nproc=2, steps=20, loss=lambda step: math.nan if step == 20 else 1.0)
    comparison = cmp.compare_runs(records(base, blown))
    assert math.isnan(comparison.rows[1].run.metrics.final_loss)
    assert (base / SUMMARY_FILE).is_file() and not (blown / SUMMARY_FILE).exists()
    assert not list(blown.glob(f".{SUMMARY_FILE}.*"))  # no temporary file left behind
