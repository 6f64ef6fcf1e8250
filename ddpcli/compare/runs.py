"""Runs as run.json describes them: reading the record, finding run directories, keeping the newest of each name
(why a run did not complete, in one line, is ddpcli.diagnosis.status's)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from ddpcli.compare import summary_cache
from ddpcli.compare.run_keys import RunKeys
from ddpcli.errors import UserError
from ddpcli.jsonvalues import text_or_none
from ddpcli.rundir import record as run_record
from ddpcli.rundir.layout import METRICS_FILE, PARAMS_FILE, RUN_FILE, find_run_dirs, is_run_dir
from ddpcli.rundir.record import LOST

BATCHNORM_FLAGS = frozenset({"--batchnorm", "--batch-norm", "--bn"})
SYNC_BN_FLAGS = frozenset({"--sync-bn", "--sync-batchnorm", "--syncbn", "--sync-batch-norm"})
RUNNING = "running"


class ComparedRun:
    """A run as compare shows it: its keys (ddpcli.compare.run_keys: what it is sorted, paired and chosen by), the
    directory it was read from, and its record (run.json, the one model of ddpcli.rundir.record), read when asked.

    `name`, `status` and `run_id` are the record's as compare reads it (a name from the path where the record has
    none, `lost` for a run whose launcher is gone). A finished run's record can be let go (`release`) once its row
    is built, and is read again if it is asked for later: a compare of 5,000 runs holds a record at a time, not
    5,000 (a real run.json is ~40 KB in memory). A running or lost run's record is kept: it is not the file's.
    """

    def __init__(self, run_dir: Path, keys: RunKeys, record: run_record.RunRecord | None = None, *,
                 indexed: bool = False) -> None:  # fmt: skip
        self.run_dir = run_dir
        self.keys = keys
        self.indexed = indexed  # the keys came from summary.json (else summarize_run keeps them there)
        self._record = record

    def __repr__(self) -> str:
        return f"ComparedRun({str(self.run_dir)!r}, {self.keys.name!r})"

    def __eq__(self, other: object) -> bool:
        """The same run: read from the same directory, with the same keys (whether or not its record is held)."""
        if not isinstance(other, ComparedRun):
            return NotImplemented
        return (self.run_dir, self.keys) == (other.run_dir, other.keys)

    def __hash__(self) -> int:
        return hash((self.run_dir, self.keys))

    @property
    def record(self) -> run_record.RunRecord:
        if self._record is None:
            self._record = read_run_record(self.run_dir)._record
        assert self._record is not None
        return self._record

    def release(self) -> None:
        """Let the record go (read again if asked for): only a finished run's, whose run.json no longer changes."""
        if self.keys.status not in (RUNNING, LOST):
            self._record = None

    @property
    def name(self) -> str:
        return self.keys.name

    @property
    def status(self) -> str:
        return self.keys.status

    @property
    def run_id(self) -> str:
        return self.keys.run_id

    @property
    def started_at(self) -> str:
        return self.keys.started_at

    @property
    def observed_from_run(self) -> bool:
        return self.keys.observed_from_run

    @property
    def world_size(self) -> int | None:
        """The processes launched (torchrun's), whether or not they formed a group or trained one model."""
        return self.keys.world_size

    @property
    def per_device_batch_size(self) -> int | None:
        return self.keys.per_device_batch_size

    @property
    def grad_accum_steps(self) -> int | None:
        return self.keys.grad_accum_steps

    @property
    def global_batch_size(self) -> int | None:
        return self.keys.global_batch_size

    @property
    def total_steps(self) -> int | None:
        return self.keys.total_steps

    @property
    def lr(self) -> float | None:
        """The base lr the run was given (a scheduler's initial_lr), else its peak (older records), else the plan's."""
        return self.keys.lr

    @property
    def plan_mismatches(self) -> list[run_record.Finding]:
        return [finding for finding in self.record.findings if finding.code == "plan_mismatch"]

    @cached_property
    def resolved_dir(self) -> str:
        """The directory's absolute path, links resolved (--json's run_dir, the summary's key, telling copies
        apart): asked three times a run, a few system calls each."""
        return str(self.run_dir.resolve())

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / METRICS_FILE

    @property
    def params_path(self) -> Path:
        return self.run_dir / PARAMS_FILE

    @cached_property
    def has_params(self) -> bool:
        """final_params.pt is there (asked once: choosing a partner asks it of every candidate of every run)."""
        return self.params_path.is_file()

    @cached_property
    def flags(self) -> frozenset[str]:
        """The command line's options, spelled with dashes (`--sync_bn` and `--sync-bn` are the same flag)."""
        options = (arg for arg in self.record.argv if arg.startswith("--"))
        return frozenset(option.split("=", 1)[0].replace("_", "-").lower() for option in options)

    @property
    def uses_batchnorm(self) -> bool:
        """The model has BatchNorm layers (observed), else the command line asks for them (`--batchnorm`)."""
        observed = self.record.observed
        if observed is not None and observed.batchnorm_layers is not None:
            return observed.batchnorm_layers > 0
        return bool(self.flags & BATCHNORM_FLAGS)

    @property
    def uses_sync_bn(self) -> bool:
        observed = self.record.observed
        if observed is not None and observed.batchnorm_synchronized is not None:
            return observed.batchnorm_synchronized
        return bool(self.flags & SYNC_BN_FLAGS)


# What to do with a lost run's record before showing it (the compare command passes ddpcli.launch.lost's merge).
FinishLost = Callable[[run_record.RunRecord, Path], run_record.RunRecord]


def read_run_record(run_dir: Path, finish_lost: FinishLost | None = None) -> ComparedRun:
    """Read run.json; a missing or malformed field is tolerated (shown as unknown), an unreadable file is not.

    A run whose record still says `running` while the ddpcli process that watched it is gone (on this host) is
    shown as `lost`: its launcher was killed, and nothing will ever record its end; what its observers wrote is
    merged in by `finish_lost` (ddpcli.launch.lost.with_observations, which reads /proc: a host module)."""
    try:
        record = run_record.RunRecord.load_tolerant(run_dir)
    except (OSError, ValueError) as error:
        raise UserError(f"{run_dir / RUN_FILE}: cannot read it: {error}") from None
    lost = record.status == "running" and _supervisor_gone(record)
    if lost and finish_lost is not None:
        record = finish_lost(record, run_dir)
    shown = {
        "name": record.name or text_or_none(record.plan.get("name")) or run_dir.parent.name,
        "started_at": record.started_at or "",
        "plan": {sys.intern(key): value for key, value in record.plan.items()},
        **({"status": LOST} if lost else {}),
    }  # the plan's keys are the same two dozen in every run: one string each for all records, not per record
    record = record.model_copy(update=shown)
    return ComparedRun(run_dir, RunKeys.of(record), record)


def index_run(run_dir: Path, finish_lost: FinishLost | None = None) -> ComparedRun:
    """A run to compare, by its keys: summary.json's while run.json is unchanged since they were kept, else read
    from run.json. Either way no record is held (a finished run's is read again for its row)."""
    key = summary_cache.index_key(run_dir)
    keys = RunKeys.from_json(summary_cache.read_index(run_dir, key)) if key is not None else None
    if keys is not None:
        return ComparedRun(run_dir, keys, indexed=True)
    run = read_run_record(run_dir, finish_lost)
    run.release()
    return run


def _supervisor_gone(record: run_record.RunRecord) -> bool:
    """The recorded launcher is no process of this host. A pid from a file is untrusted: os.kill(0 or -1, 0) would
    ask about whole process groups and 2**31 overflows, and no such number names a launcher."""
    pid = record.supervisor_pid
    if pid is None or not isinstance(record.hostname, str) or record.hostname != socket.gethostname():
        return False
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError, ValueError):  # alive, someone else's
        return False
    return False


def size_key(record: ComparedRun, unknown: float = 0) -> tuple[Any, ...]:
    """Sort key: world size, then global batch (`unknown` stands in for a missing one), then name and run_id."""
    return (record.world_size or unknown, record.global_batch_size or unknown, record.name, record.run_id)


def collect_runs(
    paths: Sequence[Path], include_all: bool = False, finish_lost: FinishLost | None = None
) -> tuple[list[ComparedRun], list[str]]:
    """The runs to compare, and warnings about run directories that could not be read.

    A run directory given directly is always compared. Under each runs root (or name directory) only the newest
    run of each name is taken, preferring a completed one (`include_all`: every run); two roots holding the same
    names (the same experiments, run two ways) both show theirs.
    """
    chosen: list[ComparedRun] = []
    warnings: list[str] = []
    for path in paths:
        if is_run_dir(path):
            chosen.append(index_run(path, finish_lost))
            continue
        found = []
        for run_dir in _run_dirs_under(path):
            try:
                found.append(index_run(run_dir, finish_lost))
            except UserError as error:
                warnings.append(f"{error}; run skipped")
        chosen += found if include_all else select_newest(found)
    unique = list({record.resolved_dir: record for record in chosen}.values())
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


def select_newest(records: Iterable[ComparedRun]) -> list[ComparedRun]:
    """One run per name: the newest completed one, else (a name that never completed) the newest of any status.

    run_id starts with a UTC timestamp, so it sorts by start time.
    """
    by_name: dict[str, list[ComparedRun]] = {}
    for record in records:
        by_name.setdefault(record.name, []).append(record)
    return [newest(group) for group in by_name.values()]


def newest(records: Sequence[ComparedRun]) -> ComparedRun:
    """The newest completed run among these, else the newest of any status."""
    completed = [record for record in records if record.status == "completed"]
    # started_at (ISO 8601 UTC) orders runs whatever names their directories: a timestamp id or a job id.
    return max(completed or records, key=lambda run: (run.started_at, run.run_id))
