"""compare's memory per run: what `ddpcli compare` keeps for each run compared, from reading the run directories to
the table's cells and the notes, measured with tracemalloc as the slope between 40 and 160 synthesized runs (so the
interpreter's and the imports' share cancels out).

The runs are copies of a real record (tests/fixtures/run_records: run.json as `ddpcli launch` wrote it for the
bundled 4x16 run, observed, with its time breakdown, prediction and findings: ~40 KB a record in memory). Before
rows streamed, every record was held until the notes were written (and, before the rows were slimmed, each run's
curves and its cells as Rich Texts too). What is left per run is mostly what gets printed: the table's compact
cells and the notes (two findings a run here), and the keys each run is sorted and paired by.
"""

from __future__ import annotations

import gc
import json
import shutil
import threading
import tracemalloc
from pathlib import Path

import pytest

from ddpcli.cli.commands.compare import _Outputs
from ddpcli.compare import collect_runs, summary_cache
from ddpcli.compare.table import ComparisonStream
from ddpcli.rundir.layout import RUN_FILE
from tests.builders import make_run

RECORD = Path(__file__).parent / "fixtures" / "run_records" / "observed-4x16.json"
RETAINED_PER_RUN = 6_000  # bytes: the notes and cells printed for the run, its keys, a slim summary for a partner
PEAK_PER_RUN = 8_000  # while rows stream: the above, plus one record at a time (not one a run)


def synthesize(template: Path, root: Path, runs: int) -> None:
    """`runs` copies of `template` with distinct names and world sizes 1, 2, 4, 8 (as benchmarks/compare_scale.py)."""
    base = json.loads((template / RUN_FILE).read_text(encoding="utf-8"))
    for index in range(runs):
        world = (1, 2, 4, 8)[index % 4]
        name, run_id = f"{world}x16-{index:05d}", f"20260101T{index:06d}Z-{index:06x}"
        run_dir = root / name / run_id
        shutil.copytree(template, run_dir)
        record = json.loads(json.dumps(base))
        record.update(name=name, run_id=run_id)
        record["plan"].update(name=name, nproc_per_node=world, world_size=world, global_batch_size=16 * world)
        if record.get("observed"):
            record["observed"].update(world_size=world, processes=world, global_batch_size=16 * world)
        (run_dir / RUN_FILE).write_text(json.dumps(record), encoding="utf-8")


def compared(root: Path, *, json_rows: bool = False) -> None:
    """What `ddpcli compare` does with the runs under `root`: read them, stream the rows into the table's cells (or
    --json's dicts, printed and dropped) and write the notes."""
    records, _ = collect_runs([root])
    stream = ComparisonStream(records, notes=not json_rows)  # as the command: --json prints no notes
    outputs = _Outputs(table=not json_rows, csv=False, plot=False)
    rows = sum(1 for _ in outputs.taken(stream))
    assert rows == len(records) and (json_rows or stream.notes)


def held(root: Path, *, json_rows: bool = False) -> tuple[int, int]:
    """(bytes kept, peak bytes above that) by `compared(root)`, traced by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        compared(root, json_rows=json_rows)
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return kept - start, peak - start


@pytest.fixture
def template(tmp_path: Path) -> Path:
    run_dir = make_run(tmp_path / "template", "4x16", nproc=4, steps=100)
    shutil.copy(RECORD, run_dir / RUN_FILE)
    return run_dir


@pytest.mark.parametrize("json_rows", [False, True], ids=["table", "json"])
@pytest.mark.parametrize("settled", [False, True], ids=["first-compare", "summaries-kept"])
def test_memory_per_run_stays_flat(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_rows: bool, settled: bool
) -> None:
    """A first compare (no summary written: RACY_S makes the copies never settle, whether the copying took more or
    less than 2 s), and a compare that reads the summaries a first one kept."""
    monkeypatch.setattr(summary_cache, "RACY_S", -1.0 if settled else 1e9)
    for runs in (40, 160):
        synthesize(template, tmp_path / f"runs-{runs}", runs)
        compared(tmp_path / f"runs-{runs}", json_rows=json_rows)  # warm: the interpreter's caches; writes summaries
    kept_per_run, peak_per_run = slopes(tmp_path, json_rows)
    if kept_per_run >= RETAINED_PER_RUN or peak_per_run >= PEAK_PER_RUN:
        # tracemalloc counts every thread of this pytest worker: in 1 CI run of ~8 one measurement kept 32 KB a run
        # (never alone, 0 of 20). Memory that compare itself keeps is kept again; the lower of two is compare's.
        again = slopes(tmp_path, json_rows)
        kept_per_run, peak_per_run = min(kept_per_run, again[0]), min(peak_per_run, again[1])
    threads = [thread.name for thread in threading.enumerate()]
    assert kept_per_run < RETAINED_PER_RUN, f"{kept_per_run:.0f} bytes kept a run (threads: {threads})"
    assert peak_per_run < PEAK_PER_RUN, f"{peak_per_run:.0f} bytes at peak a run (threads: {threads})"


def slopes(root: Path, json_rows: bool) -> tuple[float, float]:
    """Bytes kept, and at peak, per run: between compare of the 40 and of the 160 runs under `root`."""
    measured = {runs: held(root / f"runs-{runs}", json_rows=json_rows) for runs in (40, 160)}
    return (measured[160][0] - measured[40][0]) / 120, (measured[160][1] - measured[40][1]) / 120


def test_a_record_is_held_only_while_its_row_is_built(template: Path, tmp_path: Path) -> None:
    """The rows come with their records; once the next row is asked for, the last one's record is let go (the
    baseline's is kept: every row is measured against it)."""
    synthesize(template, tmp_path / "runs", 8)
    records, _ = collect_runs([tmp_path / "runs"])
    assert not any(run._record is not None for run in records)  # read for their keys, then let go
    stream = ComparisonStream(records)
    for row in stream.rows():
        held_now = [run for run in records if run._record is not None]
        assert row.run.record in held_now and len(held_now) <= 3  # this row's, its partner's, the baseline's
    assert [run for run in records if run._record is not None] == [stream.head.baseline.run.record]
