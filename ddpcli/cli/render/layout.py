"""Tables that fit a width without cutting a value, and bullet lists.

Rich squeezes a table wider than the console by shrinking its columns and ending the values that no longer fit
with '…': `0.…` for a learning rate, `sampl…` for a header, `1x1…` for a run name. A number cut that way is a
number that did not happen, so `fitted_tables` never lets Rich squeeze a value: it splits the columns into as
many tables as the width needs, each keyed by the first column (the run), and only free text (verdicts, paths,
failures) wraps, at spaces.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, JustifyMethod, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

# Measures renderables only; never printed to. Its width is no limit: a value's natural width is wanted.
_MEASURE = Console(file=io.StringIO(), width=100_000, color_system=None, highlight=False)
Cell = RenderableType


@dataclass(frozen=True)
class Column:
    """A column: its header, its alignment, whether its values are free text that may wrap at spaces, and the
    section it belongs to (columns of one section stay together when a narrow console splits the table)."""

    header: str
    justify: JustifyMethod = "right"
    wraps: bool = False  # numbers and names never wrap: they move to another table instead
    section: str = ""


def fitted_tables(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    width: int,
    *,
    title: str | Text | None = None,
    caption: str | None = None,
) -> list[RenderableType]:
    """One table when every column fits in `width`, else several, each repeating column 0 (the key).

    Consecutive columns of one `section` belong together: a split happens between sections when that needs no
    more tables than packing the columns regardless of sections. The title goes on
    the first table; the caption under one table, or after several as text as wide as the console. Where even
    the key and one column do not fit, their values fold onto several lines (never '…').
    """
    sections = _sections(columns)
    everything = [index for section in sections for index in section]
    measured = Measured.of(columns, rows)
    if _fits(columns, measured, everything, width):
        groups = [everything]
    else:
        by_section = [group for section in sections for group in _pack(columns, measured, section, width)]
        plain = _pack(columns, measured, everything, width)
        groups = by_section if len(by_section) <= len(plain) else plain
    tables = [
        _table(columns, rows, measured.widest, group, fold=not _fits(columns, measured, group, width))
        for group in groups
    ]
    tables[0].title = title
    if caption is None:
        return list(tables)
    text = Text(caption, style="table.caption")  # Text: a path in it is not markup
    if len(tables) == 1:
        tables[0].caption = text
        return list(tables)
    return [*tables, text]


def _sections(columns: Sequence[Column]) -> list[list[int]]:
    """Indices of the columns after the key, grouped by runs of the same `section`."""
    sections: list[list[int]] = []
    for index in range(1, len(columns)):
        if index == 1 or columns[index].section != columns[index - 1].section:
            sections.append([])
        sections[-1].append(index)
    return sections


@dataclass(frozen=True)
class Measured:
    """Every cell measured once. A table's width depends on each column's widest value and widest unbreakable
    word only, so two rows of those cells measure as the whole table does: trying a grouping of columns then
    costs two rows, not all of them (500 runs took seconds when each try measured every cell again)."""

    widest: list[int]  # per column: the largest natural width among its header and values
    proxy_rows: list[list[Cell]]  # the cells with the largest maximum, and those with the largest minimum

    @classmethod
    def of(cls, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> Measured:
        widest, largest_max, largest_min = [], [], []
        for index, column in enumerate(columns):
            cells = [*(row[index] for row in rows)] or [column.header]
            sizes = [_size(cell) for cell in cells]
            widest.append(max(_size(column.header)[1], *(most for _, most in sizes)))
            largest_max.append(cells[max(range(len(cells)), key=lambda i: sizes[i][1])])
            largest_min.append(cells[max(range(len(cells)), key=lambda i: sizes[i][0])])
        return cls(widest, [largest_max, largest_min])


def _size(cell: Cell) -> tuple[int, int]:
    """(minimum, maximum) width of a cell as Rich measures it; a plain Text (most cells) without Rich's overhead,
    by the formula of Text.__rich_measure__ (the longest word, the longest line)."""
    if type(cell) is not Text:
        size = Measurement.get(_MEASURE, _MEASURE.options, cell)
        return size.minimum, size.maximum
    lines = cell.plain.splitlines()
    most = max(map(cell_len, lines)) if lines else 0
    words = cell.plain.split()
    least = max(map(cell_len, words)) if words else most
    return (0, 0) if most < 1 else (min(max(0, least), most), most)


def _pack(columns: Sequence[Column], measured: Measured, indices: Sequence[int], width: int) -> list[list[int]]:
    """Columns packed greedily, in order, into groups that fit with the key column."""
    groups: list[list[int]] = []
    current: list[int] = []
    for index in indices:
        if current and not _fits(columns, measured, [*current, index], width):
            groups.append(current)
            current = []
        current.append(index)
    return [*groups, current] if current else groups or [[]]


def _fits(columns: Sequence[Column], measured: Measured, group: Sequence[int], width: int) -> bool:
    """Whether the key and these columns fit: values whole, free text at its longest word."""
    table = _table(columns, measured.proxy_rows, measured.widest, group, fold=False)
    return Measurement.get(_MEASURE, _MEASURE.options, table).minimum <= width


def _table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    widest_of: Sequence[int],
    group: Sequence[int],
    *,
    fold: bool,
) -> Table:
    """The table of the key column and `group`. A value's column is as wide as its widest value (min_width), so
    the table's minimum width is the width at which no value is cut; `fold` lets values fold instead."""
    indices = [0, *group]
    table = Table(
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for index in indices:
        column = columns[index]
        widest = widest_of[index]
        table.add_column(
            column.header,
            justify=column.justify,
            no_wrap=not (column.wraps or fold),
            overflow="fold" if column.wraps or fold else "ellipsis",
            min_width=None if column.wraps or fold else widest,
        )
    for row in rows:
        table.add_row(*(row[index] for index in indices))
    return table


def print_bullets(console: Console, title: str, notes: Sequence[str]) -> None:
    """A bold title and its notes as an indented list; nothing at all when there are no notes."""
    if not notes:
        return
    console.print(Text(title, style="bold"))
    for note in notes:
        console.print(Padding(Text(f"- {note}"), (0, 0, 0, 2)))
