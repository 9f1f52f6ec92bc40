"""The console every command prints to: tables that fit it, progress, a study's outcome.

Progress goes to the terminal as rich bars (runs, and the steps of the runs executing) or a
spinner; when stdout is not a terminal (piped, redirected) the bars are replaced by one line
on stderr every :data:`PROGRESS_INTERVAL` seconds — ``twin runs: 2/4 runs, adam 300/1500
steps, 00:41`` — so a log shows the work moving and stdout holds only the results.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from gaugelab.cli._errors import (
    RESUME,
    RUNS_FAILED,
    check_location,
    environment_message,
    fail,
    interrupted,
)
from gaugelab.cli._options import RunOptions
from gaugelab.cli._tables import rich_table
from gaugelab.errors import NonFiniteError, advice, disk_full
from gaugelab.lazy import LazyModule
from gaugelab.study.report.builder import Table
from gaugelab.study.report.folders import refuse_overwrite

_db = LazyModule("gaugelab.study.store.db")  # the store (and pydantic) only when a study runs

if TYPE_CHECKING:
    from gaugelab.study.experiment import StudyOutcome
    from gaugelab.study.sweep import Sweep

PROGRESS_INTERVAL = 5.0
"""Seconds between two progress lines when stdout is not a terminal."""


def wide_console() -> Console:
    """Rich's width in a terminal (or $COLUMNS); 200 columns when printing to a file or pipe,
    so that a saved table is not folded to 80. Built per command, so COLUMNS is current."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=200 if wide else None)


def failure_line(identity: str, termination: str, message: str, what: str = "") -> Text:
    """``failed <identity[:12]> (<what>): <termination> — <message>; what to do: <advice>`` in
    red (:func:`gaugelab.errors.advice`: left out when the message says it already)."""
    label = f" ({what})" if what else ""
    todo = advice(termination, message)
    tail = f"; what to do: {todo}" if todo else ""
    return Text(f"failed {identity[:12]}{label}: {termination} — {message}{tail}", style="red")


def count(n: int, noun: str) -> str:
    """``1 seed``, ``3 seeds``: ``n`` and the noun in the number it takes."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def run_count(done: int, total: int | None) -> str:
    """The runs part of a progress line: ``2/4 runs``; ``""`` before the sweep has said how
    many it runs; ``nothing to run (reused from the store)`` when it runs none."""
    if total is None:
        return ""
    return "nothing to run (reused from the store)" if total == 0 else f"{done}/{total} runs"


def _with_phase(runs: str, phase: str | None) -> str:
    return runs if phase is None else f"{runs}, {phase}" if runs else phase


class RunBars:
    """Progress callbacks for :func:`gaugelab.study.experiment.run_experiment`: ``runs``
    (a study's runs), ``steps`` (the steps of the runs executing) and ``phase`` (what happens
    after the runs), as rich bars."""

    def __init__(self, bar: Progress, description: str) -> None:
        self._bar = bar
        self._runs = bar.add_task(description, total=None, count="")
        self._steps: dict[str, Any] = {}
        self.done, self.total = 0, None
        self._phase: str | None = None

    def runs(self, done: int, total: int) -> None:
        """``progress(done, total)`` for ``run_sweep``."""
        self.done, self.total = done, total
        self._update()

    def phase(self, text: str | None) -> None:
        """``phase(text)`` for ``run_experiment``: shown after the runs' count (``None``:
        none, as when the work is done)."""
        self._phase = text
        self._update()

    def _update(self) -> None:
        text = _with_phase(run_count(self.done, self.total), self._phase)
        self._bar.update(self._runs, completed=self.done, total=self.total, count=text)

    def steps(self, label: str, step: int, total: int) -> None:
        """``step_progress(label, step, total)`` for ``run_sweep``."""
        if label not in self._steps:
            self._steps[label] = self._bar.add_task(f"  {label}", total=total, count="")
        self._bar.update(self._steps[label], completed=step, total=total,
                         count=f"{step}/{total} steps")  # fmt: skip


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class LineProgress:
    """The same callbacks as :class:`RunBars`, printed as one line on stderr every
    :data:`PROGRESS_INTERVAL` seconds (and a last one at the end, if any was printed and the
    last tick did not print the same line):
    ``<description>: 2/4 runs, adam 300/1500 steps, 00:41``, and once the runs are done
    ``<description>: 4/4 runs, writing the report, 00:52``. Without runs or steps (a single
    long computation) the line is ``<description>: 00:41``. ``step_format`` words a step
    count (``{label} {step}/{total} steps``; :func:`module_progress`: ``{label} module
    {step}/{total}``)."""

    def __init__(self, description: str, interval: float | None = None,
                 step_format: str = "{label} {step}/{total} steps") -> None:  # fmt: skip
        self.description = description
        self._step_format = step_format
        self.done, self.total = 0, None
        self._steps: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._interval = PROGRESS_INTERVAL if interval is None else interval
        self._stopped = threading.Event()
        self._printed = False
        self._last: str | None = None
        self._phase: str | None = None
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def runs(self, done: int, total: int) -> None:
        """``progress(done, total)`` for ``run_sweep``."""
        with self._lock:
            self.done, self.total = done, total

    def steps(self, label: str, step: int, total: int) -> None:
        """``step_progress(label, step, total)`` for ``run_sweep``."""
        with self._lock:
            self._steps[label] = (step, total)

    def phase(self, text: str | None) -> None:
        """``phase(text)`` for ``run_experiment``: shown after the runs' count (``None``:
        none, as when the work is done)."""
        with self._lock:
            self._phase = text

    def line(self) -> str:
        """The progress line as of now."""
        with self._lock:
            runs = _with_phase(run_count(self.done, self.total), self._phase)
            parts = [runs] if runs else []
            running = [(k, s, t) for k, (s, t) in self._steps.items() if s < t]
            parts += [self._step_format.format(label=label, step=step, total=total)
                      for label, step, total in running[-4:]]  # fmt: skip
        parts.append(_elapsed(time.monotonic() - self._start))
        return f"{self.description}: {', '.join(parts)}"

    def _print(self, *, unless_repeated: bool = False) -> None:
        line = self.line()
        if unless_repeated and line == self._last:
            return  # the last tick already said it (same state, same second)
        typer.echo(line, err=True)
        self._printed, self._last = True, line

    def _tick(self) -> None:
        while not self._stopped.wait(self._interval):
            self._print()

    def __enter__(self) -> LineProgress:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self._stopped.set()
        self._thread.join()
        self.phase(None)  # done: the last line says where the runs ended, not a phase
        if self._printed and kind is None:
            self._print(unless_repeated=True)


MODULE_FORMAT = "{label} module {step}/{total}"
"""How :func:`module_progress` words its count: ``inspecting module 12/224``."""


@contextlib.contextmanager
def module_progress(
    console: Console, description: str
) -> Iterator[Callable[[str, int, int], None]]:
    """Progress over an adapter's modules on stderr, as ``progress(label, i, n)`` callbacks
    (``lora inspect``, ``compare``, ``compose``): a rich bar per label (``composing``,
    ``staged expansion``) reading ``module i/n`` when stderr is a terminal, removed when the
    work is done so the tables follow; otherwise :class:`LineProgress` lines
    (``<description>: composing module 12/224, 00:05``)."""
    err = Console(stderr=True, width=console.width)
    if not err.is_terminal:
        with LineProgress(description, step_format=MODULE_FORMAT) as lines:
            yield lines.steps
        return
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=err, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total, count="")
            count = MODULE_FORMAT.format(label="", step=done, total=total).strip()
            bar.update(tasks[label], completed=done, total=total, count=count)

        yield update


@contextlib.contextmanager
def run_bar(console: Console, description: str) -> Iterator[RunBars | LineProgress]:
    """Progress over a study's runs and the steps of the runs executing: rich bars in a
    terminal, :class:`LineProgress` lines on stderr otherwise."""
    if not console.is_terminal:
        with LineProgress(description) as lines:
            yield lines
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        bars = RunBars(bar, description)
        yield bars
        bars.phase(None)  # done: the bar left on screen says where the runs ended


@contextlib.contextmanager
def working(console: Console, message: str) -> Iterator[None]:
    """A spinner with ``message`` while a single long computation runs (in a terminal), or
    ``message: 00:05`` on stderr every :data:`PROGRESS_INTERVAL` seconds (otherwise)."""
    if console.is_terminal:
        with console.status(Text(message), spinner="dots"):
            yield
    else:
        with LineProgress(message):
            yield


def run_with_bars(
    console: Console,
    header: str,
    description: str,
    run: Callable[..., StudyOutcome],
    *args: Any,
    study_name: str | None = None,
    **options: Any,
) -> StudyOutcome:
    """Print ``header``, then ``run(*args, **options, progress=…, step_progress=…, phase=…)``
    under :func:`run_bar`.

    Before the header: ``options["store"]`` and ``options["report_dir"]`` are checked
    (:func:`~gaugelab.cli._errors.check_location`; an existing store is opened and closed, so
    a bad file is refused untouched; so is a report folder that holds a report). A bad option,
    a non-finite value or an existing report becomes one ``error:`` line (exit 2); so does a
    failure of the machine (a full disk, a read-only folder), which for a full disk says that
    the runs are kept and how to write the report of ``study_name`` later; Ctrl-C prints how
    many runs completed and exits 130.
    """
    store = options.get("store")
    paths = {"--out": options.get("report_dir"), "--store": store}
    bars: RunBars | LineProgress | None = None
    try:
        check_location("--store", store)
        check_location("--out", options.get("report_dir"), folder=True)
        if options.get("report_dir") is not None:
            refuse_overwrite(options["report_dir"])
        if store is not None and os.path.exists(store):
            _db.RunStore(store, create=False).close()  # refuses a bad file untouched
        console.print(Text(header))
        with run_bar(console, description) as bars:
            return run(*args, **options, progress=bars.runs, step_progress=bars.steps,
                       phase=bars.phase)  # fmt: skip
    except KeyboardInterrupt as exc:
        raise interrupted(exc, resumable=True) from None
    except (ValueError, _db.StoreError, NonFiniteError) as exc:
        raise fail(str(exc)) from None
    except (OSError, sqlite3.Error) as exc:
        if not disk_full(exc) or store is None:
            raise fail(environment_message(exc, paths)) from None
        where = getattr(exc, "filename", None) or store
        finished = bars is not None and bars.total is not None and bars.done >= bars.total
        if finished and study_name is not None:
            raise fail(
                f"{where}: no space left on the device while writing the report; the runs are "
                f"kept in the store {store} (`gaugelab runs list --study {study_name} --store "
                f"{store}` shows how each ended: a run can have failed for the same reason); "
                "once there is space, rerun the same command: it reruns what failed and "
                "writes the report"
            ) from None
        raise fail(
            f"{where}: no space left on the device; the runs completed so far are kept in the "
            f"store {store}: once there is space, {RESUME}"
        ) from None


def run_study(
    console: Console,
    header: str,
    description: str,
    run: Callable[..., StudyOutcome],
    *args: Any,
    sweep: Sweep,
    options: RunOptions,
    **extra: Any,
) -> StudyOutcome:
    """A study command's one library call: :func:`run_with_bars` of ``run(*args, sweep=sweep,
    **extra)`` with the run options, the header ending with the store.

    ``OMP_NUM_THREADS`` defaults to ``--threads`` first: torch reads it in the worker
    processes.
    """
    os.environ.setdefault("OMP_NUM_THREADS", str(options.threads))
    return run_with_bars(
        console, f"{header}; store {options.store}", description, run, *args, sweep=sweep,
        study_name=sweep.study, **options.how(), **extra,
    )  # fmt: skip


def print_outcome(
    console: Console,
    outcome: StudyOutcome,
    tables: Sequence[Table],
    *,
    notes: Sequence[Text] = (),
    label_columns: int = 0,
) -> None:
    """Print a study's reused / resumed runs, tables, notes (e.g. verdicts), failures and
    report path. The tables and notes hold the runs that completed (the experiments' views
    leave the others out); each failure is one line with its cause and what to do
    (:func:`failure_line`).

    Raises:
        typer.Exit: code :data:`~gaugelab.cli._errors.RUNS_FAILED` (3) when a run did not
            complete, after everything is printed (so a script never reads a partial study
            as a success, and the command prints no advice to inspect what failed).
    """
    if outcome.sweep.skipped:
        console.print(
            f"{len(outcome.sweep.skipped)} run(s) were already completed in the store: reused"
        )
    for line in outcome.resumed_lines():
        console.print(Text(line))
    failures = outcome.result.failures
    for table in tables:  # with failures, a table of no completed run is left out
        if table.rows or not failures:
            console.print(rich_table(table, label_columns=label_columns))
    for note in notes:
        console.print(note)
    for run in failures:
        console.print(failure_line(run.identity, run.termination, run.message))
    if outcome.report is not None:
        console.print(Text(f"report: {outcome.report}"))
    if failures:
        console.print(Text(
            f"{count(len(failures), 'run')} did not complete (above, each with its cause); "
            "the tables hold what completed", style="red",
        ))  # fmt: skip
        raise typer.Exit(code=RUNS_FAILED)
