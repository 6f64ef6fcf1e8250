"""`ddpcli plan`'s table and notes. Imports no host module and no other command's renderer: plan stays
instant (tests/test_startup.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console, RenderableType
from rich.markup import escape

from ddpcli.cli.render.format import MISSING, fmt_number
from ddpcli.cli.render.layout import Column, fitted_tables, print_bullets
from ddpcli.experiment.outlook import BatchOutlook
from ddpcli.experiment.resolved import Plan, ResolvedRun, RunPlan

COLUMNS = (
    Column("run", "left"),
    Column("world"),
    Column("batch"),
    Column("global"),
    Column("lr"),
    Column("rule", "left"),
    Column("warmup"),
    Column("steps/ep"),
    Column("steps"),
    Column("padded"),
    Column("B_crit", section="outlook"),
    Column("x steps", section="outlook"),
    Column("eff", section="outlook"),
)  # fmt: skip  (a narrow console shows the outlook columns in a table of their own)


def plan_tables(
    plan: Plan, runs: Sequence[ResolvedRun], outlooks: Mapping[str, BatchOutlook | None] | None, width: int
) -> list[RenderableType]:
    """The plan as one table, or several keyed by run when `width` is too narrow for every column.

    Columns where every run has `-` (the outlook without a noise scale) are left out.
    """
    rows = [_plan_row(run.plan) + _outlook_cells((outlooks or {}).get(run.name)) for run in runs]
    shown = [0, *(index for index in range(1, len(COLUMNS)) if any(row[index] != MISSING for row in rows))]
    columns = [COLUMNS[index] for index in shown]
    return fitted_tables(
        columns,
        [[row[index] for index in shown] for row in rows],
        width,
        title=f"Plan: {escape(str(plan.file))}",
        caption=_caption(outlooks),
    )


def _caption(outlooks: Mapping[str, BatchOutlook | None] | None) -> str:
    caption = (
        "world: processes in all (nodes x per node); batch: per process (x accumulation); "
        "padded: repeated samples per epoch (-N: dropped)"
    )
    if any(outlooks.values() if outlooks else ()):
        caption += (
            "\nB_crit: critical batch (the measured noise scale); x steps: predicted step speed-up over the "
            "baseline's global batch; eff: data efficiency E_min/E (McCandlish et al. 2018)"
        )
    return caption


def _outlook_cells(outlook: BatchOutlook | None) -> list[str]:
    if outlook is None:
        return [MISSING, MISSING, MISSING]
    return [
        f"{outlook.critical_batch_size:.3g}",
        f"{outlook.predicted_step_speedup:.2f}x",
        f"{outlook.data_efficiency:.0%}",
    ]


def _plan_row(run: RunPlan) -> list[str]:
    nodes = f"{run.min_nnodes}:{run.nnodes}" if run.is_elastic else str(run.nnodes)
    world = f"{run.world_size} ({nodes}x{run.nproc_per_node})" if run.is_multi_node else str(run.world_size)
    batch = str(run.per_device_batch_size)
    if run.grad_accum_steps > 1:
        batch += f"x{run.grad_accum_steps}acc"
    rule = run.scaling
    if rule in {"linear", "sqrt"} and run.batch_scale != 1:
        rule += f" x{run.batch_scale:g}"
    padded = fmt_number(run.padded_samples)
    if run.dropped_samples:
        padded = f"-{run.dropped_samples}"
    return [
        escape(run.name), world, batch, str(run.global_batch_size), f"{run.lr:.4g}", rule, str(run.warmup_steps),
        fmt_number(run.steps_per_epoch), fmt_number(run.total_steps), padded,
    ]  # fmt: skip


def print_notes(console: Console, runs: Sequence[ResolvedRun]) -> None:
    """Each run's notes under its name (ddpcli.experiment.report has put every note in them)."""
    for run in runs:
        print_bullets(console, run.name, run.plan.notes)
