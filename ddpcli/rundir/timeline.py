"""One kind of row of a rank file (`step` or `log`) by step number, read from the file when asked, never held.

A rank file holds one row per optimizer step: a million steps are a million rows, and holding them as dicts took
~1.45 KB each in the launcher (435 MB for 300k steps). Reading a rank file therefore keeps only where each run
of consecutive steps starts (its byte offset, first step, stride and length): a few numbers per process attempt.
`Timeline` is a read-only Mapping of step -> row over those runs that reads rows back from the file in step
order, streaming; sequential lookups (`timeline[step]` for rising steps) advance one open cursor.

Which rows count follows the merge's rules (ddpcli.rundir.merge): for a step seen twice the later row wins, and a
`resume` row at step k drops the rows of steps after k written before it. Resolved once, from the end backwards:
a row is kept when no later row has its step and no later resume is below it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.jsonvalues import parse_row, whole_or_none

# Beyond this many pieces (a file whose step numbers jump about: no observer writes one) the rows are read into a
# dict once: correct, just not streaming.
MAX_PIECES = 256


@dataclass
class Run:
    """Rows of one kind whose steps go first, first + stride, ...: `count` of them, the first at byte `offset`."""

    offset: int
    first: int
    order: int  # position among the file's runs and resumes
    stride: int = 0
    count: int = 1
    closed: bool = False

    def step(self, index: int) -> int:
        return self.first + index * self.stride

    @property
    def last(self) -> int:
        return self.step(self.count - 1)

    def extend(self, step: int) -> bool:
        """Take `step` as this run's next row if it continues the progression."""
        if self.count == 1 and step > self.first:
            self.stride = step - self.first
        elif self.stride <= 0 or step != self.first + self.count * self.stride:
            return False
        self.count += 1
        return True

    def holds(self, step: int) -> bool:
        if self.stride == 0:
            return step == self.first
        return self.first <= step <= self.last and (step - self.first) % self.stride == 0


@dataclass(frozen=True)
class Piece:
    """Rows `start` to `stop` (exclusive) of a run: the ones that count."""

    run: Run
    start: int
    stop: int

    @property
    def first(self) -> int:
        return self.run.step(self.start)

    @property
    def last(self) -> int:
        return self.run.step(self.stop - 1)

    def steps(self) -> Iterator[int]:
        return (self.run.step(index) for index in range(self.start, self.stop))


@dataclass
class TimelineBuilder:
    """Collects the runs of one kind while the rank file is read once, front to back."""

    kind: str
    runs: list[Run] = field(default_factory=list)

    def add(self, step: int, offset: int, order: int) -> bool:
        """Record a row; True when it started a new run (the caller's `order` counter moves on)."""
        if self.runs and not self.runs[-1].closed and self.runs[-1].extend(step):
            return False
        self.runs.append(Run(offset, step, order))
        return True

    def close(self) -> None:
        """A resume row: the next row starts a run of its own (a run never spans a resume)."""
        if self.runs:
            self.runs[-1].closed = True

    def build(self, path: Path, resumes: list[tuple[int, int]]) -> Timeline:
        return Timeline(path, self.kind, resolve(self.runs, resumes))


def resolve(runs: list[Run], resumes: list[tuple[int, int]]) -> list[Piece]:
    """The pieces of `runs` that count, given the (order, step) of every resume row: from the last run back, a
    row counts unless a later run holds its step or a later resume is below it."""
    events = sorted([(run.order, 1, run) for run in runs] + [(order, 0, step) for order, step in resumes],
                    key=lambda event: event[:2])  # fmt: skip
    later: list[Run] = []
    ceiling = math.inf
    pieces: list[Piece] = []
    for _, is_run, item in reversed(events):
        if not is_run:
            ceiling = min(ceiling, item)
            continue
        pieces += _surviving(item, later, ceiling)
        later.append(item)
    return sorted(pieces, key=lambda piece: piece.first)


def _surviving(run: Run, later: list[Run], ceiling: float) -> list[Piece]:
    if run.last <= ceiling:
        limit = run.count
    elif run.first > ceiling:
        limit = 0
    else:  # stride > 0 here: the steps rise
        limit = int((ceiling - run.first) // run.stride) + 1
    if not later:
        return [Piece(run, 0, limit)] if limit else []
    pieces, start = [], None
    for index in range(limit):
        overwritten = any(other.holds(run.step(index)) for other in later)
        if overwritten and start is not None:
            pieces.append(Piece(run, start, index))
            start = None
        elif not overwritten and start is None:
            start = index
    if start is not None:
        pieces.append(Piece(run, start, limit))
    return pieces


class Timeline(Mapping[int, dict[str, Any]]):
    """step -> row of one kind, read from the rank file on demand (see the module docstring)."""

    def __init__(self, path: Path, kind: str, pieces: list[Piece]) -> None:
        self.path = path
        self.kind = kind
        self.pieces = pieces
        self._rows: dict[int, dict[str, Any]] | None = None  # only past MAX_PIECES
        self._cursor: Iterator[tuple[int, dict[str, Any]]] | None = None
        self._cursor_step: int | None = None
        self._cursor_row: dict[str, Any] | None = None
        self._disjoint = all(a.last < b.first for a, b in itertools.pairwise(pieces))
        self._length = sum(piece.stop - piece.start for piece in pieces)

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[int]:
        """The steps, rising, without reading the file."""
        if self._disjoint:
            return itertools.chain.from_iterable(piece.steps() for piece in self.pieces)
        return heapq.merge(*(piece.steps() for piece in self.pieces))

    def __contains__(self, step: object) -> bool:
        return isinstance(step, int) and any(
            piece.first <= step <= piece.last and piece.run.holds(step) for piece in self.pieces
        )

    def items(self) -> Iterator[tuple[int, dict[str, Any]]]:  # type: ignore[override]
        """(step, row), rising, streamed from the file."""
        if len(self.pieces) > MAX_PIECES or not self._disjoint:
            return iter(sorted(self._all_rows().items()))
        return itertools.chain.from_iterable(self._read(piece) for piece in self.pieces)

    def values(self) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        return (row for _, row in self.items())

    def __getitem__(self, step: int) -> dict[str, Any]:
        if step not in self:
            raise KeyError(step)
        if len(self.pieces) > MAX_PIECES or not self._disjoint:
            return self._all_rows()[step]
        if self._cursor is None or self._cursor_step is None or step < self._cursor_step:
            self._cursor = self.items()
            self._cursor_step, self._cursor_row = None, None
        while self._cursor_step is None or self._cursor_step < step:
            self._cursor_step, self._cursor_row = next(self._cursor)
        assert self._cursor_row is not None
        return self._cursor_row

    def _all_rows(self) -> dict[str, Any]:
        if self._rows is None:
            self._rows = {step: row for piece in self.pieces for step, row in self._read(piece)}
        return self._rows

    def _read(self, piece: Piece) -> Iterator[tuple[int, dict[str, Any]]]:
        with self.path.open("rb") as handle:
            handle.seek(piece.run.offset)
            for index, row in enumerate(_rows_of_kind(handle, self.kind)):
                if index >= piece.stop:
                    return
                if index >= piece.start:
                    yield piece.run.step(index), row


def _rows_of_kind(lines: Iterable[bytes], kind: str) -> Iterator[dict[str, Any]]:
    """The rows of `kind` with a whole step number: exactly the rows the first read counted."""
    for line in lines:
        row = parse_row(line) if line.strip() else None
        if row is not None and row.get("kind") == kind and whole_or_none(row.get("step")) is not None:
            yield row


def ascending(rows: Mapping[int, dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(step, row) by rising step, for a Timeline (streamed) or a plain dict (tests build those)."""
    return rows.items() if isinstance(rows, Timeline) else iter(sorted(rows.items()))  # type: ignore[return-value]
