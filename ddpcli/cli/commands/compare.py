"""`ddpcli compare`: finished runs side by side. Parses flags, calls ddpcli.compare, renders with Rich."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer

from ddpcli.cli.commands import AllRunsOption, BaselineOption, RunsArgument, default_runs_root, port_advice
from ddpcli.cli.console import stdout, user_errors, warning, wrote
from ddpcli.cli.render.compare import COLUMNS, CsvRows, LossCurve, _caption, _cells, loss_figure, tables_of, title
from ddpcli.cli.render.fast_table import fitted_compact_tables, print_notes, print_tables
from ddpcli.cli.render.layout import print_bullets
from ddpcli.cli.render.table_rows import TableRows
from ddpcli.compare import DEFAULT_ATOL, PLOT_POINTS, collect_runs
from ddpcli.compare.row import json_list
from ddpcli.compare.table import ComparisonHead, ComparisonStream
from ddpcli.errors import UserError
from ddpcli.launch.lost import with_observations
from ddpcli.rundir.params import param_diff


@user_errors
def compare_command(
    paths: RunsArgument = None,
    include_all: AllRunsOption = False,
    baseline: BaselineOption = None,
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
        if path is not None and path.parent.exists() and not path.parent.is_dir():
            raise UserError(f"{path}: {path.parent} is a file, not a directory")
        if path is not None and not path.parent.exists():
            raise UserError(f"{path}: its directory {path.parent} does not exist")
    finish_lost = partial(with_observations, port_advice=port_advice)
    records, warnings = collect_runs(paths or [default_runs_root()], include_all, finish_lost=finish_lost)
    for message in warnings:
        warning(message)
    stream = ComparisonStream(
        records,
        baseline=baseline,
        atol=atol,
        param_diff=param_diff,
        plot_points=PLOT_POINTS if plot_path is not None else 0,
        notes=not as_json,
    )
    outputs = _Outputs(table=not as_json, csv=csv_path is not None, plot=plot_path is not None)
    if as_json:
        for piece in json_list(outputs.taken(stream)):  # one row (its record, its dict) held at a time
            print(piece, end="")
        print()
    else:
        for _ in outputs.taken(stream):
            pass
    for message in stream.warnings:
        warning(message)
    if outputs.table is not None:
        _print_table(stream.head, outputs.table)
        (print_notes if _plain_output() else print_bullets)(stdout, "Notes", stream.notes)
    if csv_path is not None and outputs.csv is not None:
        text = outputs.csv.text()
        _writing(csv_path, lambda: csv_path.write_text(text, encoding="utf-8", newline=""))
    if plot_path is not None and pyplot is not None:
        _writing(plot_path, lambda: _save_figure(loss_figure(outputs.curves, pyplot), plot_path, pyplot))


class _Outputs:
    """What each output keeps of a row as the rows stream: the table's cells, the CSV's lines, the plot's curves;
    --json's rows are printed as they come."""

    def __init__(self, *, table: bool, csv: bool, plot: bool) -> None:
        self.table = TableRows(len(COLUMNS), fast=_plain_output()) if table else None
        self.csv = CsvRows() if csv else None
        self.curves: list[LossCurve] | None = [] if plot else None

    def taken(self, stream: ComparisonStream) -> Iterator[dict[str, Any]]:
        """Each row's --json dict (made only when --json or --csv needs it), once every output took the row."""
        for row in stream.rows():
            data = row.as_json() if self.csv is not None or self.table is None else {}
            if self.csv is not None:
                self.csv.add(data)
            if self.curves is not None:
                self.curves.append(LossCurve.of(row))
            if self.table is not None:
                self.table.add(_cells(row))
            yield data


def _print_table(head: ComparisonHead, rows: TableRows) -> None:
    """The tables of ddpcli.cli.render.layout.fitted_tables, printed by ddpcli.cli.render.fast_table where every
    value is one line in a table that fits and the output has no colour (what Rich would print, without Rich laying
    out every cell: seconds at 5,000 runs), else by Rich (a value that wraps or folds, or a colour terminal)."""
    tables = None
    if rows.compact is not None:
        tables = fitted_compact_tables(COLUMNS, rows.compact, stdout.width, title=title(head), caption=_caption(head))
    if tables is not None:
        print_tables(stdout, tables)
        return
    for rich_table in tables_of(head, rows.texts(), stdout.width):
        stdout.print(rich_table)


def _plain_output() -> bool:
    """No colour (a pipe, a log, NO_COLOR): where ddpcli.cli.render.fast_table prints byte for byte what Rich does.
    With colour Rich prints its own escape codes (the fast path could group a styled cell and its padding
    differently)."""
    return stdout.color_system is None


def _writing(path: Path, write: Callable[[], object]) -> None:
    """Write an output file; a path that cannot be written is the user's to fix (exit 2), not a traceback."""
    try:
        write()
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror or error}") from None
    wrote(path)


def _save_figure(figure: object, path: Path, pyplot: ModuleType) -> None:
    try:
        figure.savefig(path, format="png", dpi=120)  # type: ignore[attr-defined]
    finally:
        pyplot.close(figure)


def _pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (files only, no display); an optional extra, so a clear error."""
    try:
        import matplotlib
    except ImportError:
        raise UserError("--plot needs matplotlib, an optional extra: pip install 'ddpcli[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot
