"""Rich renderings shared by the commands. Pure formatting: every number comes from the pure modules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ddpcli.core.outlook import BatchOutlook, outlook_note
from ddpcli.core.planning import Plan, ResolvedRun
from ddpcli.core.records import METRICS_FILE, last_metrics_row
from ddpcli.host.sweep import RunResult


def fmt_number(value: float | int | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}"


def plan_table(
    plan: Plan, runs: Sequence[ResolvedRun], outlooks: Mapping[str, BatchOutlook | None] | None = None
) -> Table:
    table = Table(
        title=f"Plan: {plan.file}", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True
    )
    columns = ["run", "world", "batch", "global", "lr", "rule", "warmup", "steps/ep", "steps", "padded"]
    columns += ["B_crit", "x steps", "eff"]
    rows = [_plan_row(run) + _outlook_cells((outlooks or {}).get(run.name)) for run in runs]
    shown = [index for index, _ in enumerate(columns) if any(row[index] != "-" for row in rows)]
    for index in shown:
        justify = "left" if columns[index] in {"run", "rule"} else "right"
        table.add_column(columns[index], justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*(row[index] for index in shown))
    table.caption = (
        "world: processes in all (nodes x per node); batch: per process (x accumulation); "
        "padded: repeated samples per epoch (-N: dropped)"
    )
    if any(outlooks.values() if outlooks else ()):
        table.caption += (
            "\nB_crit: critical batch (the measured noise scale); x steps: predicted step speed-up over the "
            "baseline's global batch; eff: data efficiency E_min/E (McCandlish et al. 2018)"
        )
    table.caption_justify = "left"
    return table


def _outlook_cells(outlook: BatchOutlook | None) -> list[str]:
    if outlook is None:
        return ["-", "-", "-"]
    return [
        f"{outlook.critical_batch_size:.3g}",
        f"{outlook.predicted_step_speedup:.2f}x",
        f"{outlook.data_efficiency:.0%}",
    ]


def _plan_row(run: ResolvedRun) -> list[str]:
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


def print_notes(
    console: Console, runs: Sequence[ResolvedRun], outlooks: Mapping[str, BatchOutlook | None] | None = None
) -> None:
    for run in runs:
        outlook = (outlooks or {}).get(run.name)
        extra = outlook_note(run, outlook) if outlook else None
        print_bullets(console, run.name, [*run.notes, *([extra] if extra else [])])


def print_bullets(console: Console, title: str, notes: Sequence[str]) -> None:
    """A bold title and its notes as an indented list; nothing at all when there are no notes."""
    if not notes:
        return
    console.print(Text(title, style="bold"))
    for note in notes:
        console.print(Padding(Text(f"- {note}"), (0, 0, 0, 2)))


def launch_summary_table(results: Sequence[RunResult]) -> Table:
    table = Table(title="Runs", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for header in ("run", "status", "wall time", "final loss", "run directory / failure"):
        table.add_column(header, justify="right" if header in {"wall time", "final loss"} else "left")
    for result in results:
        record = result.record
        last = last_metrics_row(result.spec.run_dir / METRICS_FILE)
        loss = last.get("loss") if last else None
        style = "green" if result.status == "completed" else "red"
        detail = display_path(result.spec.run_dir)
        if record.failed_ranks:
            failure = record.failed_ranks[0]
            detail += f"\nrank {failure.rank} exit {failure.exit_code}: {failure.error}"
        table.add_row(
            escape(result.spec.run.name),
            f"[{style}]{result.status}[/]",
            f"{record.wall_time_s:.1f}s" if record.wall_time_s is not None else "-",
            fmt_number(loss) if isinstance(loss, float) else "-",
            escape(detail),
        )
    return table


def display_path(path: Path) -> str:
    """Relative to the current directory when below it: shorter, and what the user typed."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
