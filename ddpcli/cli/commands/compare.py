"""`ddpcli compare`: finished runs side by side. Parses flags, calls ddpcli.core.comparison, renders with Rich."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ddpcli.cli.console import stderr, stdout, user_errors
from ddpcli.cli.render import fmt_number, print_bullets
from ddpcli.core.comparison import (
    DEFAULT_ATOL,
    DIVERGED,
    EQUIVALENT,
    PLOT_POINTS,
    ROW_KEYS,
    Comparison,
    ComparisonRow,
    collect_runs,
    compare_runs,
)
from ddpcli.core.errors import UserError
from ddpcli.core.planning import load_plan

EXPERIMENT_FILE = Path("experiments.toml")
STATUS_STYLE = {"completed": "green", "failed": "red", "timed_out": "red", "interrupted": "yellow"}
VERDICT_STYLE = {EQUIVALENT: "green", DIVERGED: "red"}
COLUMNS = (
    "run", "status", "procs", "batch", "global", "lr", "steps", "samples", "loss", "loss at\nbase", "wall\ns",
    "samples\n/s", "speedup", "eff", "noise\nscale", "equivalence", "loss curve",
)  # fmt: skip
SPLIT_AT = COLUMNS.index("wall\ns")  # where the table splits in two on a narrow console
LEFT = {"run", "status", "equivalence", "loss curve"}


@user_errors
def compare_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Run directories or runs roots. Default: runs_dir of ./experiments.toml if it exists, else ./runs.",
            metavar="PATH",
            show_default=False,
        ),
    ] = None,
    include_all: Annotated[
        bool, typer.Option("--all", help="Every run under a root, not just the newest of each name.")
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(help="Name of the run to measure against. Default: the experiment file's baseline."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of rows instead of the table.")] = False,
    csv_path: Annotated[
        Path | None, typer.Option("--csv", help="Also write the rows to this CSV file.", dir_okay=False)
    ] = None,
    plot_path: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Also plot loss against samples seen to this PNG (needs ddpcli[plot]).", dir_okay=False
        ),
    ] = None,
    atol: Annotated[
        float, typer.Option(min=0.0, help="Largest parameter difference that still counts as equivalent.")
    ] = DEFAULT_ATOL,
) -> None:
    """Compare runs: throughput, speedup and scaling efficiency against a baseline, loss at equal samples
    seen, and whether each multi-process run ends with the same parameters as its single-process equivalent.

    samples/s is the throughput between the first and the last metrics row (steady state: the first step's set-up
    costs are left out; wall s has everything); speedup is its ratio to the baseline's; efficiency is speedup /
    (world size / baseline world size); loss at base is the loss interpolated at the baseline's final sample count.
    From a runs root, the newest completed run of each name is taken (the newest of any status if a name never
    completed). The baseline is --baseline, else the experiment file's baseline, else the run with the smallest
    world size. torch is imported only to read final_params.pt.
    """
    pyplot = _pyplot() if plot_path is not None else None
    for path in (csv_path, plot_path):
        if path is not None and not path.parent.is_dir():
            raise UserError(f"{path}: its directory {path.parent} does not exist")
    records, warnings = collect_runs(paths or [_default_root()], include_all)
    comparison = compare_runs(
        records, baseline=baseline, atol=atol, plot_points=PLOT_POINTS if plot_path is not None else 0
    )
    for warning in [*warnings, *comparison.warnings]:
        stderr.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if as_json:
        print(json.dumps([row.as_json() for row in comparison.rows], indent=2, allow_nan=False))
    else:
        for table in comparison_tables(comparison, stdout.width):
            stdout.print(table)
        print_bullets(stdout, "Notes", comparison.notes)
    if csv_path is not None:
        _writing(csv_path, lambda: write_csv(comparison, csv_path))
    if plot_path is not None and pyplot is not None:
        _writing(plot_path, lambda: write_plot(comparison, plot_path, pyplot))


def _writing(path: Path, write: Callable[[], None]) -> None:
    """Write an output file; a path that cannot be written is the user's to fix (exit 2), not a traceback."""
    try:
        write()
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror or error}") from None
    stderr.print(f"wrote {escape(str(path))}", soft_wrap=True)


def _default_root() -> Path:
    """runs_dir of ./experiments.toml when there is one (a broken file is reported, not ignored), else ./runs."""
    if EXPERIMENT_FILE.is_file():
        return load_plan(EXPERIMENT_FILE).runs_dir
    return Path("runs")


def _pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (files only, no display); an optional extra, so a clear error."""
    try:
        import matplotlib
    except ImportError:
        raise UserError("--plot needs matplotlib, an optional extra: pip install 'ddpcli[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def comparison_tables(comparison: Comparison, width: int) -> list[Table]:
    """One table when it fits in `width`; else two (training, then speed and equivalence), both keyed by run.

    Rich squeezes a table wider than the console by dropping whole columns, the run name among them: splitting
    keeps every value on screen.
    """
    whole = _table(comparison, range(len(COLUMNS)))
    wide = stdout.options.update(max_width=10_000)
    if Measurement.get(stdout, wide, whole).maximum <= width:
        return [whole]
    first, second = _table(comparison, range(SPLIT_AT)), _table(comparison, [0, *range(SPLIT_AT, len(COLUMNS))])
    first.caption = None
    second.title = None
    return [first, second]


def _table(comparison: Comparison, columns: Iterable[int]) -> Table:
    columns = list(columns)
    table = Table(
        title=Text(f"Compare: baseline {comparison.baseline.label} ({comparison.baseline_reason})"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for index in columns:
        header = COLUMNS[index]
        table.add_column(header, justify="left" if header in LEFT else "right", no_wrap=header != "equivalence")
    for row in comparison.rows:
        cells = _cells(row)
        table.add_row(*(cells[index] for index in columns))
    table.caption = Text(_caption(comparison))  # Text: paths in it are not markup
    table.caption_justify = "left"
    return table


def _cells(row: ComparisonRow) -> list[str | Text]:
    record, metrics = row.run.record, row.run.metrics
    batch = fmt_number(record.per_device_batch_size)
    if record.grad_accum_steps and record.grad_accum_steps > 1:
        batch += f"x{record.grad_accum_steps}acc"
    return [
        Text(row.label + (" *" if row.is_baseline else ""), style="bold" if row.is_baseline else ""),
        Text(record.status, style=STATUS_STYLE.get(record.status, "")),
        fmt_number(record.world_size),
        batch,
        fmt_number(record.global_batch_size),
        fmt_number(record.lr),
        fmt_number(metrics.steps),
        fmt_number(metrics.samples_seen),
        fmt_number(metrics.final_loss),
        fmt_number(row.loss_at_baseline_samples),
        _fixed(record.wall_time_s, 1),
        _fixed(metrics.samples_per_s, 0),
        "-" if row.speedup is None else f"{row.speedup:.2f}x",
        _percent(row.scaling_efficiency),
        _fixed(row.run.noise_scale, 0),
        _equivalence_cell(row),
        row.sparkline or "-",
    ]


def _percent(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if value >= 0.1 else f"{value:.1%}"


def _fixed(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _equivalence_cell(row: ComparisonRow) -> Text:
    if row.partner is None:
        return Text("-")
    diff = row.param_diff
    if row.verdict is None or diff is None:
        return Text(f"unchecked vs {row.partner_label}", style="dim")
    amount = f", {diff.max_abs_diff:.2g}" if diff.max_abs_diff is not None else ""
    return Text(f"{row.verdict} vs {row.partner_label}{amount}", style=VERDICT_STYLE.get(row.verdict, ""))


def _caption(comparison: Comparison) -> str:
    base = comparison.baseline.run.metrics.samples_seen
    lines = [
        "* baseline. batch: per process (x accumulation). samples/s: from the first to the last metrics row. "
        "eff: speedup / world-size ratio. noise scale: last measured B_simple (the critical batch, roughly).",
        f"loss at base: loss at the baseline's {fmt_number(base)} samples seen (- : the run did not get there). "
        f"equivalence: max |param diff| against the single-process run with the same global batch, lr and steps "
        f"(atol {comparison.atol:g}).",
    ]
    if len(comparison.experiment_files) > 1:
        lines.append(
            f"Runs from {len(comparison.experiment_files)} experiment files: {', '.join(comparison.experiment_files)}."
        )
    return "\n".join(lines)


def write_csv(comparison: Comparison, path: Path) -> None:
    """The --json rows as CSV (empty cell for null), for spreadsheets."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_KEYS)
        writer.writeheader()
        for row in comparison.rows:
            writer.writerow(row.as_json())


def write_plot(comparison: Comparison, path: Path, pyplot: ModuleType) -> None:
    """Loss against samples seen, one line per run (up to PLOT_POINTS evenly spaced rows each)."""
    figure, axes = pyplot.subplots(figsize=(9, 5.5))
    for row in comparison.rows:
        points = row.run.metrics.plot_points
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        axes.plot(
            xs,
            ys,
            label=row.label + (" (baseline)" if row.is_baseline else ""),
            linewidth=2.0 if row.is_baseline else 1.2,
        )
    axes.set_xlabel("samples seen")
    axes.set_ylabel("loss")
    axes.set_title("Loss against samples seen")
    axes.grid(True, alpha=0.3)
    if axes.lines:
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=120)
    pyplot.close(figure)
