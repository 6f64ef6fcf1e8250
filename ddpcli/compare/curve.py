"""A loss curve: metric rows in increasing `samples` order, and what compare reads off it (the loss at a sample
count, evenly spaced points).

Two readers give the same answers. `LazyCurve` parses rows on demand from a file's bytes, found by binary search
over byte offsets: 100,000 rows are ordinary, and splitting that many lines alone costs more than everything else
compare does. `ParsedCurve` holds rows already parsed, the careful path for files the lazy reader does not trust.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Any, Protocol

from ddpcli.jsonvalues import finite_or_none, loads_json

Row = dict[str, Any]
Point = tuple[float, float | None]  # (samples, loss); loss None where the row has no finite loss


class Curve(Protocol):
    """Metric rows in strictly increasing `samples` order, reachable without parsing all of them."""

    def first(self) -> Row: ...

    def last(self) -> Row: ...

    def bracket(self, samples: float) -> tuple[Row | None, Row | None]:
        """(the row before, the first row with at least `samples`); None where there is no such row."""
        ...


class NeedsFullParse(Exception):
    """The fast reader met something it does not handle safely; parse every line instead."""


class ParsedCurve:
    """Rows already parsed (the careful path)."""

    def __init__(self, rows: list[Row]) -> None:
        self._rows = rows
        self._samples = [float(row["samples"]) for row in rows]

    def first(self) -> Row:
        return self._rows[0]

    def last(self) -> Row:
        return self._rows[-1]

    def bracket(self, samples: float) -> tuple[Row | None, Row | None]:
        index = bisect.bisect_left(self._samples, samples)
        before = self._rows[index - 1] if index > 0 else None
        return before, self._rows[index] if index < len(self._rows) else None


class LazyCurve:
    """Rows parsed on demand from the file's bytes: a binary search over byte offsets finds a sample count.

    Lines are never split: the row around a byte offset is found with rfind/find (about 20 rows parsed per
    search). Every row parsed is remembered, and `check_increasing` verifies at the end that they were in samples
    order (else the careful path takes over).
    """

    def __init__(self, data: bytes, end: int) -> None:
        self._data = data
        self._end = end  # rows live in data[:end]
        self._parsed: dict[int, Row] = {}  # by line start

    def _start(self, offset: int) -> int:
        return self._data.rfind(b"\n", 0, offset) + 1

    def _stop(self, start: int) -> int:
        stop = self._data.find(b"\n", start, self._end)
        return self._end if stop < 0 else stop

    def _row(self, start: int) -> Row:
        cached = self._parsed.get(start)
        if cached is not None:
            return cached
        try:
            row = loads_json(self._data[start : self._stop(start)])
        except ValueError:
            raise NeedsFullParse from None
        if not isinstance(row, dict) or finite_or_none(row.get("samples")) is None:
            raise NeedsFullParse
        self._parsed[start] = row
        return row

    def first(self) -> Row:
        return self._row(0)

    def last(self) -> Row:
        return self._row(self._start(self._end - 1))

    def bracket(self, samples: float) -> tuple[Row | None, Row | None]:
        low, high = 0, self._end  # the answer starts in [low, high]; both are line starts (or the end)
        while low < high:
            start = self._start((low + high) // 2)
            if float(self._row(start)["samples"]) < samples:
                low = self._stop(start) + 1
            else:
                high = start
        before = self._row(self._start(low - 1)) if low > 0 else None
        return before, self._row(low) if low < self._end else None

    def check_increasing(self) -> None:
        """Every row looked at must be in samples order; a restart that was not recorded shows up here."""
        samples = [float(self._parsed[start]["samples"]) for start in sorted(self._parsed)]
        if any(later <= earlier for earlier, later in itertools.pairwise(samples)):
            raise NeedsFullParse


def loss_at(curve: Curve, samples: float) -> float | None:
    """The loss at a sample count, linearly interpolated between the rows around it (None outside the curve)."""
    before, row = curve.bracket(samples)
    if row is None:
        return None  # the run did not get that far
    if float(row["samples"]) == samples:
        return finite_or_none(row.get("loss"))
    if before is None:
        return None  # before its first logged row
    return _lerp(samples, _point(before), _point(row))


def resample(curve: Curve, points: int) -> list[Point]:
    """(samples, loss) of the first row at or after each of `points` evenly spaced sample counts, first to last.

    Spacing by samples, not by row, lines curves of different batch sizes up the way the plot does.
    """
    if points <= 0:
        return []
    low, high = float(curve.first()["samples"]), float(curve.last()["samples"])
    chosen: dict[float, float | None] = {}
    for i in range(points):
        target = high if points == 1 else low + (high - low) * i / (points - 1)
        row = curve.bracket(target)[1]
        if row is not None:
            x, y = _point(row)
            chosen[x] = y
    return list(chosen.items())


def rows_at(curve: Curve, points: int) -> list[Row]:
    """The first row at or after each of `points` evenly spaced sample counts, first to last, each row once: every
    row of a curve of up to about `points` rows."""
    if points <= 0:
        return []
    low, high = float(curve.first()["samples"]), float(curve.last()["samples"])
    chosen: dict[float, Row] = {}
    for i in range(points):
        target = high if points == 1 else low + (high - low) * i / (points - 1)
        row = curve.bracket(target)[1]
        if row is not None:
            chosen.setdefault(float(row["samples"]), row)
    return list(chosen.values())


def _point(row: Row) -> Point:
    return float(row["samples"]), finite_or_none(row.get("loss"))


def _lerp(x: float, left: Point, right: Point) -> float | None:
    (x0, y0), (x1, y1) = left, right
    if y0 is None or y1 is None:
        return None
    t = (x - x0) / (x1 - x0)
    value = y0 + (y1 - y0) * t
    if not math.isfinite(value):  # y1 - y0 overflowed (losses near the float limit): the weighted form does not
        value = y0 * (1 - t) + y1 * t
    return finite_or_none(value)
