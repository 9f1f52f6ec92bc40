"""The matrix-sensing optimizer zoo: every rule on the docs/protocols.md §3 testbed, one table.

For each rule, every (seed × learning rate) trains as one ensemble (see ``sensing.train``); the
rate is chosen by the protocol's rule; the table reports recovery error, train loss, effective
rank, balancedness and steps; the *split* compares the worst orthogonally equivariant rule with
the best coordinatewise one. A convex reference row (minimum nuclear norm subject to the
measurements, by cvxpy + SCS) is added when cvxpy is installed (``gaugelab[convex]``); without
it the row is reported as skipped (``skipped: install gaugelab[convex]``), not as a failure.

The experiment surface (see :mod:`gaugelab.experiments`): :class:`ZooSpec`, :func:`plan` (one
run per rule, plus one for the convex row: each resumable on its own, a failure of one rule
does not lose the others, rules can run in parallel), :func:`collect`, :func:`tables`,
:func:`report`, and :func:`run_zoo` for all of it at once.

Source: singh2026lossbasis, §5 (the zoo) and Table 6 (schedule control); docs/protocols.md §3.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gaugelab.experiments.sensing.convex import (
    CONVEX,
    CONVEX_SKIPPED,
    convex_missing,
    nuclear_norm_reference,
)
from gaugelab.experiments.sensing.grids import LearningRateGrids
from gaugelab.experiments.sensing.records import read_study
from gaugelab.experiments.sensing.results import ZooResult, ZooRow, rule_class
from gaugelab.experiments.sensing.spec import DECAYED, ZOO_RULES, ZooSpec, default_study_name
from gaugelab.experiments.sensing.split import SplitVerdict, split_verdict
from gaugelab.experiments.sensing.views import zoo_report, zoo_tables
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.report.builder import Table
from gaugelab.study.store.db import RunStore
from gaugelab.study.sweep import Sweep

__all__ = [
    "CONVEX",
    "DECAYED",
    "EXPERIMENT",
    "ZOO_RULES",
    "LearningRateGrids",
    "SplitVerdict",
    "ZooResult",
    "ZooRow",
    "ZooSpec",
    "collect",
    "nuclear_norm_reference",
    "plan",
    "report",
    "rule_class",
    "run_zoo",
    "split_verdict",
    "tables",
]


def plan(spec: ZooSpec, study: str | None = None) -> Sweep:
    """The zoo's runs: one per rule (``rules = (rule,)``, no convex row) and, if
    ``spec.convex`` and cvxpy with SCS is installed here, one for the convex row
    (``rules = ()``); the study is named ``zoo-<identity prefix>`` unless ``study`` is given.

    Without cvxpy the convex row is skipped, not planned (so it never fails, and the same
    command adds it once ``gaugelab[convex]`` is installed); :func:`collect` reports it as
    skipped."""
    variants = [{"rules": [r], "convex": False} for r in spec.rules]
    if spec.convex and convex_missing() is None:
        variants.append({"rules": [], "convex": True})
    return Sweep(spec, variants=variants, name=study or default_study_name(spec))


def collect(store: RunStore, study: str) -> ZooResult:
    """The :class:`ZooResult` of a zoo study, from the store (completed runs' result artifacts).

    Raises:
        ValueError: no such study, or it is not a zoo study.
    """
    spec, runs, results = read_study(store, study, ZooSpec)
    rows = [ZooRow.from_result(results[r], rule_class(r)) for r in spec.rules if r in results]
    convex = ZooRow.from_result(results[CONVEX], "convex") if CONVEX in results else None
    split = split_verdict({r.rule: r.mean_recovery for r in rows}, {r.rule: r.klass for r in rows})
    skipped = None
    if spec.convex and not any(run.spec.get("convex") for run in runs):  # not planned
        skipped = convex_missing() or f"{CONVEX_SKIPPED} (it is now: rerun to add the row)"
    return ZooResult(spec, study, rows, convex, split, runs, skipped)


def tables(result: ZooResult) -> list[Table]:
    """The zoo's tables (see :func:`gaugelab.experiments.sensing.views.zoo_tables`)."""
    return zoo_tables(result)


def report(result: ZooResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the zoo's HTML report and figures into ``out_dir``; returns ``report.html``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    return zoo_report(result, Path(out_dir))


def run_zoo(
    spec: ZooSpec | None = None, *, study: str | None = None, sweep: Sweep | None = None,
    **options: Any
) -> StudyOutcome[ZooResult]:
    """Run the zoo as a study, collect the table and write the report.

    Runs already completed in the store are not run again (same spec ⇒ same identity); a run
    killed mid-way resumes from its latest checkpoint.

    Args:
        spec: the protocol (default: the reference, :class:`ZooSpec()`).
        study: the study name (default ``zoo-<identity prefix>``).
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: how to run it, as :func:`gaugelab.study.experiment.run_experiment`:
            ``store`` (default ``./gaugelab-runs/store.sqlite``), ``executor``
            (``"local"`` or ``"ray"``), ``max_workers`` (default 1: the runs execute in this
            process), ``threads`` (default 1: the sensing products are small and
            memory-bound), ``address``, ``progress`` (``progress(done, total)`` in runs),
            ``report_dir``, ``write_report``.

    Returns:
        The :class:`StudyOutcome`; failed runs are in ``outcome.result.failures``.

    Raises:
        ValueError: a bad executor option; a study name already used by another spec.

    Source: docs/protocols.md §3.
    """
    sweep = sweep or plan(spec or ZooSpec(), study)
    return run_experiment(sweep, collect, report, **options)


EXPERIMENT: Experiment[ZooSpec, ZooResult] = Experiment(
    ZooSpec.kind, ZooSpec, ZooResult, plan, collect, tables, report, run_zoo
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
