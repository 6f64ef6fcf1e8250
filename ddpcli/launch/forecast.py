"""`ddpcli launch` records, in each run's run.json, what the baseline predicted for it before it ran.

Once the plan's baseline has completed (in this sweep, or earlier: the newest completed run of its name under the
runs directory), every later run of the sweep gets `prediction` (ddpcli.prediction.predict's keys, the model term by
term) written before it starts, so `ddpcli compare` can score the prediction against what the run measured. A
prediction that cannot be made (the baseline was not observed, the probe failed) is left out, with its reason.

A later run of the sweep of the baseline's kind (same device, world size, processes per node and threads) with
another per-device batch measures a second point of the compute line (ddpcli.prediction.compute): once it
has completed, the runs that have not started yet are predicted again from both (`other_run_dirs`), so the fixed
cost per micro-batch comes from a measurement instead of being left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddpcli.errors import UserError
from ddpcli.experiment.resolved import Plan, ResolvedRun
from ddpcli.launch.argv import LaunchSpec
from ddpcli.launch.probe import predict_runs, read_baseline
from ddpcli.prediction.compute import same_kind
from ddpcli.prediction.predict import Baseline
from ddpcli.rundir.layout import RUN_FILE
from ddpcli.rundir.record import RunRecord


class Forecast:
    def __init__(self, plan: Plan, runs: Sequence[ResolvedRun], runs_dir: Path) -> None:
        self.baseline_name = plan.baseline.name
        self.runs = [run for run in runs if run.name != self.baseline_name]
        self.predictions: dict[str, dict[str, Any]] = {}
        self.reason: str | None = None
        self.started: set[str] = set()
        self.baseline: tuple[Path, Baseline] | None = None
        self.others: list[tuple[Path, Baseline]] = []  # later runs of the baseline's kind, other batches
        earlier = newest_completed(runs_dir / self.baseline_name)
        if earlier is not None and all(run.name != self.baseline_name for run in runs):
            self._read_baseline(earlier)

    def attach(self, record: RunRecord) -> RunRecord:
        self.started.add(record.name)
        found = self.predictions.get(record.name)
        return record.model_copy(update={"prediction": found}) if found is not None else record

    def ran(self, spec: LaunchSpec, record: RunRecord) -> None:
        if record.status != "completed":
            return
        if spec.run.name == self.baseline_name:
            self._read_baseline(spec.run_dir)
        elif self.baseline is not None and self._other_batch(spec.run_dir):
            self._predict()

    def _read_baseline(self, run_dir: Path) -> None:
        try:
            self.baseline = (run_dir, read_baseline(run_dir))
        except (UserError, OSError, ValueError) as error:
            self.reason = str(error)
            return
        self._predict()

    def _other_batch(self, run_dir: Path) -> bool:
        """Whether the completed run adds a point to the baseline's compute line (module docstring)."""
        assert self.baseline is not None
        try:
            found = read_baseline(run_dir)
        except (UserError, OSError, ValueError):
            return False
        known = {self.baseline[1].per_device_batch_size} | {other.per_device_batch_size for _, other in self.others}
        if not same_kind(found, self.baseline[1]) or found.per_device_batch_size in known:
            return False
        self.others.append((run_dir, found))
        return True

    def _predict(self) -> None:
        assert self.baseline is not None
        baseline_dir, baseline = self.baseline
        waiting = [run for run in self.runs if run.name not in self.started]
        try:
            predictions = predict_runs(baseline, waiting, others=[other for _, other in self.others])
        except (UserError, OSError, ValueError) as error:
            self.reason = str(error)
            return
        extra = {"other_run_dirs": [str(run_dir) for run_dir, _ in self.others]} if self.others else {}
        self.predictions |= {
            name: {**prediction.as_json(), "baseline_run_dir": str(baseline_dir), **extra}
            for name, prediction in predictions.items()
        }


def newest_completed(folder: Path) -> Path | None:
    """The newest run directory under `folder` whose run.json says completed."""
    if not folder.is_dir():
        return None
    for run_dir in sorted((path for path in folder.iterdir() if (path / RUN_FILE).is_file()), reverse=True):
        try:
            if RunRecord.load_tolerant(run_dir).status == "completed":
                return run_dir
        except (OSError, ValueError):
            continue
    return None
