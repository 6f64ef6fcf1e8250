"""`ddpcli launch`'s summary table, findings and failure reports: from values the command has already read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.text import Text

from ddpcli.cli.render.format import MISSING, fmt_number, status_style
from ddpcli.cli.render.layout import Column, fitted_tables
from ddpcli.rundir.record import RunRecord

COLUMNS = (
    Column("run", "left"), Column("status", "left"), Column("wall time"), Column("final loss"),
    Column("run directory / failure", "left", wraps=True),
)  # fmt: skip


SEVERITY_STYLE = {"error": "red", "warning": "yellow"}


@dataclass(frozen=True)
class LaunchRow:
    """What the summary shows of one run (the command reads run.json and metrics.jsonl, not the renderer)."""

    name: str
    status: str
    wall_time_s: float | None
    final_loss: float | None
    run_dir: str  # as it should be shown (relative to the current directory when below it)
    failure: str | None = None  # "rank R exit C: error" of the first failed rank


def launch_summary_tables(rows: Sequence[LaunchRow], width: int) -> list[RenderableType]:
    """The runs of a sweep, their status, wall time and final loss; split by column when `width` is narrow."""
    cells = [_cells(row) for row in rows]
    return fitted_tables(COLUMNS, cells, width, title="Runs")


def _cells(row: LaunchRow) -> list[Text]:
    detail = row.run_dir + (f"\n{row.failure}" if row.failure else "")
    return [
        Text(row.name),
        Text(row.status, style=status_style(row.status)),
        Text(MISSING if row.wall_time_s is None else f"{row.wall_time_s:.1f}s"),
        Text(fmt_number(row.final_loss)),
        Text(detail),
    ]


def print_findings(console: Console, records: Sequence[RunRecord]) -> None:
    """What each run did that its plan did not say (ddpcli.diagnosis.findings), under the table."""
    for record in records:
        if not record.findings:
            continue
        console.print(f"[bold]{escape(record.name)}[/]: what the observer found", soft_wrap=True)
        for finding in record.findings:
            colour = SEVERITY_STYLE.get(finding.severity, "dim")
            console.print(f"  [{colour}]{finding.code}[/] {escape(finding.message)}", soft_wrap=True)


def print_failures(console: Console, runs: Sequence[tuple[RunRecord, str]]) -> None:
    """Each run that did not complete: its status, exit code, where its logs are (shown as given), and the first
    failed rank's error with the tail of its log."""
    for record, logs_dir in runs:
        if record.status == "completed":
            continue
        code = "unknown" if record.exit_code is None else record.exit_code  # torchrun's status lost with its parent
        console.print(
            f"[bold red]{escape(record.name)} {record.status}[/] (exit code {code}); logs in {escape(logs_dir)}",
            soft_wrap=True,
        )
        for failure in record.failed_ranks[:1]:
            console.print(
                f"  rank {failure.rank} exited {failure.exit_code}: {escape(failure.error or '')}", soft_wrap=True
            )
            if failure.log_tail:
                console.print(escape(_indent(failure.log_tail)), soft_wrap=True)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())
