"""`ddpcli launch`'s progress bar shows what happened (issue 15, item 5): it ends at the step count the run reached,
not the plan's, and its clock stops when the run ends."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from ddpcli.cli.render.progress import RichReporter
from ddpcli.rundir.record import Observed, RunRecord


def spec(name: str, total_steps: int) -> SimpleNamespace:
    run = SimpleNamespace(name=name, plan=SimpleNamespace(total_steps=total_steps))
    return SimpleNamespace(run=run, run_dir=Path(f"runs/{name}/id"))


@pytest.mark.parametrize(("planned", "ran", "status"), [(64, 32, "completed"), (60, 61, "completed"), (8, 3, "failed")])
def test_the_bar_ends_at_the_observed_steps_and_its_clock_stops(planned: int, ran: int, status: str) -> None:
    reporter = RichReporter(Console(file=io.StringIO(), width=120))
    run = spec("run", planned)
    reporter.run_started(run)  # type: ignore[arg-type]
    reporter.metrics(run, [{"step": 1, "loss": 0.5, "samples": 8, "time": 0.1}])  # type: ignore[arg-type]
    record = RunRecord(run_id="id", name="run", status=status, observed=Observed(optimizer_steps=ran))
    reporter.run_ended(run, record)  # type: ignore[arg-type]
    [task] = reporter.progress.tasks
    assert (task.completed, task.total) == (ran, planned)
    assert task.stop_time is not None
    elapsed = task.elapsed
    assert task.elapsed == elapsed  # stopped: it no longer grows


def test_without_observations_the_bar_ends_at_the_last_metrics_step() -> None:
    reporter = RichReporter(Console(file=io.StringIO(), width=120))
    run = spec("run", 64)
    reporter.run_started(run)  # type: ignore[arg-type]
    reporter.metrics(run, [{"step": 12, "loss": 0.5}])  # type: ignore[arg-type]
    reporter.run_ended(run, RunRecord(run_id="id", name="run", status="interrupted"))  # type: ignore[arg-type]
    assert reporter.progress.tasks[0].completed == 12
