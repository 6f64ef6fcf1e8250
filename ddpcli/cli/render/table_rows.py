"""A table's rows kept as they stream (ddpcli.compare.ComparisonStream), in the smallest form that prints them.

Plain output keeps compact cells (ddpcli.cli.render.fast_table: a few shared strings a row) while every row can
be printed by the fast path; the first row that cannot turns them all into Texts for Rich, as does a colour
terminal, where Rich lays the table out. A compact cell turned back into a Text is the Text it was made from.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Span, Text

from ddpcli.cli.render.fast_table import Cell, compact_row


class TableRows:
    def __init__(self, columns: int, *, fast: bool) -> None:
        self.columns = columns
        self.compact: list[tuple[Cell, ...]] | None = [] if fast else None
        self._texts: list[list[Text]] = []
        self._strings: dict[str, str] = {}

    def add(self, texts: Sequence[Text]) -> None:
        if self.compact is not None:
            row = compact_row(texts, self.columns, self._strings)
            if row is not None:
                self.compact.append(row)
                return
            self._texts = [[as_text(cell) for cell in kept] for kept in self.compact]
            self.compact = None
        self._texts.append(list(texts))

    def texts(self) -> list[list[Text]]:
        """Every row as Texts (Rich's)."""
        if self.compact is not None:
            return [[as_text(cell) for cell in kept] for kept in self.compact]
        return self._texts


def as_text(cell: Cell) -> Text:
    if isinstance(cell, str):
        return Text(cell)
    plain, style, spans = cell
    return Text(plain, style=style, spans=[Span(start, end, span_style) for start, end, span_style in spans])
