"""compare's tables and notes printed line by line, exactly as Rich prints them, when no cell needs laying out.

Rich lays a table out cell by cell (measure, wrap, justify, pad, crop: a few hundred function calls a cell), so
5,000 runs x 20 columns took seconds, and every cell had to be kept as a Text until the table was laid out. When
every value is one line and a table at its natural width fits the console, none of that can change a cell: a
column is as wide as its widest value (plus padding), a value is padded to it on the side its column justifies,
and the cells are joined by the box's spaces. This module does just that, from compact cells (plain text, style,
spans) kept per row, and yields Rich Segments, so the console still turns styles into escape codes (or drops
them on a pipe). The title, the header and the caption are few: Rich renders those (a table without rows, with
the same column widths). A narrow console's split into several tables is fitted_tables' own choice, made from
each column's two extreme cells (`fitted_fast_tables`). Anything else (a multi-line or tab-holding value, a
value that would wrap or fold) is not handled here: None, and the caller prints with Rich.

Generic (columns, Texts in, Segments out), so it sits with the renderers: ddpcli.compare stays free of Rich.
tests/test_fast_table.py checks, on random tables of compare's shape at random widths, that the output is
Rich's byte for byte, with and without colour."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice, pairwise

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ddpcli.cli.render.layout import Column, fitted_tables

StyleName = str | Style
Span = tuple[int, int, StyleName]
# A cell: its plain text when it has no style, else (plain, style, spans). Most cells are numbers without style.
Cell = str | tuple[str, StyleName, tuple[Span, ...]]
CHUNK_ROWS = 256  # rows handed to the console per print: its buffer holds this many rows' segments, not all
NULL = Style.null()


def compact(text: Text, strings: dict[str, str]) -> Cell | None:
    """The cell of a Text, or None when it is not one line of plain text Rich would print as it is. `strings`
    shares equal values between rows (a status, a batch size, `-`): a sweep repeats most of them."""
    plain = text.plain
    if text.justify is not None or text.overflow is not None or text.no_wrap is not None or text.end != "\n":
        return None
    if "\t" in plain or (plain and plain.splitlines() != [plain]):
        return None  # a tab expands, a line break (of any kind) makes two lines: Rich's job
    if not plain.isascii() and any(char.isspace() and char != " " for char in plain):
        return None  # a wide space (U+3000) at a line's end is measured and stripped by Rich's own rules
    plain = strings.setdefault(plain, plain)
    if not text.style and not text.spans:
        return plain
    return plain, text.style, tuple((span.start, span.end, span.style) for span in text.spans)


@dataclass(frozen=True)
class Header:
    """A column as the table shows it: header text and justification ("left" or "right")."""

    text: str
    justify: str = "right"


class FastTable:
    """A one-line-a-cell table with SIMPLE_HEAD box, no edge, padding (0, 1), collapsed padding: a table
    ddpcli.cli.render.layout builds when its columns fit. Shows the columns `indices` of `rows` (compact cells,
    shared with the other tables of a split); `widths` are every column's content widths (`content_widths`)."""

    def __init__(
        self,
        headers: Sequence[Header],
        rows: list[tuple[Cell, ...]],
        *,
        widths: Sequence[int],
        indices: Sequence[int] | None = None,
        title: Text | None = None,
        caption: Text | None = None,
    ) -> None:
        self.indices = list(range(len(headers))) if indices is None else list(indices)
        self.headers = [headers[index] for index in self.indices]
        self.widths = [widths[index] for index in self.indices]
        self.rows = rows
        self.title = title
        self.caption = caption

    @property
    def width(self) -> int:
        """Columns, their padding (two on the first, one on the others) and one space between two columns."""
        return sum(self.widths) + 2 * len(self.widths)

    def print_to(self, console: Console) -> None:
        """Print the table: Rich's head, our rows in chunks (the console buffers one chunk), Rich's caption."""
        console.print(_Head(self))
        rows = iter(self.rows)
        while chunk := list(islice(rows, CHUNK_ROWS)):
            console.print(_Body(self, chunk))
        if self.caption is not None:
            console.print(_Caption(self))

    def head_table(self) -> Table:
        """The table without rows: Rich renders its title, header and rule at our widths. min_width is the content
        width Rich clamps to after adding one of padding (the first column has two, hence one more)."""
        table = Table(
            title=self.title,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            padding=(0, 1),
            collapse_padding=True,
        )
        for index, (header, width) in enumerate(zip(self.headers, self.widths, strict=True)):
            table.add_column(header.text, justify=header.justify, no_wrap=True, min_width=width + (index == 0))  # type: ignore[arg-type]
        return table

    def row_segments(self, row: Sequence[Cell], console: Console, plain: bool) -> Iterator[Segment]:
        """One row's segments: left padding on the first cell, the value padded to its column, one space of
        padding and one of box between cells. `plain`: the console drops styles, so one segment is the line."""
        cells = [row[index] for index in self.indices]
        if plain:
            yield Segment(" " + "  ".join(self._plain_cells(cells)) + " ")
            yield Segment.line()
            return
        yield Segment(" ", NULL)
        last = len(cells) - 1
        for index, (cell, header, width) in enumerate(zip(cells, self.headers, self.widths, strict=True)):
            yield from _cell_segments(cell, header.justify, width, console)
            yield Segment(" ", NULL)
            if index != last:
                yield Segment(" ", NULL)
        yield Segment.line()

    def _plain_cells(self, cells: Sequence[Cell]) -> Iterator[str]:
        for cell, header, width in zip(cells, self.headers, self.widths, strict=True):
            text = cell if isinstance(cell, str) else cell[0]
            if header.justify == "right":
                text = text.rstrip()
                yield " " * (width - cell_len(text)) + text
            else:
                yield text + " " * (width - cell_len(text))


def content_widths(headers: Sequence[Header], rows: Iterable[Sequence[Cell]]) -> list[int]:
    """Each column's widest value or header line, in cells."""
    widths = [max(cell_len(line) for line in header.text.split("\n")) for header in headers]
    for row in rows:
        for index, cell in enumerate(row):
            size = cell_len(cell if isinstance(cell, str) else cell[0])
            if size > widths[index]:
                widths[index] = size
    return widths


def _justified(cell: Cell, justify: str, width: int) -> tuple[str, StyleName, tuple[Span, ...]]:
    """The cell padded to `width` as Rich justifies a line: left pads on the right; right strips trailing space
    (spans cut to the shorter text) and pads on the left (spans moved along)."""
    plain, style, spans = (cell, "", ()) if isinstance(cell, str) else cell
    if justify != "right":
        return plain + " " * (width - cell_len(plain)), style, spans
    stripped = plain.rstrip()
    if len(stripped) < len(plain):
        end = len(stripped)
        spans = tuple((start, min(stop, end), name) for start, stop, name in spans if start < end)
    shift = width - cell_len(stripped)
    return " " * shift + stripped, style, tuple((start + shift, stop + shift, name) for start, stop, name in spans)


def _cell_segments(cell: Cell, justify: str, width: int, console: Console) -> Iterator[Segment]:
    """A justified cell as Rich's Text renders a line: the line's style and its spans (in order) stacked on a
    null style, one segment for each stretch between two span ends; no style and no spans: one bare segment."""
    text, style, spans = _justified(cell, justify, width)
    layers = ([(0, len(text), style)] if style else []) + list(spans)
    if not layers:
        yield Segment(text)
        return
    styles = [NULL, *(console.get_style(name, default=NULL) for _, _, name in layers)]
    edges = sorted(
        [(0, False, 0), *((start, False, i) for i, (start, _, _) in enumerate(layers, 1)),
         *((stop, True, i) for i, (_, stop, _) in enumerate(layers, 1)), (len(text), True, 0)],
        key=lambda edge: (edge[0], edge[1]),
    )  # fmt: skip
    stack: list[int] = []
    for (offset, leaving, layer), (following, _, _) in pairwise(edges):
        if leaving:
            stack.remove(layer)
        else:
            stack.append(layer)
        if following > offset:
            yield Segment(text[offset:following], Style.combine(styles[layer] for layer in sorted(stack)))


class _Head:
    def __init__(self, table: FastTable) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from console.render(self.table.head_table(), options)


class _Body:
    def __init__(self, table: FastTable, rows: list[tuple[Cell, ...]]) -> None:
        self.table, self.rows = table, rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        plain = console.color_system is None and not console.record
        for row in self.rows:
            yield from self.table.row_segments(row, console, plain)


class _Caption:
    def __init__(self, table: FastTable) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """As Table renders its caption: at the table's width, left-justified, no highlighting."""
        table_options = options.update(width=self.table.width, highlight=False, height=None)
        yield from console.render(self.table.caption, table_options.update(justify="left"))


def compact_rows(rows: Iterable[Sequence[Text]], columns: int) -> list[tuple[Cell, ...]] | None:
    """Each row's Texts made compact as they come (only compact cells are kept); None when one cannot be."""
    strings: dict[str, str] = {}
    kept: list[tuple[Cell, ...]] = []
    for texts in rows:
        row = compact_row(texts, columns, strings)
        if row is None:
            return None
        kept.append(row)
    return kept or None


def compact_row(texts: Sequence[Text], columns: int, strings: dict[str, str]) -> tuple[Cell, ...] | None:
    """A row of `columns` Texts made compact (`compact`), or None when one cannot be."""
    row = tuple(compact(text, strings) for text in texts)
    if len(row) != columns or any(cell is None for cell in row):
        return None
    return row  # type: ignore[return-value]  # no None left


def fast_table(
    headers: Sequence[Header], rows: Iterable[Sequence[Text]], width: int, *, title: Text, caption: Text
) -> FastTable | None:
    """The one table of these rows if it can be printed without Rich laying it out at `width`, else None."""
    kept = compact_rows(rows, len(headers))
    if kept is None or any(header.justify not in ("left", "right") for header in headers):
        return None
    table = FastTable(headers, kept, widths=content_widths(headers, kept), title=title, caption=caption)
    return table if table.width <= width else None


def fitted_fast_tables(
    columns: Sequence[Column], rows: Iterable[Sequence[Text]], width: int, *, title: Text, caption: str
) -> list[FastTable | Text] | None:
    """What ddpcli.cli.render.layout.fitted_tables prints, as fast tables: the same split into tables keyed by
    the first column (chosen by fitted_tables itself, from each column's two extreme cells: all its choice
    depends on), then each table printed here. None when a table would need Rich: a value that must wrap or fold,
    or a cell that is not one plain line."""
    kept = compact_rows(rows, len(columns))
    return fitted_compact_tables(columns, kept, width, title=title, caption=caption) if kept is not None else None


def fitted_compact_tables(
    columns: Sequence[Column], kept: list[tuple[Cell, ...]], width: int, *, title: Text, caption: str
) -> list[FastTable | Text] | None:
    """fitted_fast_tables of rows already made compact (`compact`, as they streamed)."""
    headers = [Header(column.header, column.justify) for column in columns]
    if len({header.text for header in headers}) != len(headers):
        return None  # the split's tables are told apart by their headers
    if not kept or any(header.justify not in ("left", "right") for header in headers):
        return None
    widths, extremes = _measured(headers, kept)
    split = fitted_tables(columns, extremes, width, title=title, caption=caption)
    groups = [[index for index, header in enumerate(headers) if header.text in _headers(table)] for table in split
              if isinstance(table, Table)]  # fmt: skip
    tables = [
        FastTable(headers, kept, widths=widths, indices=group, title=title if number == 0 else None)
        for number, group in enumerate(groups)
    ]
    if any(table.width > width for table in tables):
        return None  # a value would wrap or fold: Rich's
    caption_text = Text(caption, style="table.caption")
    if len(tables) == 1:
        tables[0].caption = caption_text
        return list(tables)
    return [*tables, caption_text]  # as fitted_tables: after several tables, as wide as the console


def _headers(table: Table) -> set[str]:
    return {str(column.header) for column in table.columns}


def _measured(headers: Sequence[Header], rows: list[tuple[Cell, ...]]) -> tuple[list[int], list[list[Text]]]:
    """In one pass: the content widths (`content_widths`), and two rows of Texts, per column the value with the
    longest line and the one with the longest word: all that fitted_tables' choice of tables measures
    (layout.Measured)."""
    columns = len(headers)
    widest: list[tuple[int, str]] = [(-1, "")] * columns
    longest_word: list[tuple[int, str]] = [(-1, "")] * columns
    for row in rows:
        for index, cell in enumerate(row):
            plain = cell if isinstance(cell, str) else cell[0]
            most = cell_len(plain)
            if most > widest[index][0]:
                widest[index] = (most, plain)
            if most > longest_word[index][0]:  # a word is no longer than its line
                words = plain.split()
                least = 0 if most < 1 else min(max(map(cell_len, words)) if words else most, most)
                if least > longest_word[index][0]:
                    longest_word[index] = (least, plain)
    widths = [max(most, *(cell_len(line) for line in header.text.split("\n"))) for (most, _), header in
              zip(widest, headers, strict=True)]  # fmt: skip
    return widths, [[Text(plain) for _, plain in widest], [Text(plain) for _, plain in longest_word]]


def print_tables(console: Console, tables: Sequence[FastTable | Text]) -> None:
    for table in tables:
        if isinstance(table, FastTable):
            table.print_to(console)
        else:
            console.print(table)


def print_notes(console: Console, title: str, notes: Sequence[str]) -> None:
    """What ddpcli.cli.render.layout.print_bullets prints (a bold title, each note as `- note` indented by two),
    one line a note without Rich wrapping it when it fits; a note that wraps is printed by Rich."""
    if not notes:
        return
    console.print(Text(title, style="bold"))
    width = console.width
    lines: list[str] = []
    for note in notes:
        text = Text(f"- {note}")
        plain = text.plain
        if "\t" not in plain and plain.splitlines() == [plain] and cell_len(plain) <= width - 2:
            lines.append(f"  {plain}{' ' * (width - 2 - cell_len(plain))}")
            continue
        _print_lines(console, lines)
        console.print(Padding(text, (0, 0, 0, 2)))
    _print_lines(console, lines)


def _print_lines(console: Console, lines: list[str]) -> None:
    """Lines already laid out, as unstyled segments; empties `lines`."""
    if lines:
        console.print(_Lines(lines[:]))
        lines.clear()


class _Lines:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines:
            yield Segment(line, NULL)
            yield Segment.line()
