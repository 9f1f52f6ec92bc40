"""What every experiment shares: run its plan through the one executor, collect, report.

An experiment module supplies ``plan(spec) -> Sweep``, ``collect(store, study) -> Result`` and
``report(result, out_dir) -> Path``; :func:`run_experiment` runs the plan with
:func:`gaugelab.study.run_sweep`, collects the result from the store and writes the report into
a new folder, and returns all three as a :class:`StudyOutcome`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from gaugelab.study.paired import PairedComparison
from gaugelab.study.report import RunSummary, new_report_dir
from gaugelab.study.store import DEFAULT_STORE_PATH, RunStore, StudyRow
from gaugelab.study.sweep import Sweep, SweepResult, run_sweep

R = TypeVar("R")


@dataclass
class StudyOutcome(Generic[R]):
    """What running an experiment's study did.

    Attributes:
        study: the study's name in the store.
        result: the experiment's typed result, collected from the store.
        sweep: the executor's account (completed, reused, failed, resumed runs).
        report: the HTML report's path, or ``None`` when none was asked for.
    """

    study: str
    result: R
    sweep: SweepResult
    report: Path | None

    def resumed_lines(self) -> list[str]:
        """One line per run that resumed from a checkpoint."""
        return [
            f"run {identity[:12]} resumed from its checkpoint at step {step}"
            for identity, step in self.sweep.resumed.items()
        ]


def run_experiment(
    sweep: Sweep,
    collect: Callable[[RunStore, str], R],
    report: Callable[[R, Path], Path],
    *,
    store: str | os.PathLike[str] = DEFAULT_STORE_PATH,
    executor: str = "local",
    max_workers: int = 1,
    threads: int | None = 1,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    step_progress: Callable[[str, int, int], None] | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    write_report: bool = True,
) -> StudyOutcome[R]:
    """Run ``sweep`` (runs already completed are reused), collect and report it.

    Args:
        sweep: the experiment's plan.
        collect, report: the experiment's functions.
        store: the run store path (created if missing; default
            ``./gaugelab-runs/store.sqlite``).
        executor, max_workers, threads, address, progress, step_progress: as
            :func:`gaugelab.study.run_sweep`
            (default: one local worker, so the runs execute in this process, with one torch
            thread each).
        report_dir: the report folder (must not hold a report already); default: a new
            timestamped folder in ``<store folder>/reports/<study>/``.
        write_report: write the report (False: only run and collect).

    Returns:
        The :class:`StudyOutcome`.

    Raises:
        ValueError: a bad executor option, or a study name already used by another spec.
        StoreError: ``store`` is not a gaugelab run store.
        FileExistsError: ``report_dir`` already holds a report (checked before any run).
    """
    if report_dir is not None and write_report and (Path(report_dir) / "report.html").exists():
        raise FileExistsError(
            f"{Path(report_dir) / 'report.html'} exists; reports are never overwritten "
            "(choose another folder)"
        )
    swept = run_sweep(
        sweep,
        executor=executor,
        max_workers=max_workers,
        store=store,
        address=address,
        threads=threads,
        progress=progress,
        step_progress=step_progress,
    )
    with RunStore(store, create=False) as db:
        result = collect(db, sweep.study)
    path = None
    if write_report:
        folder = Path(report_dir) if report_dir else None
        if folder is None:
            folder = new_report_dir(Path(store).parent / "reports" / sweep.study)
        path = report(result, folder)
    return StudyOutcome(sweep.study, result, swept, path)


def study_row(store: RunStore, study: str) -> StudyRow:
    """The store's record of ``study``.

    Raises:
        ValueError: no such study (the message lists the known ones).
    """
    rows = store.studies()
    for row in rows:
        if row.name == study:
            return row
    known = ", ".join(repr(r.name) for r in rows) or "none"
    raise ValueError(f"unknown study {study!r} in {store.path}; known: {known}")


@dataclass
class RunState:
    """One run of a study as read back from the store.

    Attributes:
        identity: the run identity.
        spec: the run's spec fields (JSON mode).
        termination: the latest attempt's termination class, ``"open"`` while it runs, or
            ``"not run"``.
        message: that attempt's message.
    """

    identity: str
    spec: dict[str, Any]
    termination: str
    message: str

    @property
    def completed(self) -> bool:
        """The latest attempt completed."""
        return self.termination == "completed"

    def summary(self, label: str, **metrics: Any) -> RunSummary:
        """The report's line for this run."""
        return RunSummary(self.identity, self.termination, label, dict(metrics))


def run_states(store: RunStore, study: str) -> list[RunState]:
    """Every run of ``study`` with its latest attempt's termination, oldest first."""
    states = []
    for run in store.runs(study):
        attempts = store.attempts(run.identity)
        last = attempts[-1] if attempts else None
        termination = "not run" if last is None else (last.termination or "open")
        states.append(RunState(run.identity, run.spec, termination, last.message if last else ""))
    return states


def paired_columns() -> list[str]:
    """The column headers of :func:`paired_cells`."""
    return ["pairs", "mean difference", "95% interval", "range"]


def paired_cells(comparison: PairedComparison) -> list[Any]:
    """A paired comparison as table cells: n, mean, the bootstrap interval (or why there is
    none: a single pair gives a range only), and the range of the per-seed differences."""
    lo, hi = comparison.range
    interval = (
        f"[{comparison.interval[0]:.3g}, {comparison.interval[1]:.3g}]"
        if comparison.interval is not None
        else "— (one pair: range only)"
    )
    return [len(comparison.seeds), comparison.mean, interval, f"[{lo:.3g}, {hi:.3g}]"]
