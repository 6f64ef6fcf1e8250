"""Numbers and paths as every table shows them: one spelling per kind of value, `-` for a missing one."""

from __future__ import annotations

import math
from pathlib import Path

MISSING = "-"
STATUS_STYLE = {"completed": "green", "running": "cyan", "interrupted": "yellow"}  # anything else failed: red


def status_style(status: str) -> str:
    """One colour per run status, in every table (failed, timed_out and lost are red)."""
    return STATUS_STYLE.get(status, "red")


def fmt_number(value: float | int | None, digits: int = 4) -> str:
    """An int with thousands separators, a float to `digits` significant digits; `nan`/`inf` as they are."""
    if value is None:
        return MISSING
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}"


def fixed(value: float | None, digits: int) -> str:
    """A float with `digits` decimals and thousands separators (wall seconds, samples/s)."""
    if value is None:
        return MISSING
    return f"{value:,.{digits}f}" if math.isfinite(value) else f"{value}"


def percent(value: float | None) -> str:
    """A fraction as a percentage; one decimal below 10% so that small efficiencies do not all read 0%."""
    if value is None:
        return MISSING
    return f"{value:.0%}" if value >= 0.1 or not math.isfinite(value) else f"{value:.1%}"


def display_path(path: Path, cwd: Path | None = None) -> str:
    """Relative to `cwd` (default: the current directory) when below it: shorter, and what the user typed."""
    try:
        return str(path.relative_to(cwd or Path.cwd()))
    except ValueError:
        return str(path)
