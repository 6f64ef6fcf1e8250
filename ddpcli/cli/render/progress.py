"""`ddpcli launch`'s live progress: one bar per run, fed from rank 0's observations as they are flushed.

The bar shows what happened, not what was planned: it ends at the step count the run reached (32/64 when a script
stopped at 32, 61/60 when it ran one more), and its clock stops when the run ends, whatever its status.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ddpcli.jsonvalues import finite_or_none, whole_or_none
from ddpcli.launch.argv import LaunchSpec
from ddpcli.rundir.record import RunRecord


class RichReporter:
    """Steps done, the last loss (rank 0's) and samples/s, per run."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.tasks: dict[str, TaskID] = {}
        self.last_step: dict[str, int] = {}

    def run_started(self, spec: LaunchSpec) -> None:
        self.tasks[spec.run_dir.name] = self.progress.add_task(
            escape(spec.run.name), total=spec.run.plan.total_steps, info="starting torchrun"
        )

    def metrics(self, spec: LaunchSpec, rows: list[dict[str, Any]]) -> None:
        last = rows[-1]
        loss = finite_or_none(last.get("loss"))  # a row's values are untrusted: 10**400 is no float
        info = f"loss {loss:.4g}" if loss is not None else ""
        if isinstance(last.get("loss"), float) and loss is None:
            info = f"loss {last['loss']}"  # nan or inf: never hidden
        samples, seconds = finite_or_none(last.get("samples")), finite_or_none(last.get("time"))
        if samples is not None and seconds is not None and seconds > 0 and math.isfinite(samples / seconds):
            info += f"  {samples / seconds:,.0f} samples/s"
        step = whole_or_none(last.get("step"))
        if step is not None:
            self.last_step[spec.run_dir.name] = step
        self.progress.update(self.tasks[spec.run_dir.name], completed=step or 0, info=info)

    def run_ended(self, spec: LaunchSpec, record: RunRecord) -> None:
        key = spec.run_dir.name
        task = self.tasks[key]
        observed = record.observed.optimizer_steps if record.observed else None
        steps = observed if observed is not None else self.last_step.get(key, 0)
        colour = "green" if record.status == "completed" else "red"
        self.progress.update(task, completed=steps, info=f"[{colour}]{record.status}[/]")
        self.progress.stop_task(task)
