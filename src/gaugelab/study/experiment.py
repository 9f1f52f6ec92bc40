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

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from gaugelab.study.report.builder import RunSummary, new_report_dir
from gaugelab.study.store.db import DEFAULT_STORE_PATH, ArtifactRow, RunStore, StoreError, StudyRow

if TYPE_CHECKING:  # the executors are imported by run_experiment, which runs a study
    from gaugelab.study.stats.paired import PairedComparison
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


def study_of_kind(store: RunStore, study: str, spec_class: type) -> StudyRow:
    """:func:`study_row` of ``study``, checked to be of ``spec_class.kind``.

    Raises:
        ValueError: no such study, or one of another kind.
    """
    row = study_row(store, study)
    if row.kind != spec_class.kind:
        raise ValueError(
            f"collect: study {study!r} is a {row.kind!r} study, not a {spec_class.kind!r} study"
        )
    return row


UNVERIFIED = "unverified"
"""The read-back state of a completed run whose artifact fails verification (not a termination
class of the store: the attempt did complete; its file changed afterwards)."""


class ArtifactError(StoreError):
    """A file a run wrote is missing, unreadable, or differs from the sha256 the store recorded
    for it. The message names the file and the run."""


def verified_bytes(artifact: ArtifactRow) -> bytes:
    """The bytes of a stored artifact, checked against the sha256 recorded when it was written.

    The file is read once and the digest is taken of the bytes returned, so nothing unverified
    is ever parsed.

    Raises:
        ArtifactError: the file is missing or unreadable, or its sha256 differs.
    """
    where = f"run {artifact.run[:12]} (attempt {artifact.ordinal})"
    try:
        data = artifact.path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ArtifactError(f"{artifact.path}: {artifact.kind} file of {where}: {reason}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.sha256:
        raise ArtifactError(
            f"{artifact.path}: {artifact.kind} file of {where} has sha256 {digest[:16]}…, not "
            f"the {artifact.sha256[:16]}… the store recorded; it changed after the run wrote it"
        )
    return data


def verified_json(artifact: ArtifactRow) -> Any:
    """A stored JSON artifact, parsed only after :func:`verified_bytes` has checked it.

    Raises:
        ArtifactError: as :func:`verified_bytes`, or the verified bytes are not UTF-8 JSON
            (a file that was already malformed when the run recorded it).
    """
    data = verified_bytes(artifact)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(
            f"{artifact.path}: {artifact.kind} file of run {artifact.run[:12]} is not JSON ({exc})"
        ) from None


@dataclass
class RunState:
    """One run of a study as read back from the store.

    Attributes:
        identity: the run identity.
        spec: the run's spec fields (JSON mode).
        termination: the latest attempt's termination class, ``"open"`` while it runs,
            ``"not run"``, or :data:`UNVERIFIED` when the run completed but a file it wrote no
            longer matches the store's record (the run is then left out of the results).
        message: that attempt's message (for :data:`UNVERIFIED`: which file, and why).
    """

    identity: str
    spec: dict[str, Any]
    termination: str
    message: str

    @property
    def completed(self) -> bool:
        """The latest attempt completed (and, once read back, its files verified)."""
        return self.termination == "completed"

    def unverified(self, error: ArtifactError) -> RunState:
        """This run as :data:`UNVERIFIED`, with ``error`` and what to do as the message."""
        message = f"{error}; rerun the same command to execute the run again"
        return RunState(self.identity, self.spec, UNVERIFIED, message)

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


def completed_result(store: RunStore, state: RunState) -> tuple[RunState, dict[str, Any] | None]:
    """The verified ``result`` artifact (JSON) of a completed run's latest completed attempt.

    Returns:
        ``(state, data)``: ``data`` is ``None`` for a run that did not complete; a completed
        run whose result file is missing or changed comes back as ``state.unverified(…)``
        with ``None``.
    """
    if not state.completed:
        return state, None
    ordinal = [a.ordinal for a in store.attempts(state.identity) if a.termination == "completed"]
    found = [
        a
        for a in store.artifacts(state.identity)
        if a.kind == "result" and a.ordinal == ordinal[-1]
    ]
    try:
        if not found:
            raise ArtifactError(f"run {state.identity[:12]} recorded no result file")
        return state, verified_json(found[-1])
    except ArtifactError as exc:
        return state.unverified(exc), None
