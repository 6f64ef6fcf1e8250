"""The runs to export, as compare sees them: its rows give the verdict against the baseline, the max parameter
difference, the final loss and samples per second (ddpcli.compare.ComparisonStream: the same numbers the table
prints, never worked out a second way); the record gives the params; metrics.jsonl gives the points."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddpcli.compare import ComparisonStream, collect_runs
from ddpcli.compare.equivalence import ParamDiffFn
from ddpcli.compare.metrics import unplaced_rows
from ddpcli.compare.row import ComparisonRow
from ddpcli.compare.runs import FinishLost
from ddpcli.export.points import Point, epoch_seconds, points
from ddpcli.rundir.metrics import read_metrics

UNFINISHED = frozenset({"running"})  # its rows and status may still change: the next export adds the rest
Value = int | float | str | bool


class Skipped(Exception):
    """A run a viewer does not take this time, and why (a warning, not an error)."""


@dataclass(frozen=True)
class ExportRun:
    """One ddpcli run, as every viewer writes it."""

    run_dir: Path
    run_id: str
    name: str  # the experiment's name in the file: the viewer run's name, as the table shows it
    group: str  # the experiment file's stem, else the runs folder's name: one MLflow experiment, one W&B project
    status: str
    params: dict[str, Value]  # the hparams: None values left out (a viewer has no null)
    final: dict[str, float]  # final loss and samples per second, as compare's row has them
    tags: dict[str, str]  # compare's verdict, its max parameter difference and the partner it was checked against
    points: list[Point] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status not in UNFINISHED

    @property
    def verdict_line(self) -> str:
        """Compare's verdict in one line, e.g. `equivalent to 1x64 (max param diff 3.1e-08)`; no verdict for a run
        compare checks against nothing (a single-process run, or one without a single-process partner)."""
        tags = self.tags
        if "verdict" not in tags:
            return "no verdict (no single-process run to check it against)"
        partner = f" to {tags['equivalent_to']}" if "equivalent_to" in tags else ""
        diff = f" (max param diff {tags['max_param_diff']})" if "max_param_diff" in tags else ""
        return f"{tags['verdict']}{partner}{diff}"


def export_runs(
    paths: Sequence[Path],
    *,
    include_all: bool = False,
    baseline: str | None = None,
    param_diff: ParamDiffFn | None = None,
    finish_lost: FinishLost | None = None,
) -> tuple[list[ExportRun], list[str]]:
    """The runs under `paths` (as compare takes them) and the warnings about what was skipped, each said once
    (a truncated metrics line is read by compare and again here: one warning)."""
    records, warnings = collect_runs(paths, include_all, finish_lost=finish_lost)
    stream = ComparisonStream(records, baseline=baseline, param_diff=param_diff, notes=False)
    runs = list(_runs(stream, warnings))
    return runs, list(dict.fromkeys([*warnings, *stream.warnings]))


def _runs(stream: ComparisonStream, warnings: list[str]) -> Iterator[ExportRun]:
    baseline = stream.head.baseline.label
    for row in stream.rows():
        yield _export_run(row, None if row.is_baseline else baseline, warnings)


def _export_run(row: ComparisonRow, baseline: str | None, warnings: list[str]) -> ExportRun:
    compared = row.run.record
    record = compared.record
    data = row.as_json()
    plan = record.plan
    started = epoch_seconds(record.started_at)
    if started is None:  # no start recorded: the record's own file time, never the export's clock
        started = (compared.run_dir / "run.json").stat().st_mtime
    read = read_metrics(compared.metrics_path)
    warnings += [*read.skipped, *unplaced_rows(compared.metrics_path, read.rows, compared.global_batch_size)]
    params: dict[str, Value | None] = {
        "nproc_per_node": plan.get("nproc_per_node"),
        "nnodes": plan.get("nnodes"),
        "world_size": data["world_size"],
        "per_device_batch_size": data["per_device_batch_size"],
        "grad_accum_steps": data["grad_accum_steps"],
        "global_batch_size": data["global_batch_size"],
        "lr": data["lr"],
        "lr_rule": plan.get("scaling"),
        "seed": plan.get("seed"),
        "status": compared.status,
    }
    final = {"final_loss": row.run.metrics.final_loss, "final_samples_per_s": row.samples_per_s}
    tags = {
        "verdict": data["verdict"],
        "max_param_diff": data["max_param_diff"],
        "equivalent_to": data["equivalent_to"],
        "baseline": baseline,
    }
    return ExportRun(
        run_dir=compared.run_dir,
        run_id=compared.run_id,
        name=compared.name,
        group=_group(record.experiment_file, compared.run_dir),
        status=compared.status,
        params={key: value for key, value in params.items() if isinstance(value, int | float | str | bool)},
        final={key: float(value) for key, value in final.items() if value is not None},
        tags={key: _tag(value) for key, value in tags.items() if value is not None},
        points=points(read.rows, started_at=started, global_batch_size=compared.global_batch_size),
        started_at=started,
        ended_at=epoch_seconds(record.ended_at),
    )


def _group(experiment_file: str | None, run_dir: Path) -> str:
    """The experiment file's stem (`experiments` of experiments.toml), else the runs folder's name."""
    if experiment_file:
        return Path(experiment_file).stem
    return run_dir.parent.parent.name or "runs"


def _tag(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
