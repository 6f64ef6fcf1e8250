"""`ddpcli launch`'s summary table: one row per run, from values the command has already read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text

from ddpcli.cli.render.format import MISSING, fmt_number
from ddpcli.cli.render.layout import Column, fitted_tables

COLUMNS = (
    Column("run", "left"), Column("status", "left"), Column("wall time"), Column("final loss"),
    Column("run directory / failure", "left", wraps=True),
)  # fmt: skip
STATUS_STYLE = {"completed": "green"}  # anything else is a failure: red


@dataclass(frozen=True)
class LaunchRow:
    """What the summary shows of one run (the command reads run.json and metrics.jsonl, not the renderer)."""

    name: str
    status: str
    wall_time_s: float | None
    final_loss: float | None
    run_dir: str  # as it should be shown (relative to the current directory when below it)
    failure: str | None = None  # "rank R exit C: error" of the first failed rank


def launch_summary_tables(rows: Sequence[LaunchRow], width: int) -> list[RenderableType]:
    """The runs of a sweep, their status, wall time and final loss; split by column when `width` is narrow."""
    cells = [_cells(row) for row in rows]
    return fitted_tables(COLUMNS, cells, width, title="Runs")


def _cells(row: LaunchRow) -> list[Text]:
    detail = row.run_dir + (f"\n{row.failure}" if row.failure else "")
    return [
        Text(row.name),
        Text(row.status, style=STATUS_STYLE.get(row.status, "red")),
        Text(MISSING if row.wall_time_s is None else f"{row.wall_time_s:.1f}s"),
        Text(fmt_number(row.final_loss)),
        Text(detail),
    ]
