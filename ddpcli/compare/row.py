"""One row of the comparison: a run measured against the baseline and its equivalence partner, as the table,
--json and --csv show it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ddpcli.compare.equivalence import ParamDiff
from ddpcli.compare.metrics import RunSummary
from ddpcli.diagnosis.prediction import PredictionScore, score
from ddpcli.diagnosis.run_checks import MARKED_CODES, per_model
from ddpcli.rundir.record import Finding

# The keys of one row of `ddpcli compare --json` and --csv, in order. People's scripts read these names.
ROW_KEYS = (
    "name", "status", "run_dir", "world_size", "per_device_batch_size", "grad_accum_steps", "global_batch_size",
    "lr", "steps", "samples_seen", "final_loss", "loss_at_baseline_samples", "wall_time_s", "samples_per_s",
    "speedup", "scaling_efficiency", "equivalent_to", "max_param_diff", "verdict", "noise_scale",
    "predicted_step_speedup", "data_efficiency", "predicted_samples_per_s", "prediction_error",
)  # fmt: skip
# Also in each --json row: where the batch numbers come from ("observed" | "plan"), whether the script followed its
# plan (null when it was not observed), and run.json's `observed` and `findings`.
JSON_KEYS = ("values_from", "plan_followed", "observed", "findings")
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 16


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
    # From the run's own gradient noise scale, with B_crit ~ B_simple (McCandlish et al. 2018): how many times
    # fewer steps its global batch needs than the baseline's, and the fraction of its samples not wasted.
    predicted_step_speedup: float | None = None
    data_efficiency: float | None = None
    compare_findings: tuple[Finding, ...] = ()  # found between runs (lr_schedule_mismatch), not in run.json
    speed_unreliable: bool = False  # the run or its baseline was starved of CPU (diagnosis.throughput): marked ?
    spark: str | None = None  # the sparkline, drawn before compare_runs drops the loss points (None: draw it)

    @property
    def findings(self) -> list[Finding]:
        """run.json's findings, then what compare found against the baseline or the equivalence partner."""
        return [*self.run.record.record.findings, *self.compare_findings]

    @property
    def marked(self) -> bool:
        """Shown with `!`: a finding says the run trained on something else than its numbers say."""
        return any(finding.code in MARKED_CODES for finding in self.findings)

    @property
    def samples_per_s(self) -> float | None:
        """Throughput of one model: a run whose processes each trained their own counts one process's samples."""
        return per_model(self.run.metrics.samples_per_s, self.run.record)

    @property
    def prediction(self) -> PredictionScore | None:
        """The baseline's prediction for this run (run.json `prediction`) against its measured samples/s."""
        return score(self.run.record.record, self.samples_per_s)

    @property
    def sparkline(self) -> str:
        return self.spark if self.spark is not None else sparkline(self.run.metrics.loss_points)

    def as_json(self) -> dict[str, Any]:
        """The row of --json and --csv: ROW_KEYS, null where a value does not apply, is unknown or is not finite (a
        NaN loss: strict JSON has no NaN). --json adds JSON_KEYS: what the observer saw and found (the CSV, flat,
        leaves them out)."""
        run, observed = self.run.record, self.run.record.record.observed
        row = {key: _strict(value) for key, value in self._values().items()}
        row["values_from"] = "observed" if run.observed_from_run else "plan"
        row["plan_followed"] = not run.plan_mismatches if run.observed_from_run else None
        row["observed"] = observed.model_dump(mode="json") if observed is not None else None
        row["findings"] = [finding.model_dump(mode="json", exclude_none=True) for finding in self.findings]
        return row

    def _values(self) -> dict[str, Any]:
        run, metrics = self.run.record, self.run.metrics
        return {
            "name": run.name,
            "status": run.status,
            "run_dir": run.resolved_dir,
            "world_size": run.world_size,
            "per_device_batch_size": run.per_device_batch_size,
            "grad_accum_steps": run.grad_accum_steps,
            "global_batch_size": run.global_batch_size,
            "lr": run.lr,
            "steps": metrics.steps,
            "samples_seen": metrics.samples_seen,
            "final_loss": metrics.final_loss,
            "loss_at_baseline_samples": self.loss_at_baseline_samples,
            "wall_time_s": run.record.wall_time_s,
            "samples_per_s": self.samples_per_s,
            "speedup": self.speedup,
            "scaling_efficiency": self.scaling_efficiency,
            "equivalent_to": self.partner_label,
            "max_param_diff": self.param_diff.max_abs_diff if self.param_diff else None,
            "verdict": self.verdict,
            "noise_scale": self.run.noise_scale,
            "predicted_step_speedup": self.predicted_step_speedup,
            "data_efficiency": self.data_efficiency,
            "predicted_samples_per_s": self.prediction.predicted_samples_per_s if self.prediction else None,
            "prediction_error": self.prediction.error if self.prediction else None,
        }


def json_list(items: Iterable[dict[str, Any]]) -> Iterator[str]:
    """`json.dumps(list(items), indent=2, allow_nan=False)` in pieces, one item at a time: --json of 5,000 runs
    holds one row's dict and text, not all of them. (Indented JSON has no blank line, and a string's newline is
    escaped, so indenting each of an item's lines by two is exactly how json nests it in the list.)"""
    first = True
    for item in items:
        text = json.dumps(item, indent=2, allow_nan=False).replace("\n", "\n  ")
        yield ("[\n  " if first else ",\n  ") + text
        first = False
    yield "[]" if first else "\n]"


def _strict(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def sparkline(values: Sequence[float | None], width: int = SPARK_WIDTH) -> str:
    """Unicode blocks for a loss curve: `values` averaged into `width` buckets, scaled to the run's own range.

    Finite values only (None and non-finite ones leave a gap). Means and ranges are taken of halves, so values
    near the float limit (1.5e308 and -1.5e308) do not overflow to inf and then NaN.
    """
    if not values:
        return ""
    width = min(width, len(values))
    buckets: list[float | None] = []
    isfinite = math.isfinite  # looked up once: 64 values a run, 5,000 runs a compare
    for i in range(width):
        chunk = [v for v in values[i * len(values) // width : (i + 1) * len(values) // width]
                 if v is not None and isfinite(v)]  # fmt: skip
        count = len(chunk)
        buckets.append(sum([v / count for v in chunk]) if chunk else None)
    finite = [value for value in buckets if value is not None]
    if not finite:
        return " " * width
    low, high = min(finite) / 2, max(finite) / 2
    top = len(SPARK_BLOCKS) - 1
    return "".join(
        " " if value is None else SPARK_BLOCKS[round((value / 2 - low) / (high - low) * top) if high > low else 0]
        for value in buckets
    )
