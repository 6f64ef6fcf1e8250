"""ddpcli.cli.render.fast_table prints exactly what Rich prints: random tables of compare's shape (its columns, cells
with styles and spans, unicode of every width, empty and long values) and random notes, without colour (compare
uses it where the output has none; with colour, a styled cell and its padding could be grouped otherwise);
and it declines (None) where Rich would lay the table out differently (too narrow, a line break, a tab)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text

from ddpcli.cli.render.compare import COLUMNS
from ddpcli.cli.render.fast_table import (
    CHUNK_ROWS,
    FastTable,
    Header,
    fast_table,
    fitted_fast_tables,
    print_notes,
    print_tables,
)
from ddpcli.cli.render.layout import print_bullets
from tests.tables import ALPHABET, LINE_BREAKS, cells, console, rich_output, title_and_caption

HEADERS = [Header(column.header, column.justify) for column in COLUMNS]
WIDE_SPACES = ["\u3000", "\u00a0", "\u2003"]  # Rich measures and strips them at a line's end by its own rules


def rows(count: st.SearchStrategy[int] = st.integers(1, 6)) -> st.SearchStrategy[list[list[Text]]]:
    row = st.lists(cells(), min_size=len(COLUMNS), max_size=len(COLUMNS))
    return count.flatmap(lambda n: st.lists(row, min_size=n, max_size=n))


def fast_output(table: FastTable, width: int, colour: bool) -> str:
    out = console(width, colour)
    table.print_to(out)
    return out.file.getvalue()  # type: ignore[attr-defined]


def fitted_output(tables: list[FastTable | Text], width: int, colour: bool) -> str:
    out = console(width, colour)
    print_tables(out, tables)
    return out.file.getvalue()  # type: ignore[attr-defined]


@settings(max_examples=25, deadline=None)
@given(
    table_rows=rows(),
    slack=st.integers(0, 40),
    colour=st.just(False),
    words=st.lists(ALPHABET, max_size=12).map("".join),
)
def test_a_table_that_fits_prints_as_rich_prints_it(
    table_rows: list[list[Text]], slack: int, colour: bool, words: str
) -> None:
    title, caption = title_and_caption(words)
    natural = fast_table(HEADERS, table_rows, 10_000, title=title, caption=Text(caption, style="table.caption"))
    assert natural is not None
    width = natural.width + slack
    table = fast_table(HEADERS, table_rows, width, title=title, caption=Text(caption, style="table.caption"))
    assert table is not None
    assert fast_output(table, width, colour) == rich_output(table_rows, width, colour, title, caption)


@settings(max_examples=25, deadline=None)
@given(table_rows=rows(), width=st.integers(20, 200), colour=st.just(False))
def test_tables_split_to_fit_print_as_rich_prints_them(table_rows: list[list[Text]], width: int, colour: bool) -> None:
    """At any width: where every table of fitted_tables' split fits one line a value, the same text; else None."""
    title, caption = title_and_caption("narrow")
    tables = fitted_fast_tables(COLUMNS, table_rows, width, title=title, caption=caption)
    if tables is not None:
        assert fitted_output(tables, width, colour) == rich_output(table_rows, width, colour, title, caption)


def test_a_narrow_console_splits_into_fast_tables() -> None:
    """80 columns (a pipe, a CI log): training, then speed and equivalence, each printed here."""
    table_rows = [[Text(f"{index}x{column}"[:6]) for column in range(len(COLUMNS))] for index in range(5)]
    title, caption = title_and_caption("narrow")
    tables = fitted_fast_tables(COLUMNS, table_rows, 80, title=title, caption=caption)
    assert tables is not None and sum(isinstance(table, FastTable) for table in tables) >= 2
    assert isinstance(tables[-1], Text)  # the caption, after the tables
    for colour in (False,):
        assert fitted_output(tables, 80, colour) == rich_output(table_rows, 80, colour, title, caption)


@settings(max_examples=20, deadline=None)
@given(table_rows=rows(), short=st.integers(1, 30))
def test_a_table_wider_than_the_console_is_left_to_rich(table_rows: list[list[Text]], short: int) -> None:
    title, caption = title_and_caption("x")
    natural = fast_table(HEADERS, table_rows, 10_000, title=title, caption=Text(caption))
    assert natural is not None
    assert fast_table(HEADERS, table_rows, natural.width - short, title=title, caption=Text(caption)) is None


@settings(max_examples=30, deadline=None)
@given(table_rows=rows(), where=st.integers(0, 10_000), brk=st.sampled_from(LINE_BREAKS))
def test_a_cell_of_several_lines_is_left_to_rich(table_rows: list[list[Text]], where: int, brk: str) -> None:
    row = table_rows[where % len(table_rows)]
    row[where % len(row)] = Text(f"a{brk}b")
    assert fast_table(HEADERS, table_rows, 10_000, title=Text("t"), caption=Text("c")) is None


@settings(max_examples=30, deadline=None)
@given(table_rows=rows(), where=st.integers(0, 10_000), space=st.sampled_from(WIDE_SPACES))
def test_a_cell_with_a_space_other_than_ascii_is_left_to_rich(
    table_rows: list[list[Text]], where: int, space: str
) -> None:
    """Found by seed 11: a cell ending in U+3000 printed it where Rich dropped it."""
    row = table_rows[where % len(table_rows)]
    row[where % len(row)] = Text(f"a{space}")
    assert fast_table(HEADERS, table_rows, 10_000, title=Text("t"), caption=Text("c")) is None


@settings(max_examples=2, deadline=None)
@given(table_rows=rows(), colour=st.just(False))
def test_rows_printed_in_chunks_are_one_table(table_rows: list[list[Text]], colour: bool) -> None:
    """More rows than one chunk (CHUNK_ROWS): the chunks join without a seam."""
    many = [[Text(f"run-{index}", style="bold" if index % 7 else ""), *row[1:]] for index in range(CHUNK_ROWS * 2 + 3)
            for row in table_rows[index % len(table_rows) :][:1]]  # fmt: skip
    title, caption = title_and_caption("many")
    table = fast_table(HEADERS, many, 10_000, title=title, caption=Text(caption, style="table.caption"))
    assert table is not None
    assert fast_output(table, table.width, colour) == rich_output(many, table.width, colour, title, caption)


@settings(max_examples=60, deadline=None)
@given(
    notes=st.lists(st.lists(ALPHABET | st.sampled_from(LINE_BREAKS), max_size=60).map("".join), max_size=6),
    width=st.integers(10, 120),
    colour=st.just(False),
)
def test_notes_print_as_print_bullets_prints_them(notes: list[str], width: int, colour: bool) -> None:
    fast, rich = console(width, colour), console(width, colour)
    print_notes(fast, "Notes", notes)
    print_bullets(rich, "Notes", notes)
    assert fast.file.getvalue() == rich.file.getvalue()  # type: ignore[attr-defined]


def test_cells_of_one_value_are_shared_between_rows() -> None:
    """Equal values are one string, so a sweep's repeated statuses and sizes cost one pointer a row."""
    table_rows = [[Text(str(1000 + 600)) for _ in COLUMNS] for _ in range(3)]
    table = fast_table(HEADERS, table_rows, 10_000, title=Text("t"), caption=Text("c"))
    assert table is not None
    assert len({id(cell) for row in table.rows for cell in row}) == 1
    assert table.rows[0][0] == "1600"
