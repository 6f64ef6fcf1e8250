"""The pure part of `ddpcli export`: which rows a viewer gets at which step, what is left after an earlier export,
and names from records made safe as one path component."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpcli.export.ledger import Exported, done, work
from ddpcli.export.names import MAX_BYTES, component, decoded
from ddpcli.export.points import LOSS, LR, OPTIMIZER_STEP, SAMPLES_PER_S, STEP_TIME, points
from ddpcli.export.runs import ExportRun


def test_each_row_at_samples_seen_with_its_own_values() -> None:
    rows = [
        {"step": 1, "samples": 64, "time": 1.0, "loss": 2.0, "lr": 0.1},
        {"step": 2, "samples": 128, "time": 1.5, "loss": "nan", "lr": [0.2, 0.02]},
        {"step": 3, "samples": 192, "time": 2.5, "loss": 1.0, "lr": 0.2},
    ]
    found = points(rows, started_at=1000.0)
    assert [point.samples for point in found] == [64, 128, 192]
    assert [point.wall_time for point in found] == [1001.0, 1001.5, 1002.5]
    assert found[0].values == {LOSS: 2.0, LR: 0.1, OPTIMIZER_STEP: 1.0}  # no rate: nothing came before it
    assert math.isnan(found[1].values[LOSS]) and found[1].values[LR] == 0.2  # NaN kept; the first param group
    assert found[2].values[SAMPLES_PER_S] == 64 / 1.0 and found[2].values[STEP_TIME] == 1.0


def test_rows_without_samples_get_step_times_global_batch_and_restarts_resolve() -> None:
    assert [point.samples for point in points([{"step": 1}, {"step": 2}], started_at=0, global_batch_size=32)] == [
        32,
        64,
    ]
    restarted = [{"step": 1, "samples": 16}, {"step": 2, "samples": 32}, {"step": 2, "samples": 32, "loss": 9.0}]
    found = points(restarted, started_at=0)
    assert [point.samples for point in found] == [16, 32] and found[-1].values[LOSS] == 9.0  # the later attempt


def _run(status: str, samples: list[int], tags: dict[str, str] | None = None) -> ExportRun:
    found = points([{"step": i + 1, "samples": s, "time": float(i)} for i, s in enumerate(samples)], started_at=0)
    return ExportRun(Path("r"), "id", "n", "g", status, {}, {}, tags or {}, found)


def test_a_second_export_writes_nothing_and_a_finished_run_its_rest() -> None:
    finished = _run("completed", [16, 32, 48])
    first = work(finished, None)
    assert [point.samples for point in first.new_points] == [16, 32, 48] and first.write_end
    entry = done(finished, None, first)
    assert entry == Exported("completed", 48, 1, "no verdict (no single-process run to check it against)")
    assert work(finished, Exported.from_json(entry.as_json("id"), "id")).nothing
    running = Exported("running", 32, 1)
    rest = work(finished, running)
    assert [point.samples for point in rest.new_points] == [48] and rest.write_end and rest.sequence == 2
    assert Exported.from_json(entry.as_json("other"), "id") is None  # a ledger of another run is not this one's


def test_a_verdict_that_came_after_the_run_ended_is_written_by_the_next_export() -> None:
    """Under `launch --export` a 2-process run can end before its single-process partner: exported then, it has no
    verdict; the export after the partner ended writes the verdict, and only it."""
    alone = _run("completed", [16, 32])
    entry = done(alone, None, work(alone, None))
    checked = _run("completed", [16, 32], {"verdict": "equivalent", "equivalent_to": "1x32"})
    later = work(checked, Exported.from_json(entry.as_json("id"), "id"))
    assert (later.new_points, later.write_end, later.write_verdict, later.words) == ([], False, True, "its new verdict")
    again = done(checked, entry, later)
    assert again.verdict == "equivalent to 1x32" and again.exports == 2
    assert work(checked, again).nothing


@given(st.text(max_size=80))
def test_any_name_is_one_safe_component_that_reads_back(name: str) -> None:
    encoded = component(name)
    assert "/" not in encoded and "\\" not in encoded and "\x00" not in encoded
    assert encoded not in ("", ".", "..") and len(encoded.encode()) <= MAX_BYTES
    if len(encoded) < MAX_BYTES - 17:
        assert decoded(encoded) == name


@given(st.text(max_size=40), st.text(max_size=40))
def test_distinct_names_stay_distinct(first: str, second: str) -> None:
    if first != second:
        assert component(first) != component(second)


def test_the_mlflow_lock_is_the_stores_whatever_path_spells_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49.24: `ln -s ml.db link.db`, then exports to sqlite:///.../ml.db and sqlite:///.../link.db at once made
    two MLflow runs of one ddpcli run: the lock was named after the spelled path, not the store it reaches."""
    from ddpcli.export.to_mlflow import lock_path

    (tmp_path / "ml.db").write_bytes(b"")
    (tmp_path / "link.db").symlink_to(tmp_path / "ml.db")
    (tmp_path / "folder").symlink_to(tmp_path, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    spellings = [f"sqlite:///{tmp_path}/ml.db", f"sqlite:///{tmp_path}/link.db", "sqlite:///ml.db",
                 f"sqlite:///{tmp_path}/folder/ml.db", "sqlite:///./ml.db"]  # fmt: skip
    assert {lock_path(uri) for uri in spellings} == {tmp_path / "ml.db.ddpcli-lock"}
    assert lock_path(f"sqlite:///{tmp_path}/new.db") == tmp_path / "new.db.ddpcli-lock"  # not made yet: its path
