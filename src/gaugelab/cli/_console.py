"""The console every command prints tables to."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def wide_console() -> Console:
    """Rich's width in a terminal (or $COLUMNS); 200 columns when printing to a file or pipe,
    so that a saved table is not folded to 80. Built per command, so COLUMNS is current."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=200 if wide else None)
