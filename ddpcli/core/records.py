"""The run directory: what `launch` writes and `compare` reads. No torch, no rich.

Layout of one run (`<runs_dir>/<name>/<run_id>/`):
  run.json          the record: plan, command, status, timings, failures, observed (ddpcli.core.run_record)
  metrics.jsonl     one JSON object per logged optimizer step, from rank 0 (at least step, samples, time, loss, lr)
  logs/             torchrun's per-rank stdout/stderr (and error.json files)
  final_params.pt   rank 0's final model state_dict on CPU
"""

from __future__ import annotations

import json
import math
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ddpcli.core.errors import UserError

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
PARAMS_FILE = "final_params.pt"
CHECKPOINT_FILE = "checkpoint.pt"  # written by runtime.Context.checkpoint, read by resume
LOGS_DIR = "logs"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def new_run_id(now: datetime | None = None) -> str:
    """`20261130T120501Z-3fa2c1`: sorts by start time; the random part keeps two launches apart."""
    stamp = (now or utc_now()).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temp file in the same directory, then rename: a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False, encoding="utf-8"
    ) as handle:
        json.dump(data, handle, indent=2, allow_nan=False, default=str)
        handle.write("\n")
        temp = Path(handle.name)
    os.replace(temp, path)


def loads_json(text: str | bytes) -> Any:
    """json.loads whose every failure on bad input is a ValueError with a one-line message.

    json already raises ValueError for bad syntax and for bytes that are not UTF-8 (UnicodeDecodeError is one);
    but nesting deeper than the parser's recursion limit (`[[[...]]]`) raises RecursionError, which readers that
    catch ValueError would let through as a traceback.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 (byte {error.start})") from None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file; OSError when it cannot be read, ValueError when it is not one JSON object."""
    data = loads_json(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def parse_row(line: str | bytes) -> dict[str, Any] | None:
    """One metrics line as a dict; None for a line that is not a complete JSON object (a crash mid-write, a
    damaged byte, anything else)."""
    try:
        row = loads_json(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


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
        raise UserError(f"--noise-scale-from {run_dir}: not a run directory (no run.json)")
    value = final_noise_scale(run_dir)
    if value is None:
        raise UserError(
            f"--noise-scale-from {run_dir}: its metrics.jsonl has no noise_scale; launch it with noise_scale = true "
            "(at world size 1 it also needs grad_accum_steps >= 2)"
        )
    if value <= 0:  # the runtime logs only positive values; a hand-edited or foreign file may hold anything
        raise UserError(
            f"--noise-scale-from {run_dir}: its last noise_scale is {value:g}, not a positive number, so it names no "
            "critical batch"
        )
    return value


def is_run_dir(path: Path) -> bool:
    return (path / RUN_FILE).is_file()


def find_run_dirs(root: Path) -> Iterator[Path]:
    """Run directories under a runs root (`<root>/<name>/<run_id>/`), or the root itself if it is one."""
    if is_run_dir(root):
        yield root
        return
    for candidate in sorted(root.glob(f"*/*/{RUN_FILE}")):
        yield candidate.parent


def finite_or_none(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else, an integer beyond float range included (JSON allows
    a 400-digit integer, and float() of it overflows)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:
        return None


def text_or_none(value: Any) -> str | None:
    """A non-empty JSON string, else None."""
    return value if isinstance(value, str) and value else None


def whole_or_none(value: Any) -> int | None:
    """A JSON number that is whole (8 or 8.0) as an exact int; None for anything else, fractions included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


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


def strict_number(value: Any) -> Any:
    """Strict JSON has no NaN or Infinity: a non-finite number becomes the string "nan", "inf" or "-inf" (so a
    loss that blew up is never mistaken for a missing one); lists are converted item by item."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [strict_number(item) for item in value]
    return value
