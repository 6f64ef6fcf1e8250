"""compare's memory per run: what a comparison and its table keep for each run compared, measured with tracemalloc
as the slope between 40 and 160 synthesized runs (so the interpreter's and the imports' share cancels out).

Each run's record (run.json as read, a pydantic model: ~6 KB) is held for the notes and --json; the measure starts
once the records are read. Before rows were slimmed, each run also kept its curves (~11 KB of sparkline and lr
points) and its table cells as Rich Texts (~7 KB), held until the table was laid out.
"""

from __future__ import annotations

import gc
import json
import shutil
import tracemalloc
from pathlib import Path

import pytest
from rich.text import Text

from ddpcli import compare as cmp
from ddpcli.cli.render.compare import COLUMNS, _cells
from ddpcli.cli.render.fast_table import Header, fast_table
from ddpcli.compare import summary_cache
from ddpcli.rundir.layout import RUN_FILE
from tests.test_comparison import make_run

RETAINED_PER_RUN = 3_000  # bytes: the row's numbers, a slim summary, the table's compact cells
PEAK_PER_RUN = 6_000  # while rows are built: the above, plus the single-process runs' curves (a quarter of runs)


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
        (run_dir / RUN_FILE).write_text(json.dumps(record), encoding="utf-8")


def held(root: Path) -> tuple[int, int]:
    """(bytes kept, peak bytes above that) by comparing the runs under `root` and building the table's rows,
    counted from when the records have been read."""
    records, _ = cmp.collect_runs([root])
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        comparison = cmp.compare_runs(records)
        headers = [Header(column.header, column.justify) for column in COLUMNS]
        table = fast_table(headers, (_cells(row) for row in comparison.rows), 10_000, title=Text(""), caption=Text(""))
        assert table is not None and len(table.rows) == len(records)
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return kept - start, peak - start


def test_memory_per_run_stays_flat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No summary is written (RACY_S: the copies never settle), whether the copying took more or less than 2 s: a
    write interns its paths, and the interpreter's table of interned strings growing by megabytes is not ours."""
    monkeypatch.setattr(summary_cache, "RACY_S", 1e9)
    template = make_run(tmp_path / "template", "1x16", steps=100)
    measured = {}
    for runs in (40, 160):
        synthesize(template, tmp_path / f"runs-{runs}", runs)
        if not measured:
            held(tmp_path / f"runs-{runs}")  # warm: what a first compare caches for good is not kept per run
        measured[runs] = held(tmp_path / f"runs-{runs}")
    kept_per_run = (measured[160][0] - measured[40][0]) / 120
    peak_per_run = (measured[160][1] - measured[40][1]) / 120
    assert kept_per_run < RETAINED_PER_RUN, f"{kept_per_run:.0f} bytes kept a run"
    assert peak_per_run < PEAK_PER_RUN, f"{peak_per_run:.0f} bytes at peak a run"
