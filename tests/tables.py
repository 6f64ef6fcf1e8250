"""Hypothesis strategies for compare table cells, and Rich output of rows, for the fast-table tests."""

from __future__ import annotations

import io

from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from ddpcli.cli.render.compare import COLUMNS
from ddpcli.cli.render.layout import fitted_tables

STYLES = ["", "bold", "green", "red", "dim", "cyan", "yellow", "bold red", "italic"]


# Letters, digits, spaces (trailing ones too), wide CJK, emoji, combining marks, box and block characters.
ALPHABET = st.sampled_from([*"ab x1,.-%*~!@", "  ", "漢", "字", "😀", "é", "e\u0301", "█", "▓", "·", "─"])


LINE_BREAKS = ["\n", "\u2028", "\x1c", "\t"]


@st.composite
def cells(draw: st.DrawFn, long: bool = False) -> Text:
    """A Text as compare builds them: one style, sometimes appended pieces of their own styles (the step bar)."""
    pieces = draw(st.lists(st.lists(ALPHABET, max_size=40 if long else 8).map("".join), min_size=1, max_size=4))
    text = Text(pieces[0], style=draw(st.sampled_from(STYLES)))
    for piece in pieces[1:]:
        text.append(piece, style=draw(st.sampled_from(STYLES)))
    return text


def console(width: int, colour: bool) -> Console:
    return Console(
        file=io.StringIO(), width=width, color_system="truecolor" if colour else None, force_terminal=colour,
        highlight=False,
    )  # fmt: skip


def rich_output(table_rows: list[list[Text]], width: int, colour: bool, title: Text, caption: str) -> str:
    out = console(width, colour)
    for table in fitted_tables(COLUMNS, table_rows, width, title=title, caption=caption):
        out.print(table)
    return out.file.getvalue()  # type: ignore[attr-defined]


def title_and_caption(words: str) -> tuple[Text, str]:
    return Text(f"Compare: baseline {words} (smallest world size)"), f"* baseline. {words} " * 6
