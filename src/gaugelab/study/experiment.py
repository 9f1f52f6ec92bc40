"""What every experiment shares: run its plan through the one executor, collect, report.

An experiment module supplies ``plan(spec) -> Sweep``, ``collect(store, study) -> Result`` and
``report(result, out_dir) -> Path``; :func:`run_experiment` runs the plan with
:func:`gaugelab.study.run_sweep`, collects the result from the store and writes the report into
a new folder, and returns all three as a :class:`StudyOutcome`.

Nothing read back is trusted unverified: :func:`verified_json` checks a result artifact's bytes
against the sha256 the store recorded when the run wrote it, and a mismatch is an
:class:`ArtifactError` naming the file and the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from gaugelab.study.report.builder import new_report_dir
from gaugelab.study.store.db import DEFAULT_STORE_PATH, RunStore

if TYPE_CHECKING:  # the executors are imported by run_experiment, which runs a study
    from gaugelab.study.sweep import Sweep, SweepResult

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
        """One line per run that resumed from a checkpoint, per run whose checkpoint failed
        verification and was set aside (it started from step 0), and per completed run executed
        again because a file it had written failed verification (naming the file)."""
        lines = [
            f"run {identity[:12]} resumed from its checkpoint at step {step}"
            for identity, step in self.sweep.resumed.items()
        ]
        for identity, why in self.sweep.restarted.items():
            lines.append(f"run {identity[:12]} started again from step 0: {why}")
        for identity, why in self.sweep.reexecuted.items():
            lines.append(f"run {identity[:12]} executed again: {why}")
        return lines


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
    phase: Callable[[str], None] | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    write_report: bool = True,
    first: Sweep | None = None,
    collect_phase: str = "collecting the results",
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
        phase: called with what happens once the runs are done: ``collect_phase`` before
            ``collect``, ``"writing the report"`` before ``report`` (a progress display shows
            it; both can take seconds).
        report_dir: the report folder (must not hold a report already); default: a new
            timestamped folder in ``<store folder>/reports/<study slug>/`` (the study name made
            path-safe: ``../x`` or ``/abs`` never leave ``reports/``).
        write_report: write the report (False: only run and collect).
        first: a sweep run before ``sweep``, executed the same way (e.g. a pretrain run that
            several studies share); its runs are not part of the study, but the outcome's
            ``sweep`` accounts for both.
        collect_phase: what ``phase`` says while ``collect`` runs.

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
    from gaugelab.study.sweep import run_sweep

    how = dict(
        executor=executor,
        max_workers=max_workers,
        store=store,
        address=address,
        threads=threads,
        progress=progress,
        step_progress=step_progress,
    )
    before = None if first is None else run_sweep(first, **how)
    swept = run_sweep(sweep, **how)
    if before is not None:
        swept = joined(before, swept)
    if phase is not None:
        phase(collect_phase)
    with RunStore(store, create=False) as db:
        result = collect(db, sweep.study)
    path = None
    if write_report:
        if phase is not None:
            phase("writing the report")
        folder = Path(report_dir) if report_dir else None
        if folder is None:
            folder = new_report_dir(Path(store).parent / "reports", study=sweep.study)
        path = report(result, folder)
    return StudyOutcome(sweep.study, result, swept, path)


def joined(first: SweepResult, second: SweepResult) -> SweepResult:
    """One account of two sweeps (``first``'s runs, then ``second``'s)."""
    from gaugelab.study.sweep import SweepResult

    return SweepResult(
        completed=[*first.completed, *second.completed],
        skipped=[*first.skipped, *second.skipped],
        failed=[*first.failed, *second.failed],
        outcomes=[*first.outcomes, *second.outcomes],
        reexecuted={**first.reexecuted, **second.reexecuted},
        waited=[*first.waited, *second.waited],
    )



