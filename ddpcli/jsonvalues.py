"""JSON as ddpcli reads and writes it: strict (no NaN), atomic, and every value from a file treated as untrusted.

Shared by every feature (run records, metrics, observation files, compare); no torch, no rich, no pydantic.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temp file in the same directory, then rename: a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_text(path) as handle:
        json.dump(data, handle, indent=2, allow_nan=False, default=str)
        handle.write("\n")


@contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """A text file written whole or not at all: a temp file beside `path`, renamed over it once complete.

    Created with mode 0666 less the umask, like any file `open` makes (tempfile's are always 0600, which hid the
    records of a group-shared runs directory from the group). Whatever fails while writing (a full disk, a value
    JSON cannot hold), the temp file is removed and the old file, if any, stays as it was.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            descriptor = os.open(temp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover
        raise FileExistsError(f"no free temp name beside {path}")
    try:
        with open(descriptor, "w", encoding="utf-8") as handle:
            yield handle
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


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


NON_FINITE = ("nan", "inf", "-inf")  # how strict JSON writers (ddpcli's own) spell the non-finite floats


def number_or_none(value: Any) -> float | None:
    """A JSON number as a float, NaN and inf included (a loss that blew up is not a missing loss); an integer beyond
    float range is the infinity of its sign."""
    if isinstance(value, str) and value in NON_FINITE:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


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


def strict_number(value: Any) -> Any:
    """Strict JSON has no NaN or Infinity: a non-finite number becomes the string "nan", "inf" or "-inf" (so a
    loss that blew up is never mistaken for a missing one); lists and objects are converted item by item."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [strict_number(item) for item in value]
    if isinstance(value, dict):
        return {key: strict_number(item) for key, item in value.items()}
    return value
