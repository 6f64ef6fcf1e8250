"""compare chooses and orders its runs by their keys (ddpcli.compare.run_keys), kept in summary.json's `index`
while run.json is unchanged: a compare after the first parses each record once, for its row. A changed, moved,
malformed or foreign index is never used: the keys are read from run.json again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcli.compare import collect_runs, summary_cache
from ddpcli.compare.run_keys import NAMES, TYPES, RunKeys
from ddpcli.compare.table import ComparisonStream
from ddpcli.rundir.layout import RUN_FILE, SUMMARY_FILE
from ddpcli.rundir.record import RunRecord
from tests.builders import make_run


@pytest.fixture
def settled_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_cache, "RACY_S", -1.0)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every run.json parsed, by directory."""
    parsed: list[Path] = []
    load = RunRecord.load_tolerant.__func__  # type: ignore[attr-defined]

    def counting(cls: type[RunRecord], run_dir: Path) -> RunRecord:
        parsed.append(run_dir)
        return load(cls, run_dir)

    monkeypatch.setattr(RunRecord, "load_tolerant", classmethod(counting))
    return parsed


def sweep(root: Path) -> list[Path]:
    return [
        make_run(root, "1x16", steps=40),
        make_run(root, "1x32", per_device=32, lr=0.1, steps=20),
        make_run(root, "2x16", nproc=2, lr=0.1, steps=20),
    ]


def compared(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    records, _ = collect_runs([root])
    stream = ComparisonStream(records)
    rows = [row.as_json() for row in stream.rows()]
    return rows, stream.notes


def test_a_later_compare_parses_each_record_once(tmp_path: Path, settled_at_once: None, reads: list[Path]) -> None:
    run_dirs = sweep(tmp_path)
    first = compared(tmp_path)
    # the first: for the keys, again for the row, and 1x32's once more as the partner 2x16's row checks against
    assert sorted(reads) == sorted([*run_dirs, *run_dirs, run_dirs[1]])
    assert all("index" in json.loads((run_dir / SUMMARY_FILE).read_text()) for run_dir in run_dirs)
    reads.clear()
    records, _ = collect_runs([tmp_path])
    assert reads == []  # chosen and ordered from summary.json alone
    assert [run.name for run in records] == ["1x16", "1x32", "2x16"]
    reads.clear()
    assert compared(tmp_path) == first
    assert sorted(reads) == sorted([*run_dirs, run_dirs[1]])


def test_an_edited_record_is_read_again(tmp_path: Path, settled_at_once: None) -> None:
    run_dirs = sweep(tmp_path)
    compared(tmp_path)
    path = run_dirs[2] / RUN_FILE
    record = json.loads(path.read_text()) | {"status": "failed", "exit_code": 1}
    record["plan"]["per_device_batch_size"] = 8
    path.write_text(json.dumps(record))
    rows, notes = compared(tmp_path)
    assert (rows[2]["name"], rows[2]["status"], rows[2]["per_device_batch_size"]) == ("2x16", "failed", 8)
    assert "2x16 failed: exit code 1." in notes


def test_a_nameless_record_moved_to_another_name_takes_the_new_one(tmp_path: Path, settled_at_once: None) -> None:
    """A record without a name is named by its directory: a rename of that directory leaves run.json's stamps as
    they were, and must not leave the old name."""
    base = make_run(tmp_path, "1x16", steps=40)
    other = make_run(tmp_path, "2x16", nproc=2, steps=20)
    record = json.loads((other / RUN_FILE).read_text())
    del record["name"], record["plan"]["name"]
    (other / RUN_FILE).write_text(json.dumps(record))
    assert [row["name"] for row in compared(tmp_path)[0]] == ["1x16", "2x16"]
    (tmp_path / "2x16").rename(tmp_path / "2x16-renamed")
    assert [row["name"] for row in compared(tmp_path)[0]] == ["1x16", "2x16-renamed"]
    assert base.is_dir()


@pytest.mark.parametrize(
    "broken",
    [{"world_size": "2"}, {"lr": True}, {"restarts": None}, {"name": 3}, {"seed": [1]}, {"extra": 1}, "keys"],
)
def test_a_malformed_index_is_not_used(tmp_path: Path, settled_at_once: None, broken: Any, reads: list[Path]) -> None:
    run_dirs = sweep(tmp_path)
    expected = compared(tmp_path)
    path = run_dirs[2] / SUMMARY_FILE
    data = json.loads(path.read_text())
    index = data["index"]["values"]
    index = {**index, "world_size": 1, **broken} if isinstance(broken, dict) else broken  # world_size 1: a lie
    path.write_text(json.dumps({**data, "index": {**data["index"], "values": index}}))
    reads.clear()
    assert compared(tmp_path) == expected
    assert reads.count(run_dirs[2]) == 2


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(NAMES)), JSON, min_size=len(NAMES) - 2))
def test_keys_read_back_are_of_the_types_kept_or_none(values: dict[str, Any]) -> None:
    keys = RunKeys.from_json(values)
    if keys is not None:
        assert values.keys() == NAMES
        assert all(type(getattr(keys, name)) in allowed for name, allowed in TYPES.items())
        assert RunKeys.from_json(keys.as_json()) == keys


PLAN_KEYS = ["world_size", "per_device_batch_size", "grad_accum_steps", "global_batch_size", "total_steps", "lr",
             "scaling", "seed"]  # fmt: skip
PLAN_VALUES = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    plan=st.dictionaries(st.sampled_from(PLAN_KEYS), PLAN_VALUES),
    status=st.sampled_from(["completed", "failed", "lost"]),
    steps=st.none() | st.integers(0, 3),
)
def test_the_keys_of_any_record_survive_summary_json(plan: dict[str, Any], status: str, steps: int | None) -> None:
    record = RunRecord(run_id="r", name="n", status=status, plan=plan, observed={"optimizer_steps": steps})
    keys = RunKeys.of(record)
    assert RunKeys.from_json(json.loads(json.dumps(keys.as_json()))) == keys
