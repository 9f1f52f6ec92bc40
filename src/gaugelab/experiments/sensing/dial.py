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

import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, field_validator, model_validator

from gaugelab.determinism import deterministic
from gaugelab.experiments.sensing.problem import SensingBatch, SensingExperiment
from gaugelab.experiments.sensing.rates import RateChoice, select_rate
from gaugelab.experiments.sensing.results import INTERPOLATED, RuleResult, read_study, record_result
from gaugelab.experiments.sensing.train import train_rule
from gaugelab.experiments.sensing.views import dial_report, dial_tables
from gaugelab.experiments.sensing.zoo import LearningRateGrids, default_study_name
from gaugelab.study.experiment import (
    RunState,
    StudyOutcome,
    run_experiment,
)
from gaugelab.study.report.builder import Table
from gaugelab.study.store.db import RunStore
from gaugelab.study.sweep import Sweep
from gaugelab.tasks import effective_rank

__all__ = [
    "DIAL_LRS",
    "DIAL_PS",
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

DIAL_PS = (1.0, 0.75, 0.5, 0.25, 0.0)
"""The dial's settings of p (docs/protocols.md §4)."""
DIAL_LRS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
"""The dial's learning-rate grid (docs/protocols.md §4)."""
GD_LABEL = "gd"


def dial_label(p: float) -> str:
    """The result label of one p, e.g. ``adam-p@0.5``."""
    return f"adam-p@{p:g}"


class DialSpec(SensingExperiment):
    """The Adam-p dial (docs/protocols.md §4); every default is the reference protocol.

    ``execute(run)`` trains ``adam-p`` at every p of :attr:`ps` on the whole grid, and gd when
    :attr:`gd_reference`.
    """

    kind: ClassVar[str] = "dial"

    steps: int = Field(30_000, ge=1, description="Step budget per member (§4: 30,000).")
    ps: tuple[float, ...] = Field(DIAL_PS, description="Settings of the dial p, each in [0, 1].")
    lrs: tuple[float, ...] = Field(
        DIAL_LRS, min_length=1, description="Learning-rate grid shared by every p (§4)."
    )
    mean: Literal["rms", "geometric"] = Field(
        "rms", description="Pooled scalar: rms (√mean v̂, exact at p = 0) or geometric."
    )
    gd_reference: bool = Field(
        True, description="Also train gd (zoo grid, same budget) for the reference line."
    )
    gd_lrs: tuple[float, ...] = Field(
        LearningRateGrids().gd, min_length=1, description="gd's grid for the reference (ours)."
    )

    @field_validator("ps")
    @classmethod
    def _check_ps(cls, ps: tuple[float, ...]) -> tuple[float, ...]:
        if any(not (0 <= p <= 1) for p in ps) or len(set(ps)) != len(ps):
            raise ValueError(f"ps={ps}; allowed: distinct numbers in [0, 1]")
        return ps

    @field_validator("lrs", "gd_lrs")
    @classmethod
    def _check_lrs(cls, lrs: tuple[float, ...]) -> tuple[float, ...]:
        if any(not (math.isfinite(x) and x > 0) for x in lrs):
            raise ValueError(f"learning rates {lrs}; allowed: finite numbers > 0")
        return lrs

    @model_validator(mode="after")
    def _has_work(self) -> DialSpec:
        if not self.ps and not self.gd_reference:
            raise ValueError("DialSpec: no p and gd_reference=False: nothing to run")
        return self

    def labels(self) -> list[str]:
        """The results this spec produces."""
        return [dial_label(p) for p in self.ps] + ([GD_LABEL] if self.gd_reference else [])

    def execute(self, run: Any) -> None:
        """Train every p (and gd) as one ensemble of (seed × rate) each; record each."""
        with deterministic():
            batch = SensingBatch.build(self)
            for p in self.ps:
                result = train_rule(
                    self,
                    batch,
                    "adam-p",
                    self.lrs,
                    decay=self.decays("adam-p"),
                    hyper={"p": p, "mean": self.mean},
                    label=dial_label(p),
                    run=run,
                )
                record_result(run, result, self.steps)
            if self.gd_reference:
                result = train_rule(
                    self, batch, "gd", self.gd_lrs, decay=self.decays("gd"), run=run
                )
                record_result(run, result, self.steps)


@dataclass
class DialPoint:
    """One p of the dial.

    Attributes:
        p: the dial setting.
        choice: the per-p arm's rate (:func:`select_rate`).
        recovery, effective_rank: ``[S]`` at the chosen rate (empty if none qualifies).
        grid: the full result (every rate: the fixed-rate arm).
    """

    p: float
    choice: RateChoice
    recovery: list[float]
    effective_rank: list[float]
    grid: RuleResult

    @property
    def mean_recovery(self) -> float:
        """Mean recovery error at the chosen rate (NaN if none)."""
        return _mean(self.recovery)

    @property
    def mean_effective_rank(self) -> float:
        """Mean effective rank at the chosen rate (NaN if none)."""
        return _mean(self.effective_rank)

    def at_rate(self, j: int) -> tuple[float, float, bool]:
        """Fixed-rate arm at grid index ``j``: mean recovery, mean effective rank, and whether
        every seed interpolated."""
        rec = [row[j] for row in self.grid.recovery]
        er = [row[j] for row in self.grid.effective_rank]
        ok = all(row[j] == INTERPOLATED for row in self.grid.status)
        return _mean(rec), _mean(er), ok


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _point(p: float, result: RuleResult) -> DialPoint:
    choice = select_rate(result)
    j = choice.index
    rec = [] if j is None else [row[j] for row in result.recovery]
    er = [] if j is None else [row[j] for row in result.effective_rank]
    return DialPoint(p, choice, rec, er, result)


def is_monotone(ps: list[float], recoveries: list[float]) -> bool:
    """Whether the recovery error strictly increases with p (so decreases along the dial from
    p = 1 to p = 0). NaN entries make it False."""
    pairs = sorted(zip(ps, recoveries, strict=True))
    return all(b[1] > a[1] for a, b in itertools.pairwise(pairs))


@dataclass
class DialResult:
    """The dial as read back from the run store.

    Attributes:
        spec: the study's spec; study: its name.
        points: one :class:`DialPoint` per p that completed, in the spec's order.
        gd: gd's reference point (``p`` is NaN), if run and completed.
        planted_effective_rank: mean effective rank of the planted targets.
        monotone: per-p arm recovery strictly increasing in p.
        runs: every run of the study with its latest termination (failures included).
    """

    spec: DialSpec
    study: str
    points: list[DialPoint]
    gd: DialPoint | None
    planted_effective_rank: float
    monotone: bool
    runs: list[RunState] = field(default_factory=list)

    @property
    def failures(self) -> list[RunState]:
        """Runs that did not complete."""
        return [r for r in self.runs if not r.completed]


def plan(spec: DialSpec, study: str | None = None) -> Sweep:
    """The dial's runs: one per p (``ps = (p,)``) and one for gd (``ps = ()``); the study is
    named ``dial-<identity prefix>`` unless ``study`` is given."""
    variants = [{"ps": [p], "gd_reference": False} for p in spec.ps]
    if spec.gd_reference:
        variants.append({"ps": [], "gd_reference": True})
    return Sweep(spec, variants=variants, name=study or default_study_name(spec))


def _planted_effective_rank(spec: DialSpec) -> float:
    batch = SensingBatch.build(spec)
    return float(effective_rank(batch.target.to(torch.float64)).mean())


def collect(store: RunStore, study: str) -> DialResult:
    """The :class:`DialResult` of a dial study, from the store.

    Raises:
        ValueError: no such study, or it is not a dial study.
    """
    spec, runs, results = read_study(store, study, DialSpec)
    points = [_point(p, results[dial_label(p)]) for p in spec.ps if dial_label(p) in results]
    gd = _point(float("nan"), results[GD_LABEL]) if GD_LABEL in results else None
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
    spec: DialSpec | None = None, *, study: str | None = None, **options: Any
) -> StudyOutcome[DialResult]:
    """Run the dial as a study (one run per p, plus gd), collect both arms, write the report.

    Args:
        spec: the protocol (default: the reference, :class:`DialSpec()`).
        study: the study name (default ``dial-<identity prefix>``).
        **options: how to run it, as :func:`gaugelab.experiments.sensing.zoo.run_zoo`.

    Returns:
        The :class:`StudyOutcome`; failed runs are in ``outcome.result.failures``.

    Raises:
        ValueError: a bad executor option; a study name already used by another spec.

    Source: singh2026lossbasis, §7; docs/protocols.md §4.
    """
    return run_experiment(plan(spec or DialSpec(), study), collect, report, **options)
