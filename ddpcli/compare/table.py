"""The comparison as a whole: every run measured against the baseline, with speedup, scaling efficiency and each
multi-process run's equivalence verdict, plus the notes that explain it: as rows streamed one at a time
(ComparisonStream, what `ddpcli compare` prints from) or held (compare_runs)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ddpcli.compare.baseline import choose_baseline
from ddpcli.compare.equivalence import DEFAULT_ATOL, ParamDiffFn, compare_params, find_partner
from ddpcli.compare.metrics import MetricsSummary, RunSummary, summarize_run
from ddpcli.compare.row import ComparisonRow
from ddpcli.compare.runs import ComparedRun, size_key
from ddpcli.diagnosis.equivalence import verdict
from ddpcli.diagnosis.notes import NO_FILE, ComparisonNotes
from ddpcli.diagnosis.run_checks import per_model, schedule_findings, separate_models
from ddpcli.diagnosis.throughput import speed_unreliable
from ddpcli.experiment.outlook import BatchOutlook
from ddpcli.jsonvalues import finite_or_none


@dataclass(frozen=True)
class ComparisonHead:
    """What is known of a comparison before its rows: the baseline's row and how it was chosen."""

    baseline: ComparisonRow
    baseline_reason: str
    atol: float
    experiment_files: list[str]  # distinct files the runs came from (NO_FILE for runs without one)


@dataclass(frozen=True)
class Comparison(ComparisonHead):
    rows: list[ComparisonRow]
    notes: list[str]
    warnings: list[str]


def compare_runs(
    records: Sequence[ComparedRun],
    *,
    baseline: str | None = None,
    atol: float = DEFAULT_ATOL,
    param_diff: ParamDiffFn | None = None,
    plot_points: int = 0,
) -> Comparison:
    """Measure every run against the baseline and check each multi-process run's equivalence: every row held,
    without its curves (see `_slim`). `ddpcli compare` goes through ComparisonStream, which holds none."""
    stream = ComparisonStream(records, baseline=baseline, atol=atol, param_diff=param_diff, plot_points=plot_points)
    rows = [_slim(row) for row in stream.rows()]
    return Comparison(**vars(stream.head), rows=rows, notes=stream.notes, warnings=stream.warnings)


class ComparisonStream:
    """The comparison one row at a time, in table order (the baseline first, then by world size and global
    batch), for outputs that take each row once: the table's cells, --json, --csv, the notes.

    Memory does not grow with the runs' records: a row's record (and its partner's) is let go when the next row is
    asked for (ddpcli.compare.runs.ComparedRun.release), so a consumer that keeps the rows still sees their records,
    read again. What is held throughout: each run's keys, the baseline's summary and record, and the single-process
    runs' summaries without their curves (the partners a multi-process run is paired from; a partner's curve and
    record are read again for the row that needs them). The notes are worked out as the rows pass
    (`notes`, once every row has); so are the warnings about unreadable metrics lines.
    """

    def __init__(
        self,
        records: Sequence[ComparedRun],
        *,
        baseline: str | None = None,
        atol: float = DEFAULT_ATOL,
        param_diff: ParamDiffFn | None = None,
        plot_points: int = 0,
        notes: bool = True,
    ) -> None:
        base_record, reason = choose_baseline(records, baseline)
        base = summarize_run(base_record, None, plot_points=plot_points)
        self._target = target = base.metrics.samples_seen
        self._base = base = replace(base, metrics=_with_target(base.metrics, target))
        self._order = [base_record, *sorted((run for run in records if run is not base_record), key=size_key)]
        self._labels = _labels(self._order)
        self._singles: dict[int | None, list[RunSummary]] = {}  # the only partners there can be, by global batch
        self._kept: set[int] = set()  # the ids of their records
        if (base_record.world_size or 0) > 1:  # its partner is among runs whose rows come after it
            for record in self._order[1:]:
                if record.world_size == 1:
                    self._single(summarize_run(record, target))
        self._single(base)
        self._atol, self._param_diff, self._plot_points = atol, param_diff, plot_points
        files = sorted({run.keys.experiment_file or NO_FILE for run in records})
        self.head = ComparisonHead(self._build(base), reason, atol, files)
        self._notes = ComparisonNotes(atol, records) if notes else None  # --json prints none: none worked out
        self.warnings: list[str] = []
        self._done = False

    @property
    def notes(self) -> list[str]:
        if not self._done or self._notes is None:
            raise RuntimeError("the notes are known once every row has been read, by a stream asked for them")
        return self._notes.notes

    def rows(self) -> Iterator[ComparisonRow]:
        """Every row, once."""
        for record in self._order:
            if record is self._order[0]:
                row = self.head.baseline
            else:
                run = summarize_run(record, self._target, plot_points=self._plot_points)
                self._single(run)
                row = self._build(run)
            if self._notes is not None:
                self._notes.add(row)
            self.warnings += row.run.metrics.skipped
            yield row
            for run in (row.run.record, row.partner.record if row.partner else None):
                if run is not None and run is not self._order[0]:
                    run.release()
        self._done = True

    def _single(self, run: RunSummary) -> None:
        """Keep a single-process run (without its curves) as a partner for the rows after it: the rows come by
        world size, so every partner a multi-process row can have was built before it (the baseline's too)."""
        record = run.record
        if record.world_size == 1 and id(record) not in self._kept:
            self._kept.add(id(record))
            self._singles.setdefault(record.global_batch_size, []).append(_slim_run(run))

    def _build(self, run: RunSummary) -> ComparisonRow:
        partner = find_partner(run, self._singles.get(run.record.global_batch_size, []))
        if partner is not None and partner.record is not self._base.record:
            partner = summarize_run(partner.record, self._target)  # with its curve again (the lr schedule's)
        elif partner is not None:
            partner = self._base
        return _row(run, self._base, partner, self._labels, self._atol, self._param_diff)


def _slim_run(run: RunSummary) -> RunSummary:
    """The run without the curves a row no longer needs: the sparkline's and the lr schedule's points (plot points
    stay: --plot draws them)."""
    return replace(run, metrics=replace(run.metrics, loss_points=[], lr_points=[]))


def _slim(row: ComparisonRow) -> ComparisonRow:
    """The row with its sparkline drawn and its run and partner slimmed: what the table, --json and the notes
    read, without ~10 KB of points a run."""
    partner = _slim_run(row.partner) if row.partner is not None else None
    return replace(row, run=_slim_run(row.run), spark=row.sparkline, partner=partner)


def speedup(samples_per_s: float | None, baseline_samples_per_s: float | None) -> float | None:
    """Throughput ratio against the baseline."""
    if samples_per_s is None or not baseline_samples_per_s:
        return None
    return finite_or_none(samples_per_s / baseline_samples_per_s)


def scaling_efficiency(
    speedup_value: float | None, world_size: int | None, baseline_world_size: int | None
) -> float | None:
    """Speedup per unit of extra hardware: 1.0 means N processes ran N times as fast as the baseline's. None where
    the run has the baseline's world size: there is no extra hardware, and 1 x 64 against 1 x 16 running 7.6x the
    samples/s is a larger batch, not 762% scaling."""
    if speedup_value is None or not world_size or not baseline_world_size or world_size == baseline_world_size:
        return None
    return finite_or_none(speedup_value / (world_size / baseline_world_size))


def _with_target(metrics: MetricsSummary, target: float | None) -> MetricsSummary:
    """The baseline's loss at its own final sample count is its final loss."""
    return replace(metrics, loss_at_target=metrics.final_loss if target is not None else None)


def _labels(runs: Sequence[ComparedRun]) -> dict[Path, str]:
    """Distinct labels: the name; name@run_id when several runs share the name; when copies of a run (a copied
    directory keeps its run.json, run_id included) share that too, name@ the shortest end of their directory paths
    that tells them apart."""
    names = Counter(run.name for run in runs)
    copies: dict[tuple[str, str], list[Path]] = {}
    for run in runs:
        copies.setdefault((run.name, run.run_id), []).append(run.run_dir)
    labels = {}
    for (name, run_id), run_dirs in copies.items():
        if names[name] == 1:
            labels[run_dirs[0]] = name
        elif len(run_dirs) == 1:
            labels[run_dirs[0]] = f"{name}@{run_id}"
        else:
            labels.update({run_dir: f"{name}@{tail}" for run_dir, tail in _distinct_tails(run_dirs).items()})
    return labels


def _distinct_tails(paths: Sequence[Path]) -> dict[Path, str]:
    """The last k parts of each path, for the smallest k that makes them all different."""
    longest = max(len(path.parts) for path in paths)
    for k in range(1, longest + 1):
        tails = {path: "/".join(path.parts[-k:]) for path in paths}
        if len(set(tails.values())) == len(paths):
            return tails
    return {path: str(path) for path in paths}


def _row(
    run: RunSummary,
    base: RunSummary,
    partner: RunSummary | None,
    labels: dict[Path, str],
    atol: float,
    param_diff: ParamDiffFn | None,
) -> ComparisonRow:
    ratio = _speedup(run, base)
    diff = compare_params(run.record, partner.record, param_diff) if partner else None
    step_speedup, efficiency = batch_implications(run, base)
    scaling = scaling_efficiency(ratio, run.record.world_size, base.record.world_size)
    return ComparisonRow(
        run=run,
        label=labels[run.record.run_dir],
        is_baseline=run is base,
        loss_at_baseline_samples=run.metrics.loss_at_target,
        speedup=ratio,
        scaling_efficiency=scaling,
        partner=partner,
        partner_label=labels[partner.record.run_dir] if partner else None,
        param_diff=diff,
        verdict=verdict(diff, atol),
        predicted_step_speedup=step_speedup,
        data_efficiency=efficiency,
        compare_findings=tuple(schedule_findings(run, _references(base, partner, labels))),
        speed_unreliable=ratio is not None and run is not base and speed_unreliable(run.record, base.record, scaling),
    )


def _speedup(run: RunSummary, base: RunSummary) -> float | None:
    """Per model: none for a run whose processes trained separate models (no one model went faster)."""
    if separate_models(run.record) > 1:
        return None
    return speedup(per_model(run.metrics.samples_per_s, run.record), per_model(base.metrics.samples_per_s, base.record))


def _references(base: RunSummary, partner: RunSummary | None, labels: dict[Path, str]) -> list[tuple[RunSummary, str]]:
    pairs = [(base, labels[base.record.run_dir])]
    return [*pairs, (partner, labels[partner.record.run_dir])] if partner is not None else pairs


def batch_implications(run: RunSummary, base: RunSummary) -> tuple[float | None, float | None]:
    """(step speed-up of the run's global batch over the baseline's, data efficiency), from the run's noise
    scale taken as its critical batch; (None, None) when it was not measured."""
    b_crit, batch, base_batch = run.noise_scale, run.record.global_batch_size, base.record.global_batch_size
    if not b_crit or not batch or not base_batch or min(b_crit, batch, base_batch) <= 0:
        return None, None
    outlook = BatchOutlook.of(batch, base_batch, b_crit)
    return outlook.predicted_step_speedup, outlook.data_efficiency
