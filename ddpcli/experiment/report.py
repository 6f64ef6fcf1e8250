"""What `ddpcli plan` shows, assembled in one place: the runs selected, each run's outlook (with a known noise
scale) and prediction (with --predict-from), and every note (the plan's own, the rendezvous note, the prediction
line, the far-above-critical warning), so that the table, the notes under it and `--json` say the same things.
Pure: the command parses and renders, this decides what there is to render."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ddpcli.experiment.outlook import BatchOutlook, batch_outlook, outlook_note
from ddpcli.experiment.resolved import Plan, ResolvedRun

if TYPE_CHECKING:
    from ddpcli.prediction.predict import Prediction

NO_ENDPOINT_NOTE = (
    "No rendezvous endpoint is known yet, which planning does not need but a launch does: `ddpcli launch` takes "
    'rdzv_endpoint = "host:port" (and rdzv_id) in [cluster] or --rdzv-endpoint and --rdzv-id, the same on every '
    "node; `ddpcli slurm` fills both in from the job."
)


@dataclass(frozen=True)
class PlanReport:
    plan: Plan  # its runs' notes hold every note
    runs: list[ResolvedRun]  # the runs asked for (--only), baseline first
    outlooks: dict[str, BatchOutlook | None]
    predictions: dict[str, Prediction]

    def as_json(self) -> dict[str, Any]:
        """`{"file", "baseline", "experiments"}`: RUN objects, plus the outlook keys where the critical batch is
        known and, with --predict-from, the predicted_* keys and the model term by term."""

        def run_json(run: ResolvedRun) -> dict[str, Any]:
            data = run.plan.as_json()
            if run.name in self.predictions:
                data |= self.predictions[run.name].as_json()
            outlook = self.outlooks.get(run.name)
            return data | outlook.as_json() if outlook is not None else data

        return {
            "file": self.plan.file,
            "baseline": run_json(self.plan.baseline),
            "experiments": [run_json(run) for run in self.runs if run.name != self.plan.baseline.name],
        }


def plan_report(
    plan: Plan,
    only: list[str] | None = None,
    *,
    endpoint: str | None = None,
    critical_batch: float | None = None,
    predictions: dict[str, Prediction] | None = None,
) -> PlanReport:
    """The plan as `ddpcli plan` shows it. A multi-node run with no rendezvous endpoint yet gets a note (previewing
    32 x 8 needs no cluster; `launch` refuses such a run itself)."""
    predictions = predictions or {}
    outlooks = {run.name: batch_outlook(run, plan.baseline, critical_batch) for run in plan.runs}

    def noted(run: ResolvedRun) -> ResolvedRun:
        outlook, prediction = outlooks.get(run.name), predictions.get(run.name)
        extra = [
            *([NO_ENDPOINT_NOTE] if run.plan.is_multi_node and not endpoint else []),
            *([prediction.note()] if prediction is not None else []),
            *([note] if outlook is not None and (note := outlook_note(run, outlook)) else []),
        ]
        return replace(run, plan=replace(run.plan, notes=[*run.plan.notes, *extra])) if extra else run

    plan = replace(plan, baseline=noted(plan.baseline), experiments=[noted(run) for run in plan.experiments])
    return PlanReport(plan=plan, runs=plan.select(only), outlooks=outlooks, predictions=predictions)
