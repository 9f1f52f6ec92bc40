"""The Adam-p dial: recovery and effective rank as Adam's denominator is pooled toward a scalar.

``adam-p`` with ``p ∈ {1, 0.75, 0.5, 0.25, 0}`` on the docs/protocols.md §3 testbed for 30,000
steps, each p one ensemble of (seed × learning rate). Two arms come from the same runs: the *per-p*
arm picks each p's rate by the protocol's selection rule; the *fixed-rate* arm reads every p at
each shared rate of the grid. Reference lines: gd (its zoo grid, same budget, selected by the
same rule) and the planted matrix's effective rank.

The study has one run per p and one for the gd reference.

Source: singh2026lossbasis, §7 (the dial, RMS convention; geometric mean as a check);
docs/protocols.md §4.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from gaugelab.experiments.sensing.problem import SensingBatch
from gaugelab.experiments.sensing.records import read_study
from gaugelab.experiments.sensing.results import DialPoint, DialResult, dial_point, is_monotone
from gaugelab.experiments.sensing.spec import (
    DIAL_LRS,
    DIAL_PS,
    GD_LABEL,
    DialSpec,
    default_study_name,
    dial_label,
)
from gaugelab.experiments.sensing.views import dial_report, dial_tables
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.report.builder import Table
from gaugelab.study.store.db import RunStore
from gaugelab.study.sweep import Sweep
from gaugelab.tasks import effective_rank

__all__ = [
    "DIAL_LRS",
    "DIAL_PS",
    "EXPERIMENT",
    "DialPoint",
    "DialResult",
    "DialSpec",
    "collect",
    "dial_label",
    "is_monotone",
    "plan",
    "report",
    "run_dial",
    "tables",
]


def plan(spec: DialSpec, study: str | None = None) -> Sweep:
    """The dial's runs: one per p (``ps = (p,)``) and one for gd (``ps = ()``); the study is
    named ``dial-<identity prefix>`` unless ``study`` is given."""
    variants = [{"ps": [p], "gd_reference": False} for p in spec.ps]
    if spec.gd_reference:
        variants.append({"ps": [], "gd_reference": True})
    return Sweep(spec, variants=variants, name=study or default_study_name(spec))


def _planted_effective_rank(spec: DialSpec) -> float:
    batch = SensingBatch.build(spec)
    target = batch.target.to(torch.float64)
    return float(effective_rank(target, convention="roy_vetterli").mean())


def collect(store: RunStore, study: str) -> DialResult:
    """The :class:`DialResult` of a dial study, from the store.

    Raises:
        ValueError: no such study, or it is not a dial study.
    """
    spec, runs, results = read_study(store, study, DialSpec)
    points = [dial_point(p, results[dial_label(p)]) for p in spec.ps if dial_label(p) in results]
    gd = dial_point(float("nan"), results[GD_LABEL]) if GD_LABEL in results else None
    monotone = len(points) >= 2 and is_monotone(
        [pt.p for pt in points], [pt.mean_recovery for pt in points]
    )
    return DialResult(spec, study, points, gd, _planted_effective_rank(spec), monotone, runs)


def tables(result: DialResult) -> list[Table]:
    """The dial's tables (see :func:`gaugelab.experiments.sensing.views.dial_tables`)."""
    return dial_tables(result)


def report(result: DialResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the dial's HTML report and figures into ``out_dir``; returns ``report.html``."""
    return dial_report(result, Path(out_dir))


def run_dial(
    spec: DialSpec | None = None, *, study: str | None = None, sweep: Sweep | None = None,
    **options: Any
) -> StudyOutcome[DialResult]:
    """Run the dial as a study (one run per p, plus gd), collect both arms, write the report.

    Args:
        spec: the protocol (default: the reference, :class:`DialSpec()`).
        study: the study name (default ``dial-<identity prefix>``).
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: how to run it, as :func:`gaugelab.experiments.sensing.zoo.run_zoo`.

    Returns:
        The :class:`StudyOutcome`; failed runs are in ``outcome.result.failures``.

    Raises:
        ValueError: a bad executor option; a study name already used by another spec.

    Source: singh2026lossbasis, §7; docs/protocols.md §4.
    """
    sweep = sweep or plan(spec or DialSpec(), study)
    return run_experiment(sweep, collect, report, **options)


EXPERIMENT: Experiment[DialSpec, DialResult] = Experiment(
    DialSpec.kind, DialSpec, DialResult, plan, collect, tables, report, run_dial
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
