"""`ddpcli compare`: finished runs side by side. Parses flags, calls ddpcli.compare, renders with Rich."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.text import Text

from ddpcli.cli.commands import DEFAULT_EXPERIMENT_FILE as EXPERIMENT_FILE
from ddpcli.cli.console import stdout, user_errors, warning, wrote
from ddpcli.cli.render.compare import COLUMNS, _caption, _cells, comparison_tables, csv_text, loss_figure
from ddpcli.cli.render.fast_table import fitted_fast_tables, print_notes, print_tables
from ddpcli.cli.render.layout import print_bullets
from ddpcli.compare import DEFAULT_ATOL, PLOT_POINTS, Comparison, collect_runs, compare_runs
from ddpcli.compare.lost import with_observations
from ddpcli.compare.row import json_list
from ddpcli.errors import UserError
from ddpcli.experiment.planning import load_plan
from ddpcli.rundir.params import param_diff


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
        if path is not None and path.parent.exists() and not path.parent.is_dir():
            raise UserError(f"{path}: {path.parent} is a file, not a directory")
        if path is not None and not path.parent.exists():
            raise UserError(f"{path}: its directory {path.parent} does not exist")
    records, warnings = collect_runs(paths or [_default_root()], include_all, finish_lost=with_observations)
    comparison = compare_runs(
        records,
        baseline=baseline,
        atol=atol,
        param_diff=param_diff,
        plot_points=PLOT_POINTS if plot_path is not None else 0,
    )
    for message in [*warnings, *comparison.warnings]:
        warning(message)
    if as_json:
        for piece in json_list(row.as_json() for row in comparison.rows):  # one row's dict held at a time
            print(piece, end="")
        print()
    else:
        _print_table(comparison)
        (print_notes if _plain_output() else print_bullets)(stdout, "Notes", comparison.notes)
    if csv_path is not None:
        text = csv_text(comparison)
        _writing(csv_path, lambda: csv_path.write_text(text, encoding="utf-8", newline=""))
    if plot_path is not None and pyplot is not None:
        _writing(plot_path, lambda: _save_figure(loss_figure(comparison, pyplot), plot_path, pyplot))


def _print_table(comparison: Comparison) -> None:
    """The tables of ddpcli.cli.render.layout.fitted_tables, printed by ddpcli.cli.render.fast_table where every
    value is one line in a table that fits and the output has no colour (what Rich would print, without Rich laying
    out every cell: seconds at 5,000 runs), else by Rich (a value that wraps or folds, or a colour terminal)."""
    title = Text(f"Compare: baseline {comparison.baseline.label} ({comparison.baseline_reason})")
    rows = (_cells(row) for row in comparison.rows)
    tables = None
    if _plain_output():
        tables = fitted_fast_tables(COLUMNS, rows, stdout.width, title=title, caption=_caption(comparison))
    if tables is not None:
        print_tables(stdout, tables)
        return
    for rich_table in comparison_tables(comparison, stdout.width):
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
