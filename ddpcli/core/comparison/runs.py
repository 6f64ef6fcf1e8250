"""Runs as run.json describes them: reading the record, finding run directories, keeping the newest of each name,
and saying in one line why a run did not complete."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.core.errors import UserError
from ddpcli.core.records import (
    METRICS_FILE,
    PARAMS_FILE,
    RUN_FILE,
    find_run_dirs,
    finite_or_none,
    is_run_dir,
    read_json,
)

NO_FILE = "(no experiment file)"
BATCHNORM_FLAGS = frozenset({"--batchnorm", "--batch-norm", "--bn"})
SYNC_BN_FLAGS = frozenset({"--sync-bn", "--sync-batchnorm", "--syncbn", "--sync-batch-norm"})


@dataclass(frozen=True)
class RunRecord:
    """What run.json says about one run: enough to select runs and pick a baseline without touching metrics."""

    run_dir: Path
    run_id: str
    name: str
    status: str
    plan: dict[str, Any]
    argv: list[str] = field(default_factory=list)
    experiment_file: str | None = None
    experiment_file_sha256: str | None = None
    wall_time_s: float | None = None
    exit_code: int | None = None
    failed_ranks: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    started_at: str = ""  # ISO 8601 UTC from run.json; orders runs of one name

    @property
    def world_size(self) -> int | None:
        return _int_or_none(self.plan.get("world_size"))

    @property
    def per_device_batch_size(self) -> int | None:
        return _int_or_none(self.plan.get("per_device_batch_size"))

    @property
    def grad_accum_steps(self) -> int | None:
        return _int_or_none(self.plan.get("grad_accum_steps"))

    @property
    def global_batch_size(self) -> int | None:
        return _int_or_none(self.plan.get("global_batch_size"))

    @property
    def total_steps(self) -> int | None:
        return _int_or_none(self.plan.get("total_steps"))

    @property
    def lr(self) -> float | None:
        return finite_or_none(self.plan.get("lr"))

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / METRICS_FILE

    @property
    def params_path(self) -> Path:
        return self.run_dir / PARAMS_FILE

    @property
    def flags(self) -> frozenset[str]:
        """The command line's options, spelled with dashes (`--sync_bn` and `--sync-bn` are the same flag)."""
        return frozenset(arg.split("=", 1)[0].replace("_", "-").lower() for arg in self.argv if arg.startswith("--"))

    @property
    def uses_batchnorm(self) -> bool:
        """The command line asks for BatchNorm (`--batchnorm`); False also when it just does not say."""
        return bool(self.flags & BATCHNORM_FLAGS)

    @property
    def uses_sync_bn(self) -> bool:
        return bool(self.flags & SYNC_BN_FLAGS)


def read_run_record(run_dir: Path) -> RunRecord:
    """Read run.json; a missing or malformed field is tolerated (shown as unknown), an unreadable file is not."""
    try:
        data = read_json(run_dir / RUN_FILE)
    except (OSError, ValueError) as error:
        raise UserError(f"{run_dir / RUN_FILE}: cannot read it: {error}") from None
    plan = data.get("plan") if isinstance(data.get("plan"), dict) else {}
    argv = data.get("argv") if isinstance(data.get("argv"), list) else []
    failed = data.get("failed_ranks") if isinstance(data.get("failed_ranks"), list) else []
    return RunRecord(
        run_dir=run_dir,
        run_id=_text(data.get("run_id")) or run_dir.name,
        name=_text(data.get("name")) or _text(plan.get("name")) or run_dir.parent.name,
        status=_text(data.get("status")) or "unknown",
        plan=plan,
        argv=[str(arg) for arg in argv],
        experiment_file=_text(data.get("experiment_file")),
        experiment_file_sha256=_text(data.get("experiment_file_sha256")),
        wall_time_s=finite_or_none(data.get("wall_time_s")),
        exit_code=_int_or_none(data.get("exit_code")),
        failed_ranks=[entry for entry in failed if isinstance(entry, dict)],
        restarts=_int_or_none(data.get("restarts")) or 0,
        started_at=_text(data.get("started_at")) or "",
    )


def _int_or_none(value: Any) -> int | None:
    """A JSON integer (not a bool, not a float), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def size_key(record: RunRecord, unknown: float = 0) -> tuple[Any, ...]:
    """Sort key: world size, then global batch (`unknown` stands in for a missing one), then name and run_id."""
    return (record.world_size or unknown, record.global_batch_size or unknown, record.name, record.run_id)


def status_reason(record: RunRecord) -> str | None:
    """Why a run did not complete, in one line, from what the launcher recorded (failed ranks, exit code)."""
    if record.status == "completed":
        return None
    if record.failed_ranks:
        first = record.failed_ranks[0]
        ranks = ", ".join(str(entry.get("rank", "?")) for entry in record.failed_ranks)
        prefix = f"rank {ranks}" if len(record.failed_ranks) == 1 else f"ranks {ranks} failed; rank {first.get('rank')}"
        detail = f"{prefix} exited with code {first.get('exit_code', '?')}"
        error = _nonblank_line(first.get("error"), 0) or _nonblank_line(first.get("log_tail"), -1)
        return f"{detail}: {error}" if error else detail
    if record.status == "timed_out":
        after = f" after {record.wall_time_s:.0f} s" if record.wall_time_s is not None else ""
        return f"stopped: past its timeout{after}"
    if record.status == "running":
        return "no end recorded: still running, or the launcher itself was killed"
    if record.exit_code is not None:
        return f"exit code {record.exit_code}"
    return None


def _nonblank_line(value: Any, index: int, limit: int = 200) -> str | None:
    """The `index`-th non-blank line of a text (0: the first, -1: the last), stripped and cut to `limit`."""
    lines = [line.strip() for line in str(value).splitlines() if line.strip()] if value else []
    return lines[index][:limit] if lines else None


def collect_runs(paths: Sequence[Path], include_all: bool = False) -> tuple[list[RunRecord], list[str]]:
    """The runs to compare, and warnings about run directories that could not be read.

    A run directory given directly is always compared. Under each runs root (or name directory) only the newest
    run of each name is taken, preferring a completed one (`include_all`: every run); two roots holding the same
    names (the same experiments, run two ways) both show theirs.
    """
    chosen: list[RunRecord] = []
    warnings: list[str] = []
    for path in paths:
        if is_run_dir(path):
            chosen.append(read_run_record(path))
            continue
        found = []
        for run_dir in _run_dirs_under(path):
            try:
                found.append(read_run_record(run_dir))
            except UserError as error:
                warnings.append(f"{error}; run skipped")
        chosen += found if include_all else select_newest(found)
    unique = list({record.run_dir.resolve(): record for record in chosen}.values())
    if not unique:
        raise UserError(f"no readable run in {', '.join(map(str, paths))}: {'; '.join(warnings)}")
    return unique, warnings


def _run_dirs_under(path: Path) -> list[Path]:
    """Run directories in a runs root (`<root>/<name>/<run_id>/`) or a name directory (`<name>/<run_id>/`)."""
    if not path.exists():
        raise UserError(f"{path}: no such directory (give a run directory or a runs root)")
    if not path.is_dir():
        raise UserError(f"{path}: not a directory (give a run directory or a runs root)")
    run_dirs = sorted(candidate.parent for candidate in path.glob(f"*/{RUN_FILE}"))
    run_dirs += list(find_run_dirs(path))
    if not run_dirs:
        raise UserError(
            f"{path} is not a run directory (it has no {RUN_FILE}) and contains none "
            f"(looked for {path}/*/{RUN_FILE} and {path}/*/*/{RUN_FILE})"
        )
    return run_dirs


def select_newest(records: Iterable[RunRecord]) -> list[RunRecord]:
    """One run per name: the newest completed one, else (a name that never completed) the newest of any status.

    run_id starts with a UTC timestamp, so it sorts by start time.
    """
    by_name: dict[str, list[RunRecord]] = {}
    for record in records:
        by_name.setdefault(record.name, []).append(record)
    return [newest(group) for group in by_name.values()]


def newest(records: Sequence[RunRecord]) -> RunRecord:
    """The newest completed run among these, else the newest of any status."""
    completed = [record for record in records if record.status == "completed"]
    # started_at (ISO 8601 UTC) orders runs whatever names their directories: a timestamp id or a job id.
    return max(completed or records, key=lambda record: (record.started_at, record.run_id))
