"""`ddpcli compare`'s tables, CSV text and plot figure, from a ddpcli.compare.Comparison or its rows as they stream.

Nothing here writes a file: the command writes the CSV text and saves the figure.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from ddpcli.cli.render.format import MISSING, fixed, fmt_number, percent, status_style
from ddpcli.cli.render.layout import Column, fitted_tables
from ddpcli.cli.render.step_time import BAR_LEGEND, peak_memory_cell, prediction_cell, step_bar
from ddpcli.compare import DIVERGED, EQUIVALENT, ROW_KEYS, Comparison, ComparisonRow
from ddpcli.compare.table import ComparisonHead

VERDICT_STYLE = {EQUIVALENT: "green", DIVERGED: "red"}
COLUMNS = (
    Column("run", "left"),
    Column("status", "left"),
    Column("procs"),
    Column("batch"),
    Column("global"),
    Column("lr"),
    Column("steps"),
    Column("samples"),
    Column("loss"),
    Column("loss at\nbase"),
    *(Column(header, section="speed") for header in ("wall\ns", "samples\n/s", "predicted\n/s", "speedup", "eff")),
    Column("step time", "left", section="speed"),
    Column("peak\nmem", section="speed"),
    Column("noise\nscale", section="speed"),
    Column("equivalence", "left", wraps=True, section="speed"),
    Column("loss curve", "left", section="speed"),
)  # fmt: skip  (a narrow console splits training columns from speed and equivalence)


def comparison_tables(comparison: Comparison, width: int) -> list[RenderableType]:
    """One table when it fits in `width`; else training, then speed and equivalence, each split again if need be,
    every one keyed by run (see ddpcli.cli.render.layout: no value is ever cut)."""
    return tables_of(comparison, [_cells(row) for row in comparison.rows], width)


def tables_of(head: ComparisonHead, rows: list[list[Text]], width: int) -> list[RenderableType]:
    """comparison_tables of rows' cells (`_cells`) taken as the rows streamed."""
    return fitted_tables(COLUMNS, rows, width, title=title(head), caption=_caption(head))


def title(head: ComparisonHead) -> Text:
    return Text(f"Compare: baseline {head.baseline.label} ({head.baseline_reason})")


def _cells(row: ComparisonRow) -> list[Text]:
    run, metrics = row.run.record, row.run.metrics
    batch = fmt_number(run.per_device_batch_size)
    if run.grad_accum_steps and run.grad_accum_steps > 1:
        batch += f"x{run.grad_accum_steps}acc"
    cells = [
        fmt_number(run.world_size),
        batch,
        fmt_number(run.global_batch_size),
        fmt_number(run.lr),
        fmt_number(metrics.steps),
        fmt_number(metrics.samples_seen),
        fmt_number(metrics.final_loss),
        fmt_number(row.loss_at_baseline_samples),
        fixed(run.record.wall_time_s, 1),
        fixed(row.samples_per_s, 0),
    ]
    speed = [MISSING if row.speedup is None else f"{row.speedup:.2f}x", percent(row.scaling_efficiency)]
    if row.speed_unreliable:  # a starved run or baseline: not a measure of DDP (the note says why)
        speed = [cell if cell == MISSING else f"{cell}?" for cell in speed]
    breakdown = run.record.observed.time_breakdown if run.record.observed is not None else None
    return [
        Text(row.label + _marks(row), style="bold" if row.is_baseline else ""),
        Text(run.status, style=status_style(run.status)),
        *map(Text, cells),
        prediction_cell(row.prediction),
        *map(Text, speed),
        step_bar(breakdown),
        peak_memory_cell(breakdown),
        Text(fixed(row.run.noise_scale, 0)),
        _equivalence_cell(row),
        Text(row.sparkline or MISSING),
    ]


def _marks(row: ComparisonRow) -> str:
    """* the baseline; ! the script did not follow its plan, or trained on something else than its numbers say
    (ddpcli.diagnosis.run_checks.MARKED_CODES); ~ not observed, so its numbers are the plan's."""
    record = row.run.record
    marks = "*" if row.is_baseline else ""
    if not record.observed_from_run:
        marks += "~"
    elif row.marked:
        marks += "!"
    return f" {marks}" if marks else ""


def _equivalence_cell(row: ComparisonRow) -> Text:
    if row.partner is None:
        return Text(MISSING)
    diff = row.param_diff
    if row.verdict is None or diff is None:
        return Text(f"unchecked vs {row.partner_label}", style="dim")
    amount = f", {diff.max_abs_diff:.2g}" if diff.max_abs_diff is not None else ""
    return Text(f"{row.verdict} vs {row.partner_label}{amount}", style=VERDICT_STYLE.get(row.verdict, ""))


def _caption(comparison: ComparisonHead) -> str:
    base = comparison.baseline.run.metrics.samples_seen
    lines = [
        "* baseline. ! did not follow its plan, or its lr schedule or steps were not what its numbers say (see the "
        "notes). batch, global, lr (base) and steps: what each run did, as observed; ~ not observed, so they are its "
        "plan's.",
        "batch: per process (x accumulation). samples/s: from the first to the last metrics row, per model where "
        "the processes trained separate models (then no speedup). "
        "eff: speedup / world-size ratio (- at the baseline's world size). noise scale: last measured B_simple (the "
        "critical batch, roughly).",
        "predicted: the baseline's prediction, before the run (its error against samples/s). "
        f"{BAR_LEGEND} (median rank; the first step left out). peak mem: the largest rank's.",
        f"loss at base: loss at the baseline's {fmt_number(base)} samples seen (- : the run did not get there). "
        f"equivalence: max |param diff| against the single-process run with the same global batch, lr and steps "
        f"(atol {comparison.atol:g}).",
    ]
    if len(comparison.experiment_files) > 1:
        lines.append(
            f"Runs from {len(comparison.experiment_files)} experiment files: {', '.join(comparison.experiment_files)}."
        )
    return "\n".join(lines)


class CsvRows:
    """The --json rows as CSV (empty cell for null), for spreadsheets: written as the rows stream."""

    def __init__(self) -> None:
        self._buffer = io.StringIO(newline="")
        self._writer = csv.DictWriter(self._buffer, fieldnames=ROW_KEYS, extrasaction="ignore")  # no nested keys
        self._writer.writeheader()

    def add(self, row: dict[str, Any]) -> None:
        self._writer.writerow(row)

    def text(self) -> str:
        return self._buffer.getvalue()


@dataclass(frozen=True)
class LossCurve:
    """A run's line in the loss figure: its label and (samples, loss) points."""

    label: str
    is_baseline: bool
    points: list[tuple[float, float]]

    @classmethod
    def of(cls, row: ComparisonRow) -> LossCurve:
        return cls(row.label, row.is_baseline, row.run.metrics.plot_points)


def loss_figure(curves: Iterable[LossCurve], pyplot: ModuleType) -> Any:
    """Loss against samples seen, one line per run (up to PLOT_POINTS evenly spaced rows each): a matplotlib
    Figure for the caller to save (and close)."""
    figure, axes = pyplot.subplots(figsize=(9, 5.5))
    for curve in curves:
        if not curve.points:
            continue
        xs, ys = zip(*curve.points, strict=True)
        axes.plot(
            xs,
            ys,
            label=curve.label + (" (baseline)" if curve.is_baseline else ""),
            linewidth=2.0 if curve.is_baseline else 1.2,
        )
    axes.set_xlabel("samples seen")
    axes.set_ylabel("loss")
    axes.set_title("Loss against samples seen")
    axes.grid(True, alpha=0.3)
    if axes.lines:
        axes.legend()
    figure.tight_layout()
    return figure
