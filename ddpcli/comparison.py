"""Line finished runs up against each other: throughput, loss at equal samples seen, and parameter equivalence.

Pure logic on purpose (no torch, no rich): `ddpcli compare` parses flags, calls `collect_runs` and `compare_runs`,
and renders what they return. Parameter files are the one thing that needs torch; they are read through
`ddpcli.params`, imported only when two parameter files really have to be compared.

Definitions (the numbers people quote, so they are fixed here and documented in `ddpcli compare --help`):
- samples_per_s = (samples of the last row - samples of the first) / (time of the last - time of the first):
  steady training throughput. The first logged step is left out because its `time` (seconds since
  `runtime.init()`) carries the one-off costs that do not scale (process-group set-up, data loading start, the
  first forward/backward, DDP's bucket building); `wall_time_s` (run.json) includes everything. With a single
  row it is samples / time.
- speedup = samples_per_s / the baseline's samples_per_s.
- scaling_efficiency = speedup / (world_size / the baseline's world_size): 1.0 is perfect linear scaling.
- loss_at_baseline_samples: the run's loss linearly interpolated (on samples seen) at the baseline's final sample
  count; null when the run did not get that far (or had not logged a row before it).
- equivalence: a multi-process run is checked against a single-process run with the same global batch, lr
  (math.isclose) and steps; `equivalent` when the largest absolute difference over every tensor of the two final
  state_dicts is <= atol, `diverged` otherwise (or when their names or shapes differ).

metrics.jsonl can be large (100,000 rows a run is ordinary), so it is not parsed line by line: the reader loads
the bytes, checks their shape cheaply and parses only the rows it needs, found by binary search over byte offsets
(the last row, the rows around the baseline's sample count, a few dozen for the sparkline). Anything unexpected
(a broken line before the last, restarts, samples that do not increase) falls back to parsing every line with
`ddpcli.records.read_metrics`, which is correct for any file but 10-15 times slower.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ddpcli.errors import ConfigError, UserError
from ddpcli.records import (
    METRICS_FILE,
    PARAMS_FILE,
    RUN_FILE,
    find_run_dirs,
    finite_or_none,
    is_run_dir,
    read_json,
    read_metrics,
)

# The keys of one row of `ddpcli compare --json` and --csv, in order. People's scripts read these names.
ROW_KEYS = (
    "name", "status", "run_dir", "world_size", "per_device_batch_size", "grad_accum_steps", "global_batch_size",
    "lr", "steps", "samples_seen", "final_loss", "loss_at_baseline_samples", "wall_time_s", "samples_per_s",
    "speedup", "scaling_efficiency", "equivalent_to", "max_param_diff", "verdict",
)  # fmt: skip
EQUIVALENT, DIVERGED = "equivalent", "diverged"
DEFAULT_ATOL = 1e-5
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 16
SPARK_POINTS = 64  # loss read at this many evenly spaced sample counts for the sparkline, 4 per character
PLOT_POINTS = 2000  # and at this many for --plot: plenty for a figure, cheap to find
NO_FILE = "(no experiment file)"
STATUS_WORDS = {"failed": "failed", "interrupted": "was interrupted", "timed_out": "timed out", "running": "is running"}
BATCHNORM_FLAGS = frozenset({"--batchnorm", "--batch-norm", "--bn"})
SYNC_BN_FLAGS = frozenset({"--sync-bn", "--sync-batchnorm", "--syncbn", "--sync-batch-norm"})


# ---------------------------------------------------------------------------------------------------------------
# run.json


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

    def _plan_int(self, key: str) -> int | None:
        value = self.plan.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def world_size(self) -> int | None:
        return self._plan_int("world_size")

    @property
    def per_device_batch_size(self) -> int | None:
        return self._plan_int("per_device_batch_size")

    @property
    def grad_accum_steps(self) -> int | None:
        return self._plan_int("grad_accum_steps")

    @property
    def global_batch_size(self) -> int | None:
        return self._plan_int("global_batch_size")

    @property
    def total_steps(self) -> int | None:
        return self._plan_int("total_steps")

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
    exit_code, restarts = data.get("exit_code"), data.get("restarts")
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
        exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
        failed_ranks=[entry for entry in failed if isinstance(entry, dict)],
        restarts=restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def status_reason(record: RunRecord) -> str | None:
    """Why a run did not complete, in one line, from what the launcher recorded (failed ranks, exit code)."""
    if record.status == "completed":
        return None
    if record.failed_ranks:
        first = record.failed_ranks[0]
        ranks = ", ".join(str(entry.get("rank", "?")) for entry in record.failed_ranks)
        prefix = f"rank {ranks}" if len(record.failed_ranks) == 1 else f"ranks {ranks} failed; rank {first.get('rank')}"
        detail = f"{prefix} exited with code {first.get('exit_code', '?')}"
        error = _first_line(first.get("error")) or _last_line(first.get("log_tail"))
        return f"{detail}: {error}" if error else detail
    if record.status == "timed_out":
        after = f" after {record.wall_time_s:.0f} s" if record.wall_time_s is not None else ""
        return f"stopped: past its timeout{after}"
    if record.status == "running":
        return "no end recorded: still running, or the launcher itself was killed"
    if record.exit_code is not None:
        return f"exit code {record.exit_code}"
    return None


def _first_line(value: Any, limit: int = 200) -> str | None:
    lines = [line.strip() for line in str(value).splitlines() if line.strip()] if value else []
    return lines[0][:limit] if lines else None


def _last_line(value: Any, limit: int = 200) -> str | None:
    lines = [line.strip() for line in str(value).splitlines() if line.strip()] if value else []
    return lines[-1][:limit] if lines else None


# ---------------------------------------------------------------------------------------------------------------
# Finding and selecting runs


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
    return [_newest(group) for group in by_name.values()]


def _newest(records: Sequence[RunRecord]) -> RunRecord:
    completed = [record for record in records if record.status == "completed"]
    return max(completed or records, key=lambda record: record.run_id)


# ---------------------------------------------------------------------------------------------------------------
# Choosing the baseline


def choose_baseline(records: Sequence[RunRecord], requested: str | None = None) -> tuple[RunRecord, str]:
    """The run the others are measured against, and how it was chosen (said in the table's caption).

    Order: `--baseline NAME`; the baseline of the experiment file the runs came from (as recorded in run.json:
    the file if it is still readable and unchanged, else the run whose plan says `scaling = "baseline"`); the run
    with the smallest world size.
    """
    names = {record.name for record in records}
    if requested is not None:
        matches = [record for record in records if record.name == requested]
        if not matches:
            raise UserError(f"--baseline {requested!r}: no such run here; runs: {', '.join(sorted(names))}")
        return _newest(matches), "--baseline"
    votes: Counter[str] = Counter()
    sources: dict[str, str] = {}
    cache: dict[str, str | None] = {}
    for record in sorted(records, key=lambda record: (record.name, record.run_id)):
        name, source = _declared_baseline(record, cache)
        if name in names:
            votes[name] += 1
            sources.setdefault(name, source)
    if votes:
        name = votes.most_common(1)[0][0]
        chosen = _newest([record for record in records if record.name == name])
        own_name, own_source = _declared_baseline(chosen, cache)
        return chosen, own_source if own_name == name else sources[name]
    smallest = min(records, key=_smallest_world_key)
    return smallest, "smallest world size"


def _smallest_world_key(record: RunRecord) -> tuple[Any, ...]:
    return (record.world_size or math.inf, record.global_batch_size or math.inf, record.name, record.run_id)


def _declared_baseline(record: RunRecord, cache: dict[str, str | None]) -> tuple[str | None, str]:
    """The baseline name this run's experiment file declares, or this run's own name if its plan is the baseline."""
    if record.experiment_file:
        key = f"{record.experiment_file}\0{record.experiment_file_sha256}"
        if key not in cache:
            cache[key] = _file_baseline_name(Path(record.experiment_file), record.experiment_file_sha256)
        if cache[key]:
            return cache[key], f"baseline of {record.experiment_file}"
    if record.plan.get("scaling") == "baseline":
        return record.name, "the baseline in its run.json plan"
    return None, ""


def _file_baseline_name(path: Path, sha256: str | None) -> str | None:
    """[baseline].name of an experiment file, if it is readable and is still the file the run was launched from."""
    from ddpcli.config import load_experiment_file

    try:
        if sha256 and hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
            return None
        return load_experiment_file(path).baseline.name
    except (OSError, ConfigError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# metrics.jsonl


@dataclass(frozen=True)
class MetricsSummary:
    """What compare needs from metrics.jsonl, without keeping 100,000 rows in memory."""

    rows: int = 0
    steps: int | None = None
    samples_seen: int | float | None = None
    final_loss: float | None = None
    last_time: float | None = None
    first_samples: float | None = None
    first_time: float | None = None
    loss_at_target: float | None = None
    loss_points: list[float | None] = field(default_factory=list)  # at SPARK_POINTS evenly spaced sample counts
    plot_points: list[tuple[float, float]] = field(default_factory=list)  # (samples, loss), when asked for
    skipped: list[str] = field(default_factory=list)  # warnings about unreadable lines
    full_parse: bool = False  # True when every line had to be parsed (the slow, careful path)

    @property
    def samples_per_s(self) -> float | None:
        """Samples per second between the first and the last logged row (see the module docstring)."""
        if self.samples_seen is None or self.last_time is None:
            return None
        first_samples, first_time = self.first_samples, self.first_time
        if self.rows >= 2 and first_samples is not None and first_time is not None and self.last_time > first_time:
            return (self.samples_seen - first_samples) / (self.last_time - first_time)
        return self.samples_seen / self.last_time if self.last_time > 0 else None


Row = dict[str, Any]


class Curve(Protocol):
    """Metric rows in strictly increasing `samples` order, reachable without parsing all of them."""

    def first(self) -> Row: ...

    def last(self) -> Row: ...

    def bracket(self, samples: float) -> tuple[Row | None, Row | None]:
        """(the row before, the first row with at least `samples`); None where there is no such row."""
        ...


class _NeedsFullParse(Exception):
    """The fast reader met something it does not handle safely; parse every line instead."""


class _ParsedCurve:
    """Rows already parsed (the careful path)."""

    def __init__(self, rows: list[Row]) -> None:
        self._rows = rows
        self._samples = [float(row["samples"]) for row in rows]

    def first(self) -> Row:
        return self._rows[0]

    def last(self) -> Row:
        return self._rows[-1]

    def bracket(self, samples: float) -> tuple[Row | None, Row | None]:
        index = bisect.bisect_left(self._samples, samples)
        before = self._rows[index - 1] if index > 0 else None
        return before, self._rows[index] if index < len(self._rows) else None


class _LazyCurve:
    """Rows parsed on demand from the file's bytes: a binary search over byte offsets finds a sample count.

    Splitting 100,000 lines alone costs more than everything else compare does, so lines are never split: the
    row around a byte offset is found with rfind/find (about 20 rows parsed per search). Every row parsed is
    remembered, and `check_increasing` verifies at the end that they were in samples order (else the careful path
    takes over).
    """

    def __init__(self, data: bytes, end: int) -> None:
        self._data = data
        self._end = end  # rows live in data[:end]
        self._parsed: dict[int, Row] = {}  # by line start

    def _start(self, offset: int) -> int:
        return self._data.rfind(b"\n", 0, offset) + 1

    def _stop(self, start: int) -> int:
        stop = self._data.find(b"\n", start, self._end)
        return self._end if stop < 0 else stop

    def _row(self, start: int) -> Row:
        cached = self._parsed.get(start)
        if cached is not None:
            return cached
        try:
            row = json.loads(self._data[start : self._stop(start)])
        except ValueError:
            raise _NeedsFullParse from None
        if not isinstance(row, dict) or _number(row.get("samples")) is None:
            raise _NeedsFullParse
        self._parsed[start] = row
        return row

    def first(self) -> Row:
        return self._row(0)

    def last(self) -> Row:
        return self._row(self._start(self._end - 1))

    def bracket(self, samples: float) -> tuple[Row | None, Row | None]:
        low, high = 0, self._end  # the answer starts in [low, high]; both are line starts (or the end)
        while low < high:
            start = self._start((low + high) // 2)
            if _number(self._row(start)["samples"]) < samples:  # type: ignore[operator]
                low = self._stop(start) + 1
            else:
                high = start
        before = self._row(self._start(low - 1)) if low > 0 else None
        return before, self._row(low) if low < self._end else None

    def check_increasing(self) -> None:
        """Every row looked at must be in samples order; a restart that was not recorded shows up here."""
        samples = [_number(self._parsed[start]["samples"]) for start in sorted(self._parsed)]
        if any(later <= earlier for earlier, later in itertools.pairwise(samples)):  # type: ignore[operator]
            raise _NeedsFullParse


def summarize_metrics(
    path: Path,
    target_samples: float | None = None,
    *,
    plot_points: int = 0,
    full_parse: bool = False,
    global_batch_size: int | None = None,
) -> MetricsSummary:
    """Summarise a metrics.jsonl: last row, loss at `target_samples`, sparkline points (and plot points).

    `full_parse` skips the fast reader (a run that restarted appends a second curve after the first). Rows
    without `samples` (a script that logged without knowing its global batch) get step x `global_batch_size`.
    """
    if not full_parse:
        try:
            return _summarize_fast(path, target_samples, plot_points)
        except _NeedsFullParse:
            pass
    read = read_metrics(path)
    rows = resolve_restarts(_with_samples(row, global_batch_size) for row in read.rows)
    if not rows:
        return MetricsSummary(skipped=list(read.skipped), full_parse=True)
    return _summarize(_ParsedCurve(rows), len(rows), target_samples, plot_points, list(read.skipped), True)


def _summarize_fast(path: Path, target_samples: float | None, plot_points: int) -> MetricsSummary:
    """Read the bytes, check that each line looks like one flat JSON object, then parse only the rows needed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return MetricsSummary()
    end = data.rfind(b"\n") + 1
    tail = data[end:]  # after the last newline: b"" normally, a partial row after a crash
    skipped: list[str] = []
    rows = data.count(b"\n", 0, end)
    if tail.strip():
        if _complete_row(tail):
            end, rows = len(data), rows + 1
        else:
            skipped.append(f"{path}:{rows + 1}: not a complete JSON line, skipped")
    # Each line of a clean file is one flat object: as many "{" as lines. A partial row that a restarted writer
    # appended to, a blank line or a nested value all break this and send the file to the careful path.
    if data.count(b"{", 0, end) != rows:
        raise _NeedsFullParse
    if not rows:
        return MetricsSummary(skipped=skipped)
    curve = _LazyCurve(data, end)
    summary = _summarize(curve, rows, target_samples, plot_points, skipped, False)
    curve.check_increasing()
    return summary


def _complete_row(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _summarize(
    curve: Curve, rows: int, target: float | None, plot_points: int, skipped: list[str], full_parse: bool
) -> MetricsSummary:
    first, last = curve.first(), curve.last()
    return MetricsSummary(
        rows=rows,
        steps=_integer(last.get("step")),
        samples_seen=_int_if_whole(last.get("samples")),
        final_loss=finite_or_none(last.get("loss")),
        last_time=finite_or_none(last.get("time")),
        first_samples=finite_or_none(first.get("samples")),
        first_time=finite_or_none(first.get("time")),
        loss_at_target=None if target is None else loss_at(curve, target),
        loss_points=[loss for _, loss in resample(curve, SPARK_POINTS)],
        plot_points=[(x, y) for x, y in resample(curve, plot_points) if y is not None],
        skipped=skipped,
        full_parse=full_parse,
    )


def loss_at(curve: Curve, samples: float) -> float | None:
    """The loss at a sample count, linearly interpolated between the rows around it (None outside the curve)."""
    before, row = curve.bracket(samples)
    if row is None:
        return None  # the run did not get that far
    if _number(row["samples"]) == samples:
        return finite_or_none(row.get("loss"))
    if before is None:
        return None  # before its first logged row
    return _lerp(samples, _point(before), _point(row))


def resample(curve: Curve, points: int) -> list[tuple[float, float | None]]:
    """(samples, loss) of the first row at or after each of `points` evenly spaced sample counts, first to last.

    Spacing by samples, not by row, lines curves of different batch sizes up the way the plot does.
    """
    if points <= 0:
        return []
    low, high = (float(curve.first()["samples"]), float(curve.last()["samples"]))
    chosen: dict[float, float | None] = {}
    for i in range(points):
        target = high if points == 1 else low + (high - low) * i / (points - 1)
        row = curve.bracket(target)[1]
        if row is not None:
            x, y = _point(row)
            chosen[x] = y
    return list(chosen.items())


def _point(row: Row) -> tuple[float, float | None]:
    return float(row["samples"]), finite_or_none(row.get("loss"))


def _lerp(x: float, left: tuple[float, float | None], right: tuple[float, float | None]) -> float | None:
    (x0, y0), (x1, y1) = left, right
    if y0 is None or y1 is None:
        return None
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _with_samples(row: Row, global_batch_size: int | None) -> Row:
    step = _number(row.get("step"))
    if "samples" in row or step is None or not global_batch_size:
        return row
    return {**row, "samples": step * global_batch_size}


def resolve_restarts(rows: Iterable[Row]) -> list[Row]:
    """Rows with numeric samples, in strictly increasing samples order, the latest attempt winning.

    A restarted worker group starts logging again from an earlier step; its rows replace those of the attempt
    that failed from that point on, as its parameters are the ones that end up in final_params.pt.
    """
    kept: list[Row] = []
    for row in rows:
        samples = _number(row.get("samples"))
        if samples is None:
            continue
        while kept and _number(kept[-1]["samples"]) >= samples:  # type: ignore[operator]
            kept.pop()
        kept.append(row)
    return kept


def _number(value: Any) -> float | None:
    return finite_or_none(value)


def _int_if_whole(value: Any) -> int | float | None:
    number = finite_or_none(value)
    return int(number) if number is not None and number.is_integer() else number


def _integer(value: Any) -> int | None:
    number = finite_or_none(value)
    return int(number) if number is not None and number.is_integer() else None


# ---------------------------------------------------------------------------------------------------------------
# Arithmetic


def interpolate(xs: Sequence[float], ys: Sequence[float | None], x: float) -> float | None:
    """y at x by linear interpolation on increasing xs; None outside [xs[0], xs[-1]] or next to a missing y."""
    if not len(xs) or x > xs[-1] or x < xs[0]:
        return None
    index = bisect.bisect_left(xs, x)
    if xs[index] == x:
        return ys[index]
    return _lerp(x, (xs[index - 1], ys[index - 1]), (xs[index], ys[index]))


def speedup(samples_per_s: float | None, baseline_samples_per_s: float | None) -> float | None:
    """Throughput ratio against the baseline."""
    if samples_per_s is None or not baseline_samples_per_s:
        return None
    return samples_per_s / baseline_samples_per_s


def scaling_efficiency(
    speedup_value: float | None, world_size: int | None, baseline_world_size: int | None
) -> float | None:
    """Speedup per unit of extra hardware: 1.0 means N processes ran N times as fast as the baseline's."""
    if speedup_value is None or not world_size or not baseline_world_size:
        return None
    return speedup_value / (world_size / baseline_world_size)


def sparkline(values: Sequence[float | None], width: int = SPARK_WIDTH) -> str:
    """Unicode blocks for a loss curve: `values` averaged into `width` buckets, scaled to the run's own range."""
    if not values:
        return ""
    width = min(width, len(values))
    buckets: list[float | None] = []
    for i in range(width):
        chunk = [v for v in values[i * len(values) // width : (i + 1) * len(values) // width] if v is not None]
        buckets.append(sum(chunk) / len(chunk) if chunk else None)
    finite = [value for value in buckets if value is not None]
    if not finite:
        return " " * width
    low, high = min(finite), max(finite)
    top = len(SPARK_BLOCKS) - 1
    return "".join(
        " " if value is None else SPARK_BLOCKS[round((value - low) / (high - low) * top) if high > low else 0]
        for value in buckets
    )


# ---------------------------------------------------------------------------------------------------------------
# Parameter equivalence


@dataclass(frozen=True)
class ParamDiff:
    """The result of comparing two final_params.pt files.

    max_abs_diff: over every tensor of both state_dicts (when their names and shapes match).
    mismatch: why the two cannot be the same model (names, shapes, non-finite values): a divergence.
    error: why they could not be compared at all (a missing or unreadable file): no verdict.
    """

    max_abs_diff: float | None = None
    mismatch: str | None = None
    error: str | None = None


ParamDiffFn = Callable[[Path, Path], ParamDiff]


def verdict(diff: ParamDiff | None, atol: float) -> str | None:
    if diff is None or diff.error is not None:
        return None
    if diff.mismatch is not None or diff.max_abs_diff is None:
        return DIVERGED
    return EQUIVALENT if diff.max_abs_diff <= atol else DIVERGED


def find_partner(run: RunSummary, others: Sequence[RunSummary]) -> RunSummary | None:
    """The single-process run a multi-process run must match: same global batch, lr (math.isclose) and steps.

    Among several, prefer one with final_params.pt, then a completed one, then the same seed, the same
    experiment file, and the newest.
    """
    record = run.record
    if not record.world_size or record.world_size <= 1 or record.global_batch_size is None or record.lr is None:
        return None
    candidates = [
        other
        for other in others
        if other.record.world_size == 1
        and other.record.global_batch_size == record.global_batch_size
        and other.record.lr is not None
        and math.isclose(other.record.lr, record.lr)
        and _same_steps(run, other)
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda other: _partner_preference(record, other))


def _same_steps(run: RunSummary, other: RunSummary) -> bool:
    """Same planned total_steps when both plans have one; two completed runs must also have done as many steps.

    The plan decides the pairing, so a run that failed early still finds its partner (and the note then says its
    parameters could not be compared) instead of looking unpaired.
    """
    mine, theirs = run.record.total_steps, other.record.total_steps
    planned = mine is not None and theirs is not None
    if planned and mine != theirs:
        return False
    both_done = run.record.status == "completed" and other.record.status == "completed"
    if (both_done or not planned) and run.metrics.steps is not None and other.metrics.steps is not None:
        return run.metrics.steps == other.metrics.steps
    return True


def _partner_preference(run: RunRecord, other: RunSummary) -> tuple[Any, ...]:
    return (
        other.record.params_path.is_file(),
        other.record.status == "completed",
        other.record.plan.get("seed") == run.plan.get("seed"),
        other.record.experiment_file == run.experiment_file,
        other.record.run_id,
    )


def compare_params(run: RunRecord, partner: RunRecord, diff_fn: ParamDiffFn | None = None) -> ParamDiff:
    """Compare final parameters; torch is imported (through ddpcli.params) only when both files exist."""
    for record in (run, partner):
        if not record.params_path.is_file():
            return ParamDiff(error=f"{record.name} has no {PARAMS_FILE} ({record.status}) in {record.run_dir}")
    if diff_fn is None:
        from ddpcli.params import param_diff as diff_fn
    return diff_fn(run.params_path, partner.params_path)


# ---------------------------------------------------------------------------------------------------------------
# The comparison


@dataclass(frozen=True)
class RunSummary:
    """One run: its record and its metrics."""

    record: RunRecord
    metrics: MetricsSummary


def load_run(run_dir: Path, target_samples: float | None = None, *, plot_points: int = 0) -> RunSummary:
    """Read one run directory (run.json and metrics.jsonl) into a summary."""
    return summarize_run(read_run_record(run_dir), target_samples, plot_points=plot_points)


def summarize_run(record: RunRecord, target_samples: float | None = None, *, plot_points: int = 0) -> RunSummary:
    """A run's metrics, read carefully (every line) when run.json records restarts: the curve starts over."""
    metrics = summarize_metrics(
        record.metrics_path,
        target_samples,
        plot_points=plot_points,
        full_parse=record.restarts > 0,
        global_batch_size=record.global_batch_size,
    )
    return RunSummary(record, metrics)


@dataclass(frozen=True)
class ComparisonRow:
    """One row of the table and of --json: a run measured against the baseline and its equivalence partner."""

    run: RunSummary
    label: str  # the name, or name@run_id when several runs of that name are compared
    is_baseline: bool
    loss_at_baseline_samples: float | None
    speedup: float | None
    scaling_efficiency: float | None
    partner: RunSummary | None = None
    partner_label: str | None = None
    param_diff: ParamDiff | None = None
    verdict: str | None = None

    @property
    def sparkline(self) -> str:
        return sparkline(self.run.metrics.loss_points)

    def as_json(self) -> dict[str, Any]:
        """The row of --json and --csv: exactly ROW_KEYS, null where a value does not apply or is unknown."""
        record, metrics = self.run.record, self.run.metrics
        return {
            "name": record.name,
            "status": record.status,
            "run_dir": str(record.run_dir.resolve()),
            "world_size": record.world_size,
            "per_device_batch_size": record.per_device_batch_size,
            "grad_accum_steps": record.grad_accum_steps,
            "global_batch_size": record.global_batch_size,
            "lr": record.lr,
            "steps": metrics.steps,
            "samples_seen": metrics.samples_seen,
            "final_loss": metrics.final_loss,
            "loss_at_baseline_samples": self.loss_at_baseline_samples,
            "wall_time_s": record.wall_time_s,
            "samples_per_s": metrics.samples_per_s,
            "speedup": self.speedup,
            "scaling_efficiency": self.scaling_efficiency,
            "equivalent_to": self.partner_label,
            "max_param_diff": self.param_diff.max_abs_diff if self.param_diff else None,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Comparison:
    rows: list[ComparisonRow]
    baseline: ComparisonRow
    baseline_reason: str
    atol: float
    notes: list[str]
    warnings: list[str]
    experiment_files: list[str]  # distinct files the runs came from (NO_FILE for runs without one)


def compare_runs(
    records: Sequence[RunRecord],
    *,
    baseline: str | None = None,
    atol: float = DEFAULT_ATOL,
    param_diff: ParamDiffFn | None = None,
    plot_points: int = 0,
) -> Comparison:
    """Measure every run against the baseline and check each multi-process run's equivalence."""
    base_record, reason = choose_baseline(records, baseline)
    base = summarize_run(base_record, None, plot_points=plot_points)
    target = base.metrics.samples_seen
    base = RunSummary(base_record, _with_target(base.metrics, target))
    others = [summarize_run(record, target, plot_points=plot_points) for record in records if record is not base_record]
    summaries = [base, *others]
    summaries.sort(key=lambda run: (run is not base, *_order_key(run.record)))
    labels = _labels(summaries)
    rows = [_row(run, base, summaries, labels, atol, param_diff) for run in summaries]
    warnings = [warning for run in summaries for warning in run.metrics.skipped]
    files = sorted({record.experiment_file or NO_FILE for record in records})
    return Comparison(
        rows=rows,
        baseline=rows[0],
        baseline_reason=reason,
        atol=atol,
        notes=comparison_notes(rows, atol),
        warnings=warnings,
        experiment_files=files,
    )


def _with_target(metrics: MetricsSummary, target: float | None) -> MetricsSummary:
    """The baseline's loss at its own final sample count is its final loss."""
    return replace(metrics, loss_at_target=metrics.final_loss if target is not None else None)


def _order_key(record: RunRecord) -> tuple[Any, ...]:
    return (record.world_size or 0, record.global_batch_size or 0, record.name, record.run_id)


def _labels(runs: Sequence[RunSummary]) -> dict[Path, str]:
    counts = Counter(run.record.name for run in runs)
    return {
        run.record.run_dir: run.record.name
        if counts[run.record.name] == 1
        else f"{run.record.name}@{run.record.run_id}"
        for run in runs
    }


def _row(
    run: RunSummary,
    base: RunSummary,
    runs: Sequence[RunSummary],
    labels: dict[Path, str],
    atol: float,
    param_diff: ParamDiffFn | None,
) -> ComparisonRow:
    ratio = speedup(run.metrics.samples_per_s, base.metrics.samples_per_s)
    partner = find_partner(run, runs)
    diff = compare_params(run.record, partner.record, param_diff) if partner else None
    return ComparisonRow(
        run=run,
        label=labels[run.record.run_dir],
        is_baseline=run is base,
        loss_at_baseline_samples=run.metrics.loss_at_target,
        speedup=ratio,
        scaling_efficiency=scaling_efficiency(ratio, run.record.world_size, base.record.world_size),
        partner=partner,
        partner_label=labels[partner.record.run_dir] if partner else None,
        param_diff=diff,
        verdict=verdict(diff, atol),
    )


# ---------------------------------------------------------------------------------------------------------------
# Notes in plain words


def comparison_notes(rows: Sequence[ComparisonRow], atol: float) -> list[str]:
    """What a reader of the table needs explained: failures, divergences and why, unchecked runs, mixed files."""
    notes: list[str] = []
    for row in rows:
        reason = status_reason(row.run.record)
        if reason:
            what = STATUS_WORDS.get(row.run.record.status, f"is {row.run.record.status}")
            notes.append(f"{row.label} {what}: {reason}.")
    for row in rows:
        notes += _equivalence_notes(row, atol)
    notes += _file_notes([row.run.record for row in rows])
    return notes


def _equivalence_notes(row: ComparisonRow, atol: float) -> list[str]:
    record = row.run.record
    if not record.world_size or record.world_size <= 1:
        return []
    if row.partner is None:
        return [
            f"{row.label}: no single-process run with global batch {record.global_batch_size}, lr {record.lr:.4g} "
            f"and {row.run.metrics.steps or record.total_steps or 'the same'} steps among these runs, so its "
            "equivalence was not checked."
            if record.lr is not None
            else f"{row.label}: its plan has no lr, so its equivalence was not checked."
        ]
    diff = row.param_diff
    assert diff is not None
    if diff.error:
        return [f"{row.label} could not be checked against {row.partner_label}: {diff.error}."]
    if row.verdict != DIVERGED:
        return []
    return [divergence_note(row, atol)]


def divergence_note(row: ComparisonRow, atol: float) -> str:
    """Why a multi-process run ended with different parameters than its single-process partner, specifically."""
    assert row.partner is not None and row.param_diff is not None
    run, partner = row.run.record, row.partner.record
    diff = row.param_diff
    if diff.mismatch:
        head = f"{row.label} diverged from {row.partner_label}: {diff.mismatch}."
    else:
        head = (
            f"{row.label} diverged from {row.partner_label}: parameters differ by up to {diff.max_abs_diff:.3g} "
            f"(atol {atol:g})."
        )
    causes = divergence_causes(run, partner)
    if not causes and diff.max_abs_diff is not None and diff.max_abs_diff <= 100 * atol:
        causes = [
            "The difference is small: summing gradients across processes rounds in a different order than one "
            "large batch, and float32 rounding accumulates over many steps; raise --atol if this is acceptable"
        ]
    if not causes:
        causes = [_unexplained(run, partner)]
    return " ".join([head, *(f"{cause}." for cause in causes)])


def _unexplained(run: RunRecord, partner: RunRecord) -> str:
    """The usual suspects, when run.json records no difference between the two runs."""
    suspects = [
        "a sum-reduced loss (DDP averages gradients, so each process must use the mean over its own batch)",
        "a different data order (the DistributedSampler shards must together hold the one-device batch of each "
        "step, with the same seed)",
        "dropout or augmentation drawing different random numbers on each rank",
    ]
    if run.per_device_batch_size != partner.per_device_batch_size:
        suspects.append(
            f"BatchNorm layers normalising over {run.per_device_batch_size} samples per device instead of "
            f"{partner.per_device_batch_size} (SyncBatchNorm normalises over all processes)"
        )
    return f"Nothing in the run records explains it; likely causes: {'; '.join(suspects)}"


def divergence_causes(run: RunRecord, partner: RunRecord) -> list[str]:
    """Differences recorded in run.json that break equivalence, each in words with its numbers."""
    causes: list[str] = []
    bn = _batchnorm_cause(run, partner)
    if bn:
        causes.append(bn)
    for key, what in (
        ("seed", "the seed (initial weights and data order)"),
        ("dataset_size", "dataset_size (the data)"),
        ("drop_last", "drop_last (which samples an epoch holds)"),
        ("warmup_steps", "warmup_steps (the learning-rate schedule)"),
        ("optimizer", "the optimizer"),
    ):
        mine, theirs = run.plan.get(key), partner.plan.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            causes.append(f"The runs differ in {what}: {mine} vs {theirs}")
    return causes


def _batchnorm_cause(run: RunRecord, partner: RunRecord) -> str | None:
    """BatchNorm normalises over what one forward pass sees: per device, or all devices with SyncBatchNorm."""
    per_device = run.per_device_batch_size
    if per_device is None or partner.per_device_batch_size is None or not run.world_size:
        return None
    sync = run.uses_sync_bn
    seen = per_device * run.world_size if sync else per_device
    if seen == partner.per_device_batch_size:
        return None
    if not run.uses_batchnorm:
        return None  # the generic note still mentions BatchNorm when the per-device batches differ
    where = f"{run.world_size} processes x {per_device} with SyncBatchNorm" if sync else f"{per_device} per device"
    fix = "" if sync else " (its args have --batchnorm without --sync-bn; SyncBatchNorm would normalise over all)"
    return (
        f"BatchNorm statistics differ: {run.name} normalises over {seen} samples ({where}){fix}, "
        f"{partner.name} over {partner.per_device_batch_size}"
    )


def _file_notes(records: Sequence[RunRecord]) -> list[str]:
    """Runs from several experiment files (or one file edited in between) were planned under different rules."""
    names: dict[str, set[str]] = {}
    hashes: dict[str, set[str]] = {}
    for record in records:
        path = record.experiment_file or NO_FILE
        names.setdefault(path, set()).add(record.name)
        hashes.setdefault(path, set()).update([record.experiment_file_sha256] if record.experiment_file_sha256 else [])
    notes = []
    if len(names) > 1:
        groups = "; ".join(f"{path}: {', '.join(sorted(names[path]))}" for path in sorted(names))
        notes.append(f"These runs come from {len(names)} different experiment files ({groups}).")
    notes += [
        f"{path} was edited between these runs (its recorded sha256 differs)."
        for path in sorted(hashes)
        if len(hashes[path]) > 1
    ]
    return notes
