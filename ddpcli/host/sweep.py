"""Run the selected runs of a plan one after another, each in a fresh run directory with its record.

The record (run.json) is written before torchrun starts and rewritten when it ends, atomically both times, so
a run killed with the launcher still says `running` and what was started. No torch and no rich: what the user
sees is the Reporter's business (the command implements it with Rich).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ddpcli.core.errors import UserError
from ddpcli.core.launcher import LaunchSpec, Rendezvous, build_launch
from ddpcli.core.planning import EXTRA_KEYS, PLAN_KEYS, Plan, ResolvedRun
from ddpcli.core.records import (
    LOGS_DIR,
    PARAMS_FILE,
    RUN_FILE,
    SCHEMA_VERSION,
    new_run_id,
    read_json,
    utc_now,
    write_json_atomic,
)
from ddpcli.host.supervisor import Outcome, StopRequest, run_dir_marker, run_to_end, worker_pids


class Reporter(Protocol):
    def run_started(self, spec: LaunchSpec) -> None: ...
    def metrics(self, spec: LaunchSpec, rows: list[dict[str, Any]]) -> None: ...
    def run_ended(self, spec: LaunchSpec, record: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class RunResult:
    spec: LaunchSpec
    record: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.record["status"])


@dataclass(frozen=True)
class SweepOptions:
    runs_dir: Path
    fail_fast: bool = False
    timeout_s: float | None = None  # overrides each run's timeout_s
    rendezvous: Rendezvous | None = None
    # --rdzv-id given on the command line names single-node run directories too (ddpcli slurm relies on it).
    name_by_rdzv_id: bool = False


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
    taken = [run_dir] if not run.is_multi_node else [run_dir / RUN_FILE, run_dir / PARAMS_FILE]
    if any(path.exists() for path in taken):
        raise UserError(f"run directory {run_dir} already exists; ddpcli never overwrites a run")


def _run_id(run: ResolvedRun, options: SweepOptions) -> str:
    # Nodes of one multi-node run must agree on the directory without talking: the rendezvous id names it.
    rendezvous = options.rendezvous
    if rendezvous is not None and rendezvous.run_id and (run.is_multi_node or options.name_by_rdzv_id):
        return rendezvous.run_id
    return new_run_id()


def run_sweep(
    plan: Plan, specs: Sequence[LaunchSpec], options: SweepOptions, reporter: Reporter, stop: StopRequest
) -> list[RunResult]:
    """Run each spec in order. Stops early on interruption, or at the first failure with fail_fast."""
    file_sha256 = _sha256(Path(plan.file))
    results = []
    for spec in specs:
        if stop.reason is not None:
            break
        record = run_one(spec, start_record(plan, spec, file_sha256), options, reporter, stop)
        results.append(RunResult(spec, record))
        if results[-1].status != "completed" and options.fail_fast:
            break
    return results


def run_one(
    spec: LaunchSpec,
    record: dict[str, Any],
    options: SweepOptions,
    reporter: Reporter,
    stop: StopRequest,
    resuming: bool = False,
) -> dict[str, Any]:
    writer = RecordWriter(spec)
    writer.start(record, resuming)
    reporter.run_started(spec)
    timeout_s = options.timeout_s if options.timeout_s is not None else spec.run.timeout_s
    outcome = run_to_end(spec, timeout_s, stop, on_rows=lambda rows: reporter.metrics(spec, rows))
    record = finish_record(record, outcome)
    writer.finish(record, outcome.group_rank)
    reporter.run_ended(spec, record)
    return record


def resume_from(run_dir: Path) -> tuple[LaunchSpec, dict[str, Any]]:
    """The spec and record to run an unfinished run again in its own directory, from its last checkpoint.

    The recorded command is reused as it was (the experiment file may have changed since); DDPCLI_RESUME=1
    tells `runtime.resume()` to load the checkpoint even though torchrun starts afresh.
    """
    run_dir = run_dir.resolve()
    try:
        record = read_json(run_dir / RUN_FILE)
    except (OSError, ValueError) as error:
        raise UserError(f"{run_dir} is not a run directory with a readable run.json ({error})") from None
    if record.get("status") == "completed":
        raise UserError(f"{run_dir}: the run already completed; nothing to resume")
    if worker_pids(run_dir_marker(run_dir)):
        raise UserError(f"{run_dir}: processes of this run are still running; stop them first")
    try:
        plan = record["plan"]
        run = ResolvedRun(**{key: plan[key] for key in (*PLAN_KEYS, *EXTRA_KEYS)}, timeout_s=record.get("timeout_s"))
        argv, env = list(record["argv"]), {**record["env_added"], "DDPCLI_RESUME": "1"}
    except (KeyError, TypeError) as error:
        raise UserError(
            f"{run_dir}/{RUN_FILE} lacks what a resume needs ({error}); it was not written by ddpcli launch"
        ) from None
    if run.is_multi_node:
        raise UserError(f"{run_dir}: --resume handles single-node runs; rerun the multi-node command instead")
    spec = LaunchSpec(run=run, run_dir=run_dir, argv=argv, env_added=env, log_dir=run_dir / LOGS_DIR)
    resumed = {
        **record,
        "status": "running",
        "env_added": env,
        "resumes": record.get("resumes", 0) + 1,
        # wall_time_s and restarts are already totals over every launch so far; this launch adds to them.
        "previous_wall_time_s": record.get("wall_time_s") or 0,
        "previous_restarts": record.get("restarts", 0),
    }
    return spec, resumed


class RecordWriter:
    """Where a run's record goes. One node: run.json. Several nodes sharing the directory: each node writes
    node-<group rank>.json (named node-<host>-<pid>.json until torchrun's rendezvous assigns the rank), and the
    node of group rank 0 also writes run.json, the record `compare` reads."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.run_dir = spec.run_dir
        self.multi_node = spec.run.is_multi_node
        self.pending = self.run_dir / f"node-{spec.node_key}.json"
        self.log_dir = spec.log_dir

    def start(self, record: dict[str, Any], resuming: bool = False) -> None:
        if resuming:
            write_json_atomic(self.run_dir / RUN_FILE, record)
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
            write_json_atomic(self.pending, record)
        else:
            create_run_dir(self.run_dir)
            write_json_atomic(self.run_dir / RUN_FILE, record)

    def finish(self, record: dict[str, Any], group_rank: int | None) -> None:
        if not self.multi_node:
            write_json_atomic(self.run_dir / RUN_FILE, record)
            return
        if group_rank is None:  # the rendezvous never completed: keep the provisional name
            write_json_atomic(self.pending, record)
            return
        write_json_atomic(self.run_dir / f"node-{group_rank}.json", {**record, "group_rank": group_rank})
        self.pending.unlink(missing_ok=True)
        node_logs = self.log_dir.with_name(f"node-{group_rank}")
        if self.log_dir.is_dir() and not node_logs.exists():
            self.log_dir.rename(node_logs)  # logs/<host>-<pid>/ -> logs/node-<group rank>/
        if group_rank == 0:
            write_json_atomic(self.run_dir / RUN_FILE, record)


def create_run_dir(run_dir: Path) -> None:
    """A run directory is never reused: an existing one is an error, not something to overwrite."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
    except FileExistsError:
        raise UserError(f"run directory {run_dir} already exists; ddpcli never overwrites a run") from None
    except OSError as error:
        raise UserError(f"cannot create run directory {run_dir}: {error}") from None


def start_record(plan: Plan, spec: LaunchSpec, file_sha256: str | None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": spec.run_dir.name,
        "name": spec.run.name,
        "status": "running",
        "plan": spec.run.as_json(),
        "argv": spec.argv,
        "env_added": spec.env_added,
        "started_at": utc_now().isoformat(),
        "ended_at": None,
        "wall_time_s": None,
        "exit_code": None,
        "failed_ranks": [],
        "restarts": 0,
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "torch_version": _torch_version(),
        "experiment_file": str(Path(plan.file).resolve()),
        "experiment_file_sha256": file_sha256,
        "timeout_s": spec.run.timeout_s,
    }


def finish_record(record: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """The record once torchrun is gone; a resumed run adds up the time and restarts of all its launches."""
    return {
        **record,
        "status": outcome.status,
        "ended_at": utc_now().isoformat(),
        "wall_time_s": round(outcome.wall_time_s + record.get("previous_wall_time_s", 0), 3),
        "exit_code": outcome.exit_code,
        "failed_ranks": outcome.failed_ranks,
        "restarts": outcome.restarts + record.get("previous_restarts", 0),
    }


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
