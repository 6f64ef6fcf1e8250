"""Run the selected runs of a plan one after another, each in a fresh run directory with its record.

The record (run.json) is written before torchrun starts and rewritten when it ends, atomically both times, so
a run killed with the launcher still says `running` and what was started. No torch and no rich: what the user
sees is the Reporter's business (the command implements it with Rich).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

from pydantic import TypeAdapter, ValidationError

from ddpcli.diagnosis.finish import not_written, observe_or_say_why
from ddpcli.diagnosis.parallel import PortAdvice, plain_port_clause
from ddpcli.errors import UserError
from ddpcli.experiment.resolved import LaunchSettings, Plan, ResolvedRun, RunPlan
from ddpcli.launch.argv import LaunchSpec, Rendezvous, build_launch
from ddpcli.launch.forecast import Forecast
from ddpcli.launch.supervisor import Outcome, StopRequest, run_dir_marker, run_to_end, worker_pids
from ddpcli.rundir.layout import PARAMS_FILE, RUN_FILE, new_run_id, utc_now
from ddpcli.rundir.record import FailedRank, RunRecord, validation_message


class Reporter(Protocol):
    def run_started(self, spec: LaunchSpec) -> None: ...
    def metrics(self, spec: LaunchSpec, rows: list[dict[str, Any]]) -> None: ...
    def run_ended(self, spec: LaunchSpec, record: RunRecord) -> None: ...


@dataclass(frozen=True)
class RunResult:
    spec: LaunchSpec
    record: RunRecord

    @property
    def status(self) -> str:
        return self.record.status


@dataclass(frozen=True)
class SweepOptions:
    runs_dir: Path
    fail_fast: bool = False
    timeout_s: float | None = None  # overrides each run's timeout_s
    rendezvous: Rendezvous | None = None
    # --rdzv-id given on the command line names single-node run directories too (ddpcli slurm relies on it).
    name_by_rdzv_id: bool = False
    # How `ddpcli port` would make a script with no DDP data-parallel, for the findings (the command passes the
    # port's own words; diagnosis imports no command).
    port_advice: PortAdvice = plain_port_clause


def prepare(plan: Plan, runs: Sequence[ResolvedRun], options: SweepOptions) -> list[LaunchSpec]:
    """Build every command and check every run directory before starting any, so a bad placeholder or a taken
    directory in the last run fails the sweep up front, not after the first runs ran."""
    specs = []
    for run in runs:
        run_dir = options.runs_dir.resolve() / run.name / _run_id(run, options)
        _check_free(run, run_dir)
        specs.append(build_launch(run, run_dir, plan.file, options.rendezvous))
    return specs


def _check_free(run: ResolvedRun, run_dir: Path) -> None:
    # Nodes of a multi-node run share the directory (another node may have made it): only a finished run clashes.
    taken = [run_dir] if not run.plan.is_multi_node else [run_dir / RUN_FILE, run_dir / PARAMS_FILE]
    if any(path.exists() for path in taken):
        raise UserError(f"run directory {run_dir} already exists; ddpcli never overwrites a run")


def _run_id(run: ResolvedRun, options: SweepOptions) -> str:
    # Nodes of one multi-node run must agree on the directory without talking: the rendezvous id names it.
    rendezvous = options.rendezvous
    if rendezvous is not None and rendezvous.run_id and (run.plan.is_multi_node or options.name_by_rdzv_id):
        return rendezvous.run_id
    return new_run_id()


def run_sweep(
    plan: Plan, specs: Sequence[LaunchSpec], options: SweepOptions, reporter: Reporter, stop: StopRequest
) -> list[RunResult]:
    """Run each spec in order. Stops early on interruption, or at the first failure with fail_fast."""
    file_sha256 = _sha256(Path(plan.file))
    results = []
    forecast = Forecast(plan, [spec.run for spec in specs], options.runs_dir)
    for spec in specs:
        if stop.reason is not None:
            break
        record = forecast.attach(start_record(plan, spec, file_sha256))
        record = run_one(spec, record, options, reporter, stop)
        forecast.ran(spec, record)
        results.append(RunResult(spec, record))
        if results[-1].status != "completed" and options.fail_fast:
            break
    return results


def run_one(
    spec: LaunchSpec,
    record: RunRecord,
    options: SweepOptions,
    reporter: Reporter,
    stop: StopRequest,
    resuming: bool = False,
) -> RunRecord:
    writer = RecordWriter(spec)
    writer.start(record, resuming)
    reporter.run_started(spec)
    timeout_s = options.timeout_s if options.timeout_s is not None else spec.run.timeout_s
    outcome = run_to_end(spec, timeout_s, stop, on_rows=lambda rows: reporter.metrics(spec, rows))
    record = finish_record(record, outcome)
    try:  # a stop signal ends the merge at once (a million steps take minutes), one before it too
        record = observe_or_say_why(record, spec.run_dir, options.port_advice, begin=stop.begin_merge)
    finally:
        stop.merging = False
    record = writer.finish_or_say_why(record, outcome.group_rank)
    reporter.run_ended(spec, record)
    return record


def resume_from(run_dir: Path) -> tuple[LaunchSpec, RunRecord]:
    """The spec and record to run an unfinished run again in the directory named, from its last checkpoint.

    The command is rebuilt from the recorded plan through the same code that built it (so a copied or moved run
    directory resumes in its new place, never the original); the record is validated first, and a field of the
    wrong type is refused with its name. DDPCLI_RESUME=1 tells `runtime.resume()` to load the checkpoint.
    """
    run_dir = run_dir.resolve()
    try:
        record = RunRecord.load(run_dir)
        run = _run_from_record(record)
    except (OSError, ValueError) as error:
        message = validation_message(error) if isinstance(error, ValidationError) else str(error)
        raise UserError(f"{run_dir / RUN_FILE} cannot be resumed: {message}") from None
    if record.status == "completed":
        raise UserError(f"{run_dir}: the run already completed; nothing to resume")
    if worker_pids(run_dir_marker(run_dir)):
        raise UserError(f"{run_dir}: processes of this run are still running; stop them first")
    if run.plan.is_multi_node:
        raise UserError(f"{run_dir}: --resume handles single-node runs; rerun the multi-node command instead")
    spec = build_launch(run, run_dir, record.experiment_file or str(run_dir / RUN_FILE))
    spec = replace(spec, env_added={**spec.env_added, "DDPCLI_RESUME": "1"})
    resumed = record.model_copy(update={
        "status": "running",
        "argv": spec.argv,
        "env_added": spec.env_added,
        "resumes": record.resumes + 1,
        "supervisor_pid": os.getpid(),
        # wall_time_s and restarts are already totals over every launch so far; this launch adds to them.
        "previous_wall_time_s": record.wall_time_s or 0.0,
        "previous_restarts": record.restarts,
    })  # fmt: skip
    return spec, resumed


_PLAN_ADAPTER: TypeAdapter[RunPlan] = TypeAdapter(RunPlan)
_LAUNCH_ADAPTER: TypeAdapter[LaunchSettings] = TypeAdapter(LaunchSettings)


def _run_from_record(record: RunRecord) -> ResolvedRun:
    """The ResolvedRun a record was launched from: its plan, its launch settings and its timeout, each field
    type-checked."""
    missing = [each.name for each in fields(RunPlan) if each.name not in record.plan]
    if missing or not record.launch:
        what = f"plan.{missing[0]}" if missing else "launch"
        raise ValueError(f"{what} is missing (a record of an older ddpcli, or not written by ddpcli launch)")
    plan = _validated(_PLAN_ADAPTER, record.plan, "plan")
    return ResolvedRun(plan, _validated(_LAUNCH_ADAPTER, record.launch, "launch"), timeout_s=record.timeout_s)


def _validated(adapter: TypeAdapter[Any], data: dict[str, Any], where: str) -> Any:
    """`data` (run.json's object `where`) as the adapter's type; a wrong field is an error naming it."""
    try:  # JSON mode, strict: no "2" for 2, no 2.5 for an int, no object for a list
        return adapter.validate_json(json.dumps(data, allow_nan=False), strict=True)
    except ValidationError as error:
        first = error.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else ""
        raise ValueError(f"{where}.{key}: {first['msg']}" if key else f"{where}: {first['msg']}") from None


class RecordWriter:
    """Where a run's record goes. One node: run.json. Several nodes sharing the directory: each node writes
    node-<group rank>.json (named node-<host>-<pid>.json until torchrun's rendezvous assigns the rank), and the
    node of group rank 0 also writes run.json, the record `compare` reads."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.run_dir = spec.run_dir
        self.multi_node = spec.run.plan.is_multi_node
        self.pending = self.run_dir / f"node-{spec.node_key}.json"
        self.log_dir = spec.log_dir

    def start(self, record: RunRecord, resuming: bool = False) -> None:
        if resuming:
            record.write(self.run_dir / RUN_FILE)
        elif self.multi_node:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)  # the other nodes may have made it already
            except OSError as error:
                raise UserError(f"cannot create run directory {self.run_dir}: {error}") from None
            if (self.run_dir / RUN_FILE).exists() or (self.run_dir / PARAMS_FILE).exists():
                raise UserError(
                    f"run directory {self.run_dir} holds a finished run of rendezvous id {self.run_dir.name!r}; "
                    "ddpcli never overwrites a run: use a new --rdzv-id"
                )
            record.write(self.pending)
        else:
            create_run_dir(self.run_dir)
            record.write(self.run_dir / RUN_FILE)

    def finish_or_say_why(self, record: RunRecord, group_rank: int | None) -> RunRecord:
        """`finish`; when even the record cannot be written (a full disk), the run's result still reaches the
        user, with a `record_not_written` finding (the file stays as written at the start: `running`)."""
        try:
            self.finish(record, group_rank)
        except OSError as error:
            return not_written(record, self.run_dir / RUN_FILE, error)
        return record

    def finish(self, record: RunRecord, group_rank: int | None) -> None:
        if not self.multi_node:
            record.write(self.run_dir / RUN_FILE)
            return
        if group_rank is None:  # the rendezvous never completed: keep the provisional name
            record.write(self.pending)
            return
        record.model_copy(update={"group_rank": group_rank}).write(self.run_dir / f"node-{group_rank}.json")
        self.pending.unlink(missing_ok=True)
        node_logs = self.log_dir.with_name(f"node-{group_rank}")
        if self.log_dir.is_dir() and not node_logs.exists():
            self.log_dir.rename(node_logs)  # logs/<host>-<pid>/ -> logs/node-<group rank>/
        if group_rank == 0:
            record.write(self.run_dir / RUN_FILE)


def create_run_dir(run_dir: Path) -> None:
    """A run directory is never reused: an existing one is an error, not something to overwrite."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
    except FileExistsError:
        raise UserError(f"run directory {run_dir} already exists; ddpcli never overwrites a run") from None
    except OSError as error:
        raise UserError(f"cannot create run directory {run_dir}: {error}") from None


def start_record(plan: Plan, spec: LaunchSpec, file_sha256: str | None) -> RunRecord:
    run = spec.run
    return RunRecord(
        run_id=spec.run_dir.name,
        name=run.name,
        plan=run.plan.as_json(),
        launch=run.launch.as_json(),
        argv=spec.argv,
        env_added=spec.env_added,
        started_at=utc_now().isoformat(),
        hostname=socket.gethostname(),
        python=platform.python_version(),
        torch_version=_torch_version(),
        experiment_file=str(Path(plan.file).resolve()),
        experiment_file_sha256=file_sha256,
        timeout_s=run.timeout_s,
        supervisor_pid=os.getpid(),
        observe=run.launch.observe,
    )


def finish_record(record: RunRecord, outcome: Outcome) -> RunRecord:
    """The record once torchrun is gone; a resumed run adds up the time and restarts of all its launches."""
    return record.model_copy(update={
        "status": outcome.status,
        "ended_at": utc_now().isoformat(),
        "wall_time_s": round(outcome.wall_time_s + record.previous_wall_time_s, 3),
        "exit_code": outcome.exit_code,
        "failed_ranks": [FailedRank.model_validate(entry) for entry in outcome.failed_ranks],
        "restarts": outcome.restarts + record.previous_restarts,
    })  # fmt: skip


def _torch_version() -> str | None:
    # The launcher never imports torch (seconds of start-up); the installed distribution's version is enough.
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
