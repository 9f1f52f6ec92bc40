"""The console every command prints tables to."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from gaugelab.study.report import Table, format_number


def wide_console() -> Console:
    """Rich's width in a terminal (or $COLUMNS); 200 columns when printing to a file or pipe,
    so that a saved table is not folded to 80. Built per command, so COLUMNS is current."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=200 if wide else None)


def rich_table(table: Table, *, label_columns: int = 0) -> RichTable:
    """A report table for the terminal: cells through ``format_number``, as plain text (never
    rich markup); the first ``label_columns`` columns left-aligned, the rest right-aligned."""
    out = RichTable(title=table.title, caption=table.caption or None)
    for i, column in enumerate(table.columns):
        out.add_column(column, justify="left" if i < label_columns else "right", overflow="fold")
    for row in table.rows:
        out.add_row(*(Text(format_number(cell)) for cell in row))
    return out


def failure_line(identity: str, termination: str, message: str, what: str = "") -> Text:
    """``failed <identity[:12]> (<what>): <termination> — <message>`` in red."""
    label = f" ({what})" if what else ""
    return Text(f"failed {identity[:12]}{label}: {termination} — {message}", style="red")
