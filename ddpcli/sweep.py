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

from ddpcli.errors import UserError
from ddpcli.launcher import LaunchSpec, Rendezvous, build_launch
from ddpcli.planning import Plan, ResolvedRun
from ddpcli.records import (
    LOGS_DIR,
    RUN_FILE,
    SCHEMA_VERSION,
    new_run_id,
    utc_now,
    write_json_atomic,
)
from ddpcli.supervisor import Outcome, StopRequest, run_to_end


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


def prepare(plan: Plan, runs: Sequence[ResolvedRun], options: SweepOptions) -> list[LaunchSpec]:
    """Build every command before starting any, so a bad placeholder in the last run fails the sweep up front."""
    specs = []
    for run in runs:
        run_dir = options.runs_dir.resolve() / run.name / _run_id(run, options.rendezvous)
        specs.append(build_launch(run, run_dir, plan.file, options.rendezvous))
    return specs


def _run_id(run: ResolvedRun, rendezvous: Rendezvous | None) -> str:
    # Nodes of one multi-node run must agree on the directory without talking: the rendezvous id names it.
    if (run.nnodes > 1 or run.is_elastic) and rendezvous is not None and rendezvous.run_id:
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
        result = RunResult(spec, run_one(plan, spec, options, reporter, stop, file_sha256))
        results.append(result)
        if result.status != "completed" and options.fail_fast:
            break
    return results


def run_one(
    plan: Plan,
    spec: LaunchSpec,
    options: SweepOptions,
    reporter: Reporter,
    stop: StopRequest,
    file_sha256: str | None,
) -> dict[str, Any]:
    create_run_dir(spec.run_dir)
    record = start_record(plan, spec, file_sha256)
    write_json_atomic(spec.run_dir / RUN_FILE, record)
    reporter.run_started(spec)
    timeout_s = options.timeout_s if options.timeout_s is not None else spec.run.timeout_s
    outcome = run_to_end(
        spec,
        spec.run_dir / LOGS_DIR / "torchrun.log",
        timeout_s,
        stop,
        on_rows=lambda rows: reporter.metrics(spec, rows),
    )
    record = finish_record(record, outcome)
    write_json_atomic(spec.run_dir / RUN_FILE, record)
    reporter.run_ended(spec, record)
    return record


def create_run_dir(run_dir: Path) -> None:
    """A run directory is never reused: an existing one is an error, not something to overwrite."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise UserError(f"run directory {run_dir} already exists; ddpcli never overwrites a run") from None


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
    }


def finish_record(record: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    return {
        **record,
        "status": outcome.status,
        "ended_at": utc_now().isoformat(),
        "wall_time_s": round(outcome.wall_time_s, 3),
        "exit_code": outcome.exit_code,
        "failed_ranks": outcome.failed_ranks,
        "restarts": outcome.restarts,
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
