"""A run's metrics.jsonl, summarised: last row, throughput, loss at the baseline's sample count, curve points.

metrics.jsonl can be large (100,000 rows a run is ordinary), so it is not parsed line by line: the reader loads
the bytes, checks their shape cheaply and parses only the rows it needs, found by binary search over byte offsets
(the last row, the rows around the baseline's sample count, a few dozen for the sparkline). Anything unexpected
(a broken line before the last, restarts, samples that do not increase) falls back to parsing every line with
`ddpcli.rundir.metrics.read_metrics`, which is correct for any file but 10-15 times slower.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from ddpcli.compare import summary_cache
from ddpcli.compare.curve import Curve, LazyCurve, NeedsFullParse, ParsedCurve, Row, loss_at, resample, rows_at
from ddpcli.compare.runs import ComparedRun, read_run_record
from ddpcli.diagnosis.schedule import Point, points
from ddpcli.jsonvalues import finite_or_none, loads_json, number_or_none, whole_or_none
from ddpcli.rundir.metrics import noise_scale_reading, read_metrics, unreadable
from ddpcli.rundir.record import LOST

SPARK_POINTS = 64  # loss read at this many evenly spaced sample counts for the sparkline, 4 per character
PLOT_POINTS = 2000  # and at this many for --plot: plenty for a figure, cheap to find
# Rows read for the lr schedule (ddpcli.diagnosis.schedule): every row of a run this long, evenly spaced rows of a
# longer one (steps between them are counted from their step numbers). The sparkline's rows: parsed once for both.
SCHEDULE_POINTS = SPARK_POINTS
UNFINISHED = ("running", LOST)  # their files still change: derived each time, never kept (summary_cache)


@dataclass(frozen=True)
class MetricsSummary:
    """What compare needs from metrics.jsonl, without keeping 100,000 rows in memory."""

    rows: int = 0
    steps: int | None = None
    samples_seen: int | float | None = None
    final_loss: float | None = None  # NaN or inf when training blew up (shown as such; null in JSON)
    last_time: float | None = None
    first_samples: float | None = None
    first_time: float | None = None
    loss_at_target: float | None = None
    loss_points: list[float | None] = field(default_factory=list)  # at SPARK_POINTS evenly spaced sample counts
    plot_points: list[tuple[float, float]] = field(default_factory=list)  # (samples, loss), when asked for
    lr_points: list[tuple[float | None, float | None, int | None]] = field(default_factory=list)  # samples, lr, step
    skipped: list[str] = field(default_factory=list)  # warnings about unreadable lines
    full_parse: bool = False  # True when every line had to be parsed (the slow, careful path)

    @cached_property
    def schedule_points(self) -> list[Point]:
        """lr_points as the schedule check reads them: worked out once for the baseline, which every row is
        checked against."""
        return points(self.lr_points)

    @property
    def samples_per_s(self) -> float | None:
        """Samples per second between the first and the last logged row (see the ddpcli.compare docstring)."""
        if self.samples_seen is None or self.last_time is None:
            return None
        first_samples, first_time = self.first_samples, self.first_time
        if self.rows >= 2 and first_samples is not None and first_time is not None and self.last_time > first_time:
            return finite_or_none((self.samples_seen - first_samples) / (self.last_time - first_time))
        return None  # one row: its time holds the start-up, no steady throughput (diagnosis.throughput notes it)


@dataclass(frozen=True)
class RunSummary:
    """One run: its record and its metrics."""

    record: ComparedRun
    metrics: MetricsSummary
    noise_scale: float | None = None  # the last logged gradient noise scale (B_simple), when it was measured
    noise_problem: str | None = None  # why a logged noise scale is not used (also in metrics.skipped)


def load_run(run_dir: Path, target_samples: float | None = None, *, plot_points: int = 0) -> RunSummary:
    """Read one run directory (run.json and metrics.jsonl) into a summary."""
    return summarize_run(read_run_record(run_dir), target_samples, plot_points=plot_points)


def summarize_run(run: ComparedRun, target_samples: float | None = None, *, plot_points: int = 0) -> RunSummary:
    """A run's metrics, read carefully (every line) when run.json records restarts: the curve starts over. A
    finished run's summary is kept in its directory and read back while its files are unchanged (summary_cache)."""
    if plot_points or run.status in UNFINISHED:
        return _derive_run(run, target_samples, plot_points)
    derived_with = {"run_dir": run.resolved_dir, "target": target_samples,
                    "full_parse": run.keys.restarts > 0, "global_batch_size": run.global_batch_size}  # fmt: skip
    key = summary_cache.cache_key(run.run_dir, derived_with)
    cached = summary_cache.read_summary(run.run_dir, key) if key is not None else None
    summary = _from_cache(run, cached) if cached is not None else _derive_run(run, target_samples, 0)
    if key is not None and (cached is None or not run.indexed):  # the run's keys are kept with its summary
        index_key = summary_cache.index_key(run.run_dir, key)
        index = (index_key, run.keys.as_json()) if index_key is not None else None
        run.indexed = summary_cache.write_summary(run.run_dir, key, cached or _to_cache(summary), index)
    return summary


def _to_cache(summary: RunSummary) -> dict[str, Any]:
    values = {name: getattr(summary.metrics, name) for name in summary_cache.FIELDS}
    values["lr_points"] = [list(point) for point in summary.metrics.lr_points]
    return {**values, "noise_scale": summary.noise_scale, "noise_problem": summary.noise_problem}


def _from_cache(run: ComparedRun, values: dict[str, Any]) -> RunSummary:
    fields = {name: values[name] for name in summary_cache.FIELDS}
    fields["lr_points"] = [tuple(point) for point in values["lr_points"]]
    metrics = MetricsSummary(**fields)
    return RunSummary(run, metrics, values["noise_scale"], values["noise_problem"])


def _derive_run(run: ComparedRun, target_samples: float | None, plot_points: int) -> RunSummary:
    metrics = summarize_metrics(
        run.metrics_path,
        target_samples,
        plot_points=plot_points,
        full_parse=run.keys.restarts > 0,
        global_batch_size=run.global_batch_size,
    )
    noise_scale, problem = noise_scale_reading(run.run_dir)
    if problem:
        metrics = replace(metrics, skipped=[*metrics.skipped, problem])
    return RunSummary(run, metrics, noise_scale, problem)


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
        except NeedsFullParse:
            pass
    read = read_metrics(path)
    rows = resolve_restarts(read.rows, global_batch_size)
    skipped = [*read.skipped, *unplaced_rows(path, read.rows, global_batch_size)]
    if not rows:
        return MetricsSummary(skipped=skipped, full_parse=True)
    return _summarize(ParsedCurve(rows), len(rows), target_samples, plot_points, skipped, True)


def unplaced_rows(path: Path, rows: list[Row], global_batch_size: int | None) -> list[str]:
    """One warning per row the curve leaves out for a samples count (or a step standing in for it) that is there
    but no finite number: a 400-digit integer, a string. A row with neither is not a point of the curve at all."""
    warnings = []
    for row in rows:
        row = _with_samples(row, global_batch_size)
        key = "samples" if "samples" in row else "step"
        if key in row and finite_or_none(row[key]) is None:
            step = finite_or_none(row.get("step"))
            where = f"the row of step {int(step)}" if step is not None and step.is_integer() else "a row"
            warnings.append(f"{path}: {where}: {key} is {_described(row[key])}, not a finite number; skipped")
    return warnings


def _described(value: Any) -> str:
    """A value as a warning line can hold it: a huge integer by its digits, a long string cut."""
    if isinstance(value, int) and not isinstance(value, bool) and len(str(abs(value))) > 20:
        return f"an integer of {len(str(abs(value)))} digits"
    try:
        text = repr(value) if isinstance(value, float) else json.dumps(value, allow_nan=False)
    except ValueError:  # a list holding a NaN: as Python writes it
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _summarize_fast(path: Path, target_samples: float | None, plot_points: int) -> MetricsSummary:
    """Read the bytes, check that each line looks like one flat JSON object, then parse only the rows needed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return MetricsSummary()
    except OSError as error:  # a directory, no permission
        return MetricsSummary(skipped=[unreadable(path, error)])
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
        raise NeedsFullParse
    if not rows:
        return MetricsSummary(skipped=skipped)
    curve = LazyCurve(data, end)
    summary = _summarize(curve, rows, target_samples, plot_points, skipped, False)
    curve.check_increasing()
    return summary


def _complete_row(line: bytes) -> bool:
    try:
        return isinstance(loads_json(line), dict)
    except ValueError:
        return False


def _summarize(
    curve: Curve, rows: int, target: float | None, plot_points: int, skipped: list[str], full_parse: bool
) -> MetricsSummary:
    first, last = curve.first(), curve.last()
    return MetricsSummary(
        rows=rows,
        steps=whole_or_none(last.get("step")),
        samples_seen=_int_if_whole(last.get("samples")),
        final_loss=number_or_none(last.get("loss")),
        last_time=finite_or_none(last.get("time")),
        first_samples=finite_or_none(first.get("samples")),
        first_time=finite_or_none(first.get("time")),
        loss_at_target=None if target is None else loss_at(curve, target),
        loss_points=[loss for _, loss in resample(curve, SPARK_POINTS)],
        plot_points=[(x, y) for x, y in resample(curve, plot_points) if y is not None],
        lr_points=[
            (finite_or_none(row.get("samples")), finite_or_none(row.get("lr")), whole_or_none(row.get("step")))
            for row in rows_at(curve, SCHEDULE_POINTS)
        ],
        skipped=skipped,
        full_parse=full_parse,
    )


def _with_samples(row: Row, global_batch_size: int | None) -> Row:
    step = finite_or_none(row.get("step"))
    if "samples" in row or step is None or not global_batch_size:
        return row
    return {**row, "samples": step * global_batch_size}


def resolve_restarts(rows: Iterable[Row], global_batch_size: int | None = None) -> list[Row]:
    """Rows with numeric samples, in strictly increasing samples order, the latest attempt winning; a row without
    `samples` (a script that logged without knowing its global batch) gets step x `global_batch_size`. What compare
    reads a curve from, and export too (ddpcli.export.points).

    A restarted worker group starts logging again from an earlier step; its rows replace those of the attempt
    that failed from that point on, as its parameters are the ones that end up in final_params.pt.
    """
    kept: list[Row] = []
    for row in rows:
        row = _with_samples(row, global_batch_size)
        samples = finite_or_none(row.get("samples"))
        if samples is None:
            continue
        while kept and float(kept[-1]["samples"]) >= samples:
            kept.pop()
        kept.append(row)
    return kept


def _int_if_whole(value: Any) -> int | float | None:
    """A finite number, as an int when it is whole (1600.0 shows as 1600); None for anything else."""
    number = finite_or_none(value)
    return int(number) if number is not None and number.is_integer() else number
