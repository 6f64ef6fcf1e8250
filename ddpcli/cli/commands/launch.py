"""`ddpcli launch`: run each planned run for real through torchrun, record it, show progress, report failures."""

from __future__ import annotations

import math
import shlex
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from ddpcli.cli.commands import DEFAULT_EXPERIMENT_FILE, port_advice
from ddpcli.cli.console import stderr, stdout, user_errors, warning
from ddpcli.cli.render.format import display_path
from ddpcli.cli.render.launch import LaunchRow, launch_summary_tables, print_failures, print_findings
from ddpcli.cli.render.progress import RichReporter
from ddpcli.errors import UserError
from ddpcli.experiment.planning import load_plan
from ddpcli.experiment.resolved import Plan
from ddpcli.experiment.schema import is_safe_name
from ddpcli.jsonvalues import finite_or_none
from ddpcli.launch.argv import LaunchSpec, Rendezvous
from ddpcli.launch.supervisor import StopRequest
from ddpcli.launch.sweep import Reporter, RunResult, SweepOptions, prepare, resume_from, run_one, run_sweep
from ddpcli.rundir.layout import LOGS_DIR, METRICS_FILE, RUN_FILE
from ddpcli.rundir.metrics import last_metrics_row

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


@user_errors
def launch_command(
    file: Annotated[Path, typer.Argument(help="Experiment file (TOML).")] = DEFAULT_EXPERIMENT_FILE,
    only: Annotated[list[str] | None, typer.Option("--only", help="Only this run (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print each command and its env; start nothing.")] = False,
    runs_dir: Annotated[
        Path | None, typer.Option(help="Where run directories go (default: the file's runs_dir).")
    ] = None,
    fail_fast: Annotated[bool, typer.Option("--fail-fast", help="Stop the sweep at the first failed run.")] = False,
    observe: Annotated[
        bool,
        typer.Option(
            "--observe/--no-observe",
            help="Record what each run really did (default; the file's `observe` per run). --no-observe runs every "
            "script bare: no observed numbers, no findings, and no clean-exit fix.",
        ),
    ] = True,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=0.001, help="Stop a run after this many seconds and mark it timed_out."),
    ] = None,
    nnodes: Annotated[
        str | None, typer.Option(help="Multi-node: nodes of the selected runs (N or MIN:MAX), overriding the file.")
    ] = None,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="Multi-node: host:port of the rendezvous.")] = None,
    rdzv_id: Annotated[
        str | None,
        typer.Option(
            help="Multi-node: job id shared by every node. Also names the run directory (in `<runs_dir>/<name>/`)."
        ),
    ] = None,
    export: Annotated[
        str | None,
        typer.Option(
            "--export",
            help="Export each run to a viewer as it ends: tensorboard:DIR or mlflow:URI (as `ddpcli export`).",
            show_default=False,
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Run an unfinished run again in its own directory, from its last checkpoint (ctx.checkpoint).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the experiment file's runs (baseline first) through torchrun, one after another.

    Each run gets `<runs_dir>/<name>/<run_id>/` with run.json, metrics.jsonl, logs/ and final_params.pt.

    Multi-node: run the same command on every node, with the same --rdzv-endpoint and --rdzv-id (or a
    `[cluster]` table); the run directory is then `<runs_dir>/<name>/<rdzv_id>/`.

    Exit code 0 when every run completed, 1 when any failed or timed out, 128 + the signal's number when a
    signal stopped it (130 for Ctrl-C, 143 for SIGTERM, 129 for a closed terminal).
    """
    if timeout is not None and not math.isfinite(timeout):
        raise UserError(f"--timeout {timeout}: must be a finite number of seconds (leave it out for no limit)")
    if resume is not None:
        ignored = {"--only": only, "--runs-dir": runs_dir, "--nnodes": nnodes, "--rdzv-endpoint": rdzv_endpoint,
                   "--rdzv-id": rdzv_id, "--fail-fast": fail_fast or None,
                   "--no-observe": not observe or None}  # fmt: skip
        given = [flag for flag, value in ignored.items() if value]
        if given:
            raise UserError(f"--resume reruns the recorded command as it was: {', '.join(given)} cannot change it")
        _resume(resume, timeout, dry_run)
        return
    plan = load_plan(file, nnodes=nnodes, names=only)
    options = SweepOptions(
        runs_dir=runs_dir if runs_dir is not None else plan.runs_dir,
        fail_fast=fail_fast,
        timeout_s=timeout,
        rendezvous=_rendezvous(plan, rdzv_endpoint, rdzv_id),
        name_by_rdzv_id=rdzv_id is not None,
        port_advice=port_advice,
    )
    runs = plan.select(only)
    if not observe:
        runs = [replace(run, launch=replace(run.launch, observe=False)) for run in runs]
    specs = prepare(plan, runs, options)
    if dry_run:
        _print_dry_run(specs)
        return
    stop = StopRequest()
    reporter = RichReporter(stdout)
    sweep_reporter = _exporting(reporter, export) if export is not None else reporter
    with _stop_on_signals(stop), reporter.progress:
        results = run_sweep(plan, specs, options, sweep_reporter, stop)
    _finish(results, stop, [spec.run.name for spec in specs[len(results) :]])


def _exporting(reporter: RichReporter, spec: str) -> Reporter:
    from ddpcli.cli.commands.export import ExportOnEnd  # the export's modules load only with --export

    return ExportOnEnd(reporter, spec)


def _resume(run_dir: Path, timeout: float | None, dry_run: bool) -> None:
    if not run_dir.is_dir():
        raise UserError(f"--resume {run_dir}: no such run directory")
    if not (run_dir / RUN_FILE).is_file():
        raise UserError(f"--resume {run_dir}: not a run directory (it has no {RUN_FILE})")
    spec, record = resume_from(run_dir)
    if dry_run:
        _print_dry_run([spec])
        return
    options = SweepOptions(runs_dir=run_dir.parent.parent, timeout_s=timeout, port_advice=port_advice)
    stop = StopRequest()
    reporter = RichReporter(stdout)
    with _stop_on_signals(stop), reporter.progress:
        record = run_one(spec, record, options, reporter, stop, resuming=True)
    _finish([RunResult(spec, record)], stop)


def _finish(results: list[RunResult], stop: StopRequest, not_started: list[str] | None = None) -> None:
    """The summary, then the exit code. A stop signal ends the sweep with 128 + its number whenever it came (during a
    run, during the merge after one, between runs), naming the runs it kept from starting."""
    for table in launch_summary_tables([_summary_row(result) for result in results], stdout.width):
        stdout.print(table)
    print_findings(stdout, [result.record for result in results])
    print_failures(stderr, [(result.record, display_path(result.spec.run_dir / LOGS_DIR)) for result in results])
    stopped = stop.reason is not None or any(result.status == "interrupted" for result in results)
    if not_started:
        why = f"stopped by {_signal_name(stop.signum)}" if stopped else "stopped at the first failure (--fail-fast)"
        warning(f"{why}; not started: {', '.join(not_started)}")
    if stopped:
        raise typer.Exit(128 + stop.signum if stop.signum else EXIT_INTERRUPTED)
    if any(result.status != "completed" or _unrecorded(result) for result in results):
        raise typer.Exit(EXIT_FAILED)


def _signal_name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name if signum else "a stop request"
    except ValueError:
        return f"signal {signum}"


def _unrecorded(result: RunResult) -> bool:
    return any(finding.code == "record_not_written" for finding in result.record.findings)


def _summary_row(result: RunResult) -> LaunchRow:
    """What the summary shows of a run: its record, and the last loss its metrics.jsonl holds."""
    record = result.record
    last = last_metrics_row(result.spec.run_dir / METRICS_FILE)
    loss = last.get("loss") if last else None
    failure = record.failed_ranks[0] if record.failed_ranks else None
    return LaunchRow(
        name=result.spec.run.name,
        status=result.status,
        wall_time_s=finite_or_none(record.wall_time_s),
        final_loss=float(loss) if isinstance(loss, int | float) and not isinstance(loss, bool) else None,
        run_dir=display_path(result.spec.run_dir),
        failure=f"rank {failure.rank} exit {failure.exit_code}: {failure.error}" if failure else None,
    )


def _rendezvous(plan: Plan, endpoint: str | None, run_id: str | None) -> Rendezvous:
    if run_id is not None and not is_safe_name(run_id):
        raise UserError(f"--rdzv-id {run_id!r}: it names the run directory, so letters, digits, '.', '_', '-' only")
    cluster = plan.cluster
    return Rendezvous(
        endpoint=endpoint or cluster.rdzv_endpoint, run_id=run_id or cluster.rdzv_id, backend=cluster.rdzv_backend
    )


def _print_dry_run(specs: list[LaunchSpec]) -> None:
    for spec in specs:
        print(f"# {spec.run.name} -> {spec.run_dir}")
        print(shlex.join(spec.argv))
        if spec.cwd is not None:
            print(f'#   (in {shlex.quote(str(spec.cwd))}: workdir = "run")')
        for key, value in spec.env_added.items():
            print(f"#   {key}={shlex.quote(value)}")
        print()


# Ctrl-C, `kill`, a closed terminal (SIGHUP) and Ctrl-\ (SIGQUIT): each stops the run cleanly. Left to their
# default action, SIGHUP and SIGQUIT would kill ddpcli alone and orphan torchrun and its workers.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextmanager
def _stop_on_signals(stop: StopRequest) -> Iterator[None]:
    """A stop signal asks the sweep to stop the current run cleanly (torchrun and every worker with it) and to
    record it as interrupted, instead of killing the launcher and leaving the job behind."""
    handler = lambda signum, frame: stop.request(signum=signum)  # noqa: E731
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
