"""The console every command prints to: wide tables, a run bar, a study's outcome."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from rich.text import Text

from gaugelab.cli._errors import fail
from gaugelab.errors import NonFiniteError
from gaugelab.experiments._study import StudyOutcome
from gaugelab.study.report import Table, format_number
from gaugelab.study.store import RunStore, StoreError


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


class RunBars:
    """Progress callbacks for :func:`gaugelab.experiments._study.run_experiment`: ``runs``
    (a study's runs) and ``steps`` (the steps of the run executing in this process)."""

    def __init__(self, bar: Progress, description: str) -> None:
        self._bar = bar
        self._runs = bar.add_task(description, total=None, unit="runs")
        self._steps: dict[str, Any] = {}

    def runs(self, done: int, total: int) -> None:
        """``progress(done, total)`` for ``run_sweep``."""
        self._bar.update(self._runs, completed=done, total=total)

    def steps(self, label: str, step: int, total: int) -> None:
        """``step_progress(label, step, total)`` for ``run_sweep``."""
        if label not in self._steps:
            self._steps[label] = self._bar.add_task(f"  {label}", total=total, unit="steps")
        self._bar.update(self._steps[label], completed=step, total=total)


@contextlib.contextmanager
def run_bar(console: Console, description: str) -> Iterator[RunBars]:
    """Progress bars over a study's runs and, for runs in this process, their steps."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} {task.fields[unit]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        yield RunBars(bar, description)


def run_with_bars(
    console: Console,
    header: str,
    description: str,
    run: Callable[..., StudyOutcome],
    *args: Any,
    **options: Any,
) -> StudyOutcome:
    """Print ``header``, then ``run(*args, **options, progress=…, step_progress=…)`` under
    :func:`run_bar`; a bad store (checked before the header), a bad option, a non-finite value
    or an existing report becomes one ``error:`` line (exit status 2)."""
    try:
        if "store" in options and os.path.exists(options["store"]):
            RunStore(options["store"], create=False).close()  # refuses a bad file untouched
        console.print(Text(header))
        with run_bar(console, description) as bars:
            return run(*args, **options, progress=bars.runs, step_progress=bars.steps)
    except (ValueError, StoreError, NonFiniteError, FileExistsError) as exc:
        raise fail(str(exc)) from None


def print_outcome(
    console: Console,
    outcome: StudyOutcome,
    tables: Sequence[Table],
    *,
    notes: Sequence[Text] = (),
    label_columns: int = 0,
) -> None:
    """Print a study's reused / resumed runs, tables, notes (e.g. verdicts), failures and
    report path."""
    if outcome.sweep.skipped:
        console.print(
            f"{len(outcome.sweep.skipped)} run(s) were already completed in the store: reused"
        )
    for line in outcome.resumed_lines():
        console.print(Text(line))
    for table in tables:
        console.print(rich_table(table, label_columns=label_columns))
    for note in notes:
        console.print(note)
    for run in outcome.result.failures:
        console.print(failure_line(run.identity, run.termination, run.message))
    if outcome.report is not None:
        console.print(Text(f"report: {outcome.report}"))
