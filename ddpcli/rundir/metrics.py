"""metrics.jsonl: one JSON object per optimizer step (step, samples, time, loss, lr, ...), merged from every rank's
observations after the run. Readers skip a damaged line and say so; the writer is atomic and strict JSON.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.errors import OptionError
from ddpcli.jsonvalues import finite_or_none, loads_json, parse_row, strict_number
from ddpcli.rundir.layout import METRICS_FILE, is_run_dir


def unreadable(path: Path, error: OSError) -> str:
    """The one-line warning for a file that exists but cannot be read (a directory, no permission)."""
    return f"{path}: cannot read it: {error.strerror or error}"


@dataclass
class MetricsRead:
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one message per unreadable line


def read_metrics(path: Path) -> MetricsRead:
    """All rows of a metrics.jsonl; a line that is not a JSON object (a crash mid-write) is skipped and reported."""
    result = MetricsRead()
    try:
        data = path.read_bytes()  # bytes: a line that is not UTF-8 is one bad line, not a bad file
    except FileNotFoundError:
        return result
    except OSError as error:
        result.skipped.append(unreadable(path, error))
        return result
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads_json(line)
        except ValueError:
            result.skipped.append(f"{path}:{number}: not a complete JSON line, skipped")
            continue
        if isinstance(row, dict):
            result.rows.append(row)
        else:
            result.skipped.append(f"{path}:{number}: not a JSON object, skipped")
    return result


def iter_new_metrics(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Rows appended since `offset` (bytes), and the new offset. A partial last line waits for the next call."""
    try:
        with path.open("rb") as handle:
            if handle.seek(0, os.SEEK_END) < offset:
                offset = 0  # rewritten shorter (a resume drops the rows after its checkpoint): read it afresh
            handle.seek(offset)
            chunk = handle.read()
    except OSError:
        return [], offset
    complete = chunk[: chunk.rfind(b"\n") + 1]
    rows = [row for row in map(parse_row, complete.splitlines()) if row is not None]
    return rows, offset + len(complete)


def last_metrics_row(path: Path, key: str | None = None, window: int = 1 << 20) -> dict[str, Any] | None:
    """The last complete row (holding `key`, if given), reading only the file's tail: metrics files can hold
    millions of rows, and the values wanted here (final loss, final noise scale) are at the end."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(handle.seek(0, os.SEEK_END) - window, 0))
            lines = handle.read().splitlines()
    except OSError:  # missing, a directory, no permission: no row (compare's metrics reader says why)
        return None
    for row in map(parse_row, reversed(lines)):
        if row is not None and (key is None or finite_or_none(row.get(key)) is not None):
            return row
    return None


def final_noise_scale(run_dir: Path) -> float | None:
    """The run's last logged gradient noise scale (an EMA, so the last value is the best), or None."""
    return noise_scale_reading(run_dir)[0]


def noise_scale_reading(run_dir: Path) -> tuple[float | None, str | None]:
    """(the last logged noise scale, None), or (None, why it is not used): a noise scale is a batch size, so a
    value <= 0 (a broken estimate, a damaged file) is no measurement."""
    path = run_dir / METRICS_FILE
    row = last_metrics_row(path, key="noise_scale")
    value = finite_or_none(row["noise_scale"]) if row else None
    if value is not None and value <= 0:
        return None, f"{path}: noise_scale {value:g} in its last measurement is not positive, not used"
    return value, None


def measured_noise_scale(run_dir: Path) -> float:
    """The last noise scale a finished run measured; an error the user can act on when there is none."""
    if not is_run_dir(run_dir):
        raise OptionError("noise_scale_from", run_dir, "not a run directory (no run.json)")
    value = final_noise_scale(run_dir)
    if value is None:
        raise OptionError(
            "noise_scale_from",
            run_dir,
            "its metrics.jsonl has no noise_scale; launch it with noise_scale = true "
            "(at world size 1 it also needs grad_accum_steps >= 2)",
        )
    if value <= 0:  # the runtime logs only positive values; a hand-edited or foreign file may hold anything
        raise OptionError(
            "noise_scale_from",
            run_dir,
            f"its last noise_scale is {value:g}, not a positive number, so it names no critical batch",
        )
    return value


def write_metrics(path: Path, rows: list[dict[str, Any]]) -> None:
    """metrics.jsonl as a whole (merged from every rank after the run), atomically, as strict JSON lines."""
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False, encoding="utf-8"
    ) as handle:
        handle.writelines(json.dumps(_strict_row(row), allow_nan=False) + "\n" for row in rows)
        temp = Path(handle.name)
    os.replace(temp, path)


def _strict_row(row: dict[str, Any]) -> dict[str, Any]:
    return {key: strict_number(value) for key, value in row.items()}
