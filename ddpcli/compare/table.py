"""The comparison as a whole: every run measured against the baseline, with speedup, scaling efficiency and each
multi-process run's equivalence verdict, plus the notes that explain it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ddpcli.compare.baseline import choose_baseline
from ddpcli.compare.equivalence import DEFAULT_ATOL, ParamDiffFn, compare_params, find_partner, verdict
from ddpcli.compare.metrics import MetricsSummary, RunSummary, summarize_run
from ddpcli.compare.notes import comparison_notes
from ddpcli.compare.row import ComparisonRow
from ddpcli.compare.run_checks import per_model, schedule_findings, separate_models
from ddpcli.compare.runs import NO_FILE, ComparedRun, size_key
from ddpcli.compare.throughput import speed_unreliable
from ddpcli.experiment.outlook import BatchOutlook
from ddpcli.jsonvalues import finite_or_none


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
    records: Sequence[ComparedRun],
    *,
    baseline: str | None = None,
    atol: float = DEFAULT_ATOL,
    param_diff: ParamDiffFn | None = None,
    plot_points: int = 0,
) -> Comparison:
    """Measure every run against the baseline and check each multi-process run's equivalence.

    Rows are built in table order, each as soon as its run is summarised, and keep no curve (see `_slim`): only
    the baseline's and the single-process runs' curves (the references a run's lr schedule is checked against)
    are held until every row is built, so memory does not grow by a run's points for every run compared.
    """
    base_record, reason = choose_baseline(records, baseline)
    base = summarize_run(base_record, None, plot_points=plot_points)
    target = base.metrics.samples_seen
    base = replace(base, metrics=_with_target(base.metrics, target))
    order = [base_record, *sorted((record for record in records if record is not base_record), key=size_key)]
    labels = _labels(order)
    summaries = {id(base_record): base}
    singles: dict[int | None, list[RunSummary]] = {}  # the only partners there can be, by global batch
    for record in order:
        if record.world_size == 1:
            if id(record) not in summaries:
                summaries[id(record)] = summarize_run(record, target, plot_points=plot_points)
            singles.setdefault(record.global_batch_size, []).append(summaries[id(record)])
    rows, warnings = [], []
    for record in order:
        run = summaries.get(id(record)) or summarize_run(record, target, plot_points=plot_points)
        row = _row(run, base, singles.get(record.global_batch_size, []), labels, atol, param_diff)
        rows.append(row if id(record) in summaries else _slim(row, {}))  # a reference is slimmed after all rows
        warnings += run.metrics.skipped
    slimmed = {id(run): _slim_run(run) for run in summaries.values()}
    rows = [_slim(row, slimmed) if id(row.run) in slimmed else _slim_partner(row, slimmed) for row in rows]
    files = sorted({run.record.experiment_file or NO_FILE for run in records})
    return Comparison(
        rows=rows,
        baseline=rows[0],
        baseline_reason=reason,
        atol=atol,
        notes=comparison_notes(rows, atol),
        warnings=warnings,
        experiment_files=files,
    )


def _slim_run(run: RunSummary) -> RunSummary:
    """The run without the curves a row no longer needs: the sparkline's and the lr schedule's points (plot points
    stay: --plot draws them)."""
    return replace(run, metrics=replace(run.metrics, loss_points=[], lr_points=[]))


def _slim(row: ComparisonRow, slimmed: dict[int, RunSummary]) -> ComparisonRow:
    """The row with its sparkline drawn and its run (and partner) slimmed: what the table, --json and the notes
    read, without ~10 KB of points a run."""
    run = slimmed.get(id(row.run)) or _slim_run(row.run)
    return _slim_partner(replace(row, run=run, spark=row.sparkline), slimmed)


def _slim_partner(row: ComparisonRow, slimmed: dict[int, RunSummary]) -> ComparisonRow:
    partner = slimmed.get(id(row.partner)) if row.partner is not None else None
    return replace(row, partner=partner) if partner is not None else row


def speedup(samples_per_s: float | None, baseline_samples_per_s: float | None) -> float | None:
    """Throughput ratio against the baseline."""
    if samples_per_s is None or not baseline_samples_per_s:
        return None
    return finite_or_none(samples_per_s / baseline_samples_per_s)


def scaling_efficiency(
    speedup_value: float | None, world_size: int | None, baseline_world_size: int | None
) -> float | None:
    """Speedup per unit of extra hardware: 1.0 means N processes ran N times as fast as the baseline's."""
    if speedup_value is None or not world_size or not baseline_world_size:
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
    runs: Sequence[RunSummary],
    labels: dict[Path, str],
    atol: float,
    param_diff: ParamDiffFn | None,
) -> ComparisonRow:
    ratio = _speedup(run, base)
    partner = find_partner(run, runs)
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
