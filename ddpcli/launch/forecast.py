"""`ddpcli launch` records, in each run's run.json, what the baseline predicted for it before it ran.

Once the plan's baseline has completed (in this sweep, or earlier: the newest completed run of its name under the
runs directory), every later run of the sweep gets `prediction` (ddpcli.experiment.predict's keys, the model term by
term) written before it starts, so `ddpcli compare` can score the prediction against what the run measured. A
prediction that cannot be made (the baseline was not observed, the probe failed) is left out, with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddpcli.errors import UserError
from ddpcli.experiment.resolved import Plan, ResolvedRun
from ddpcli.launch.argv import LaunchSpec
from ddpcli.launch.probe import predict_runs, read_baseline
from ddpcli.rundir.layout import RUN_FILE
from ddpcli.rundir.record import RunRecord


class Forecast:
    def __init__(self, plan: Plan, runs: Sequence[ResolvedRun], runs_dir: Path) -> None:
        self.baseline_name = plan.baseline.name
        self.runs = [run for run in runs if run.name != self.baseline_name]
        self.predictions: dict[str, dict[str, Any]] = {}
        self.reason: str | None = None
        earlier = newest_completed(runs_dir / self.baseline_name)
        if earlier is not None and all(run.name != self.baseline_name for run in runs):
            self._predict(earlier)

    def attach(self, record: RunRecord) -> RunRecord:
        found = self.predictions.get(record.name)
        return record.model_copy(update={"prediction": found}) if found is not None else record

    def ran(self, spec: LaunchSpec, record: RunRecord) -> None:
        if spec.run.name == self.baseline_name and record.status == "completed":
            self._predict(spec.run_dir)

    def _predict(self, baseline_dir: Path) -> None:
        try:
            predictions = predict_runs(read_baseline(baseline_dir), self.runs)
        except (UserError, OSError, ValueError) as error:
            self.reason = str(error)
            return
        self.predictions = {
            name: {**prediction.as_json(), "baseline_run_dir": str(baseline_dir)}
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
