"""compare keeps its table's rows as they stream (ddpcli.cli.render.table_rows): compact while every row can be
printed by the fast table, Texts from the first that cannot. Either way Rich prints from them what it prints from
the rows as they were made, and a row that goes to Rich turns the compact ones before it back into their Texts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text

from ddpcli.cli.render.compare import COLUMNS
from ddpcli.cli.render.table_rows import TableRows
from tests.tables import LINE_BREAKS, cells, rich_output, title_and_caption


def rich_row() -> st.SearchStrategy[list[Text]]:
    """A row one of whose cells holds a line break or a tab: only Rich lays that out."""
    row = st.lists(cells(), min_size=len(COLUMNS), max_size=len(COLUMNS))
    return st.tuples(row, st.integers(0, len(COLUMNS) - 1), st.sampled_from(LINE_BREAKS)).map(
        lambda drawn: [*drawn[0][: drawn[1]], Text(f"a{drawn[2]}b"), *drawn[0][drawn[1] + 1 :]]
    )


@settings(max_examples=25, deadline=None)
@given(
    before=st.lists(st.lists(cells(), min_size=len(COLUMNS), max_size=len(COLUMNS)), max_size=4),
    odd=st.lists(rich_row(), max_size=1),
    after=st.lists(st.lists(cells(), min_size=len(COLUMNS), max_size=len(COLUMNS)), max_size=3),
    fast=st.booleans(),
    width=st.integers(40, 200),
)
def test_rich_prints_the_kept_rows_as_it_prints_the_rows_made(
    before: list[list[Text]], odd: list[list[Text]], after: list[list[Text]], fast: bool, width: int
) -> None:
    rows = [*before, *odd, *after]
    if not rows:
        return
    kept = TableRows(len(COLUMNS), fast=fast)
    for row in rows:
        kept.add(row)
    assert (kept.compact is not None) == (fast and not odd)
    title, caption = title_and_caption("kept")
    expected = rich_output(rows, width, False, title, caption)
    assert rich_output(kept.texts(), width, False, title, caption) == expected
    assert rich_output(kept.texts(), width, True, title, caption) == rich_output(rows, width, True, title, caption)
