"""What every experiment is, and what running one does.

:class:`Experiment` is the record every experiment package exports (``EXPERIMENT``; all of
them in :data:`gaugelab.experiments.registry.REGISTRY`): its study kind, its spec and result
types, ``plan(spec) -> Sweep``, ``collect(store, study) -> Result`` (read back verified, through
:mod:`gaugelab.study.store.results`), ``tables(result)``, ``report(result, out_dir)``, the
one-call ``run(spec, **options) -> StudyOutcome`` and the result's versioned JSON form
(:meth:`Experiment.to_json` / :meth:`Experiment.from_json`).

:func:`run_experiment` is what every ``run`` does: the plan through
:func:`gaugelab.study.run_sweep`, the result collected from the store, the report written into
a new folder, all three returned as a :class:`StudyOutcome`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pydantic

from gaugelab.lazy import LazyModule
from gaugelab.study.report.folders import new_report_dir, refuse_overwrite
from gaugelab.study.store.db import DEFAULT_STORE_PATH, RunStore

if TYPE_CHECKING:  # the executors are imported by run_experiment, which runs a study
    from gaugelab.study.report.builder import Table
    from gaugelab.study.spec import ExperimentSpec
    from gaugelab.study.sweep import Sweep, SweepResult

_sweep = LazyModule("gaugelab.study.sweep")  # the executors load torch; reading results does not

R = TypeVar("R")
S = TypeVar("S", bound="ExperimentSpec")


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
    if report_dir is not None and write_report:
        refuse_overwrite(report_dir)

    how = dict(
        executor=executor,
        max_workers=max_workers,
        store=store,
        address=address,
        threads=threads,
        progress=progress,
        step_progress=step_progress,
    )
    before = None if first is None else _sweep.run_sweep(first, **how)
    swept = _sweep.run_sweep(sweep, **how)
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
    return _sweep.SweepResult(
        completed=[*first.completed, *second.completed],
        skipped=[*first.skipped, *second.skipped],
        failed=[*first.failed, *second.failed],
        outcomes=[*first.outcomes, *second.outcomes],
        reexecuted={**first.reexecuted, **second.reexecuted},
        waited=[*first.waited, *second.waited],
    )


def _plain(value: Any) -> Any:
    """What JSON cannot hold natively, as it can (read-only mappings of the release records)."""
    if isinstance(value, MappingProxyType):
        return dict(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


@dataclass(frozen=True)
class Experiment(Generic[S, R]):
    """An experiment: what it runs, how it reads its result back, and how it shows it.

    Attributes:
        kind: the study kind (``"zoo"``, ``"twins"``, …; the ``kind`` of the study's spec).
        spec: the study's spec type (frozen, content-hashed; every default the protocol's).
        result: the typed result ``collect`` returns.
        plan: ``plan(spec) -> Sweep``: the study's runs.
        collect: ``collect(store, study) -> result``: read back from the run store, every file
            verified against the store's sha256.
        tables: ``tables(result) -> list[Table]``: what the CLI prints and the report shows.
        report: ``report(result, out_dir) -> Path``: figures and the HTML report.
        run: ``run(spec=None, **options) -> StudyOutcome``: all of it at once.
        version: the version of the result's JSON form (raised when ``result`` changes shape).
    """

    kind: str
    spec: type[S]
    result: type[R]
    plan: Callable[..., Sweep]
    collect: Callable[[RunStore, str], R]
    tables: Callable[[R], Sequence[Table]]
    report: Callable[[R, str | os.PathLike[str]], Path]
    run: Callable[..., StudyOutcome[R]]
    version: int = 1

    @functools.cached_property
    def _envelope(self) -> type[pydantic.BaseModel]:
        return pydantic.create_model(
            f"{self.result.__name__}Envelope",
            __config__=pydantic.ConfigDict(
                ser_json_inf_nan="strings", arbitrary_types_allowed=True
            ),
            kind=(str, ...),
            version=(int, ...),
            result=(self.result, ...),
        )

    def to_json(self, result: R) -> str:
        """``{"kind", "version", "result"}`` as JSON; NaN and ±inf as ``"NaN"``/``"Infinity"``.

        Raises:
            TypeError: ``result`` is not of this experiment's result type.
        """
        if not isinstance(result, self.result):
            raise TypeError(
                f"{self.kind}.to_json: a {type(result).__name__}; allowed: {self.result.__name__}"
            )
        envelope = self._envelope(kind=self.kind, version=self.version, result=result)
        # the release records hold read-only mappings where their types say dict: _plain writes
        # them as objects, and pydantic would warn about each one
        return envelope.model_dump_json(fallback=_plain, warnings=False)

    def from_json(self, text: str | bytes) -> R:
        """The result :meth:`to_json` wrote, validated into :attr:`result`.

        Raises:
            ValueError: not JSON, another experiment's or another version's result, or a
                result that does not validate (the message names the field).
        """
        try:
            head = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.kind}.from_json: not JSON ({exc})") from None
        found = (head.get("kind"), head.get("version")) if isinstance(head, dict) else None
        if found != (self.kind, self.version):
            raise ValueError(
                f"{self.kind}.from_json: a result of (kind, version) {found}; allowed: "
                f"{(self.kind, self.version)}"
            )
        try:
            return self._envelope.model_validate_json(text).result
        except pydantic.ValidationError as exc:
            raise ValueError(f"{self.kind}.from_json: {exc}") from None
