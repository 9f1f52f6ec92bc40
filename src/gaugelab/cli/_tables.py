"""The library's tables as rich tables: numbers right-aligned in their column, a title or
caption longer than a narrow table printed at the console's width beside it."""

from __future__ import annotations

import numbers
import unicodedata

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table as RichTable
from rich.text import Text

from gaugelab.study.report.builder import Table, format_number


def printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``), so a name from a
    store or a file can never move the cursor, retitle the terminal or recolour what follows."""
    if text.isprintable():
        return text
    return "".join(
        repr(c)[1:-1] if unicodedata.category(c) == "Cc" else c for c in text
    )


def _is_number(cell: object) -> bool:
    """A cell that reads as a number: a real, a formatted one (``"3.62e-03"``, ``"0.979*"``
    with a footnote mark) or an empty cell (``None``, ``"—"``)."""
    if cell is None or isinstance(cell, bool):
        return cell is None
    if isinstance(cell, numbers.Real):
        return True
    text = str(cell).strip().rstrip("*")
    if text in ("", "—"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


class FittedTable:
    """A report table that fits the console it is printed on, without breaking a value.

    Title, headers and cells (through ``format_number``) are plain text, never rich markup.
    Columns of numbers are right-aligned, the others left-aligned; the cells of the first
    ``label_columns`` (rule, twin, …) are never wrapped. Headers and cells with spaces may wrap
    between words; rule names and numbers never break. When the columns do not fit side by
    side even so, the table is printed as several tables, each repeating the label columns
    (at least the first column) with as many others as fit.
    """

    def __init__(self, table: Table, *, label_columns: int = 0) -> None:
        self.table = table
        self.label_columns = label_columns
        self._cells = [[format_number(cell) for cell in row] for row in table.rows]
        self._numeric = [all(map(_is_number, column)) for column in zip(*table.rows, strict=True)]
        self._numeric = self._numeric or [False] * len(table.columns)

    def _widths(self, i: int) -> tuple[int, int]:
        """Column ``i``'s (narrowest, natural) width: its longest word and its longest text."""
        texts = [self.table.columns[i], *(row[i] for row in self._cells)]
        words = [w for text in texts for w in text.split()] or [""]
        label = i < self.label_columns  # a label cell is never wrapped, its header may be
        narrow = max(cell_len(w) for w in (texts[1:] if label else []) + words)
        return max(narrow, 1), max(max(cell_len(t) for t in texts), 1)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        n = len(self.table.columns)
        if n == 0:
            yield RichTable(title=self.table.title)
            return
        sizes = [self._widths(i) for i in range(n)]
        keep = list(range(min(max(self.label_columns, 1), n)))

        def fits(columns: list[int]) -> bool:
            return sum(sizes[i][0] for i in columns) + 3 * len(columns) + 1 <= width

        chunks: list[list[int]] = [[]]
        for i in range(len(keep), n):
            if chunks[-1] and not fits(keep + chunks[-1] + [i]):
                chunks.append([])
            chunks[-1].append(i)
        for k, chunk in enumerate(chunks):
            columns = keep + chunk
            title = self.table.title
            if k > 0 and title:
                title = f"{title} (continued)"
            caption = (self.table.caption or None) if k == len(chunks) - 1 else None
            widths = self._fit([sizes[i] for i in columns], width)
            # rich wraps a title and a caption to their table's width: over or under a narrow
            # table a long one would run down the screen a few words a line; it gets the
            # console's width instead
            bare = Measurement.get(console, options, self._render(columns, widths, None, None))
            wide = 4 * bare.maximum >= 3 * width  # wrapped to the table, it reads the same
            title_fits = wide or not title or cell_len(title) <= bare.maximum
            caption_fits = wide or not caption or cell_len(caption) <= bare.maximum
            if not title_fits:
                yield Text(title, style="table.title", justify="left")
            yield self._render(columns, widths, title if title_fits else None,
                               caption if caption_fits else None)  # fmt: skip
            if not caption_fits:
                yield Text(caption, style="table.caption", justify="left")

    @staticmethod
    def _fit(sizes: list[tuple[int, int]], width: int) -> list[int] | None:
        """Column widths that fill at most ``width``: the natural ones when they fit (None),
        else the widest columns narrowed first, never below their longest word."""
        widths = [natural for _, natural in sizes]
        excess = sum(widths) + 3 * len(widths) + 1 - width
        if excess <= 0:
            return None
        while excess > 0:
            room = [i for i, w in enumerate(widths) if w > sizes[i][0]]
            if not room:
                break
            widest = max(room, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
        return widths

    def _render(
        self,
        columns: list[int],
        widths: list[int] | None,
        title: str | None,
        caption: str | None,
    ) -> RichTable:
        out = RichTable(title=Text(printable(title)) if title else None,
                        caption=Text(printable(caption)) if caption else None)  # fmt: skip
        for j, i in enumerate(columns):
            label = i < self.label_columns  # its width holds its longest cell: never wrapped
            out.add_column(
                Text(printable(self.table.columns[i])),
                justify="right" if self._numeric[i] and not label else "left",
                overflow="fold",
                width=None if widths is None else widths[j],
            )
        for row in self._cells:
            out.add_row(*(Text(printable(row[i])) for i in columns))
        return out


def rich_table(table: Table, *, label_columns: int = 0) -> FittedTable:
    """A report table for the terminal, fitted to its width (:class:`FittedTable`)."""
    return FittedTable(table, label_columns=label_columns)
