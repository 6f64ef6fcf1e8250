"""compare's step-time cells: a small stacked bar of where a run's step went, the prediction beside the measured
samples/s, and the peak memory. Data in (run.json's observed.time_breakdown, a PredictionScore), Rich Text out."""

from __future__ import annotations

from rich.text import Text

from ddpcli.cli.render.format import MISSING, fixed
from ddpcli.diagnosis.prediction import PredictionScore
from ddpcli.rundir.timing import TimeBreakdown

BAR_WIDTH = 10
# (part of the step, bar character, colour): readable without colour too
BAR_PARTS = (
    ("compute_s", "█", "green"),
    ("comm_s", "▓", "red"),
    ("data_s", "▒", "yellow"),
    ("optimizer_s", "░", "cyan"),
    ("other_s", "·", "dim"),
)
BAR_LEGEND = "step: " + ", ".join(f"{char} {name.removesuffix('_s')}" for name, char, _ in BAR_PARTS).replace(
    "comm", "exposed comm"
).replace("data", "data wait")


def step_bar(breakdown: TimeBreakdown | None) -> Text:
    """`███████▓▓▒ 93ms`: the median rank's step, each part's share in BAR_WIDTH cells (largest remainders)."""
    median = breakdown.median if breakdown is not None else None
    if median is None or not median.step_s:
        return Text(MISSING)
    parts = [max(getattr(median, name) or 0.0, 0.0) for name, _, _ in BAR_PARTS]
    total = sum(parts) or 1.0
    exact = [part / total * BAR_WIDTH for part in parts]
    cells = [int(value) for value in exact]
    for index in sorted(range(len(exact)), key=lambda i: exact[i] - cells[i], reverse=True)[: BAR_WIDTH - sum(cells)]:
        cells[index] += 1
    bar = Text()
    for (_, char, style), count in zip(BAR_PARTS, cells, strict=True):
        bar.append(char * count, style=style)
    bar.append(f" {median.step_s * 1000:.3g}ms")
    return bar


def prediction_cell(found: PredictionScore | None) -> Text:
    """`22,155 +1%`: the baseline's predicted samples/s and how far it was from the measured one."""
    if found is None:
        return Text(MISSING)
    text = Text(fixed(found.predicted_samples_per_s, 0))
    if found.error is not None:
        text.append(f" {found.error:+.0%}", style="red" if abs(found.error) > 0.25 else "")
    return text


def peak_memory_cell(breakdown: TimeBreakdown | None) -> Text:
    """The largest rank's peak (MiB): what the device with the most in it needed."""
    if breakdown is None:
        return Text(MISSING)
    peaks = [rank.peak_memory_bytes for rank in breakdown.ranks if rank.peak_memory_bytes is not None]
    return Text(f"{max(peaks) / 2**20:,.0f}M") if peaks else Text(MISSING)
