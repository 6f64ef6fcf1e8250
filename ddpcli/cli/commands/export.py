"""`ddpcli export`: runs written to TensorBoard, MLflow or W&B at step = samples seen. Parses flags, calls
ddpcli.export, prints one line a run."""

from __future__ import annotations

from enum import Enum
from functools import partial
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from ddpcli.cli.commands import AllRunsOption, BaselineOption, RunsArgument, default_runs_root, port_advice
from ddpcli.cli.console import say, user_errors, warning
from ddpcli.errors import UserError
from ddpcli.export.exporter import Exporter, Outcome
from ddpcli.export.runs import export_runs

EXIT_SOME_FAILED = 1
EXIT_INTERRUPTED = 130  # Ctrl-C, as launch


class ViewerName(str, Enum):
    tensorboard = "tensorboard"
    mlflow = "mlflow"
    wandb = "wandb"


@user_errors
def export_command(
    viewer: Annotated[ViewerName, typer.Argument(help="Where to: tensorboard, mlflow or wandb.", show_default=False)],
    paths: RunsArgument = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="tensorboard, wandb: the folder to write into. mlflow: the tracking URI (sqlite:///sweep.db, "
            "http://host:5000); default MLFLOW_TRACKING_URI.",
            show_default=False,
        ),
    ] = None,
    include_all: AllRunsOption = False,
    baseline: BaselineOption = None,
) -> None:
    """Export runs to TensorBoard, MLflow or W&B, every metrics row at step = samples seen, with params, final
    metrics and compare's verdict.

    One viewer run per ddpcli run, named after its experiment (TensorBoard: `TARGET/<experiment>/<run id>/`).
    Scalars: loss, lr, samples_per_s, step_time_s and optimizer_step, at step = samples seen (cumulative, every
    rank), with the records' wall times. Exporting again adds no run and no point; a run exported while running
    gets its remaining rows and its end. Needs the viewer's extra: pip install 'ddpcli[tensorboard]' (or mlflow,
    wandb, export for all three).
    """
    outcome, total, target = Outcome(), None, to or "the tracking URI"  # total: the runs found, once read
    try:
        exporter = Exporter(viewer.value, to, notify=say)  # may wait for another export holding a SQLite store
        target = exporter.target
        from ddpcli.launch.lost import with_observations
        from ddpcli.rundir.params import param_diff

        runs, warnings = export_runs(paths or [default_runs_root()], include_all=include_all, baseline=baseline,
                                     param_diff=param_diff,
                                     finish_lost=partial(with_observations, port_advice=port_advice))  # fmt: skip
        total = len(runs)
        for message in warnings:
            warning(message)
        exporter.export(runs, outcome, on_written=lambda line: say(line, to_stdout=True))
    except KeyboardInterrupt:
        interrupted(outcome, target, total)
    else:
        report(outcome, target, total=len(runs))


def interrupted(outcome: Outcome, target: str, total: int | None) -> NoReturn:
    """Ctrl-C: how many runs were written (each one's line was printed as it was), and that the same command
    writes the rest (no run or point twice); exit 130. The run being written when it came was finished first
    (ddpcli.export.exporter.ctrl_c_after); one a second Ctrl-C cut off was not written (the viewers' modules write
    nothing half)."""
    if total is None:
        say(f"interrupted before any run was written to {target}")
    else:
        current = len(outcome.written) - outcome.fresh
        also = f" ({current} already up to date)" if current else ""
        say(f"interrupted: {outcome.fresh} of {total} runs written to {target}{also}; export again to write the rest")
    raise typer.Exit(EXIT_INTERRUPTED)


def report(outcome: Outcome, target: str, total: int) -> None:
    """Warnings and failures on stderr after the runs' lines (printed as each was written); exit 2 when nothing
    could be exported, 1 when some runs could not."""
    for message in outcome.warnings:
        warning(message)
    if outcome.failures and not outcome.written:
        more = f" (and {len(outcome.failures) - 1} more)" if len(outcome.failures) > 1 else ""
        raise UserError(outcome.failures[0] + more)
    for message in outcome.failures:
        warning(message)
    if outcome.failures:
        raise typer.Exit(EXIT_SOME_FAILED)
    current = len(outcome.written) - outcome.fresh
    also = f" ({current} already up to date)" if current else ""
    say(f"exported {outcome.fresh} of {total} runs to {target}{also}")


class ExportOnEnd:
    """`launch --export`: a sweep's reporter that also exports each run as it ends, so the viewer fills while the
    sweep runs. The verdict is compare's over the runs of this sweep ended so far (a multi-process run whose
    single-process partner runs later gets no verdict: `ddpcli export` after the sweep cannot add it, the run being
    up to date). A run that cannot be exported is a warning: the run itself is not failed by it."""

    def __init__(self, reporter: Any, spec: str) -> None:
        from ddpcli.export.targets import parse_spec

        self.reporter = reporter
        # checked before the sweep starts: exit 2, nothing run
        self.exporter = Exporter(*parse_spec(spec), notify=warning)
        self.ended: list[Path] = []

    def run_started(self, spec: Any) -> None:
        self.reporter.run_started(spec)

    def metrics(self, spec: Any, rows: list[dict[str, Any]]) -> None:
        self.reporter.metrics(spec, rows)

    def run_ended(self, spec: Any, record: Any) -> None:
        self.reporter.run_ended(spec, record)
        self.ended.append(spec.run_dir)
        from ddpcli.rundir.params import param_diff

        try:
            runs, _ = export_runs(self.ended, param_diff=param_diff)
            outcome = self.exporter.export([run for run in runs if run.run_dir == spec.run_dir])
        except UserError as error:
            warning(f"export of {spec.run.name}: {error}")
            return
        for message in outcome.warnings + outcome.failures:
            warning(f"export of {spec.run.name}: {message}")
