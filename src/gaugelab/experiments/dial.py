"""The Adam-p dial: recovery and effective rank as Adam's denominator is pooled toward a scalar.

``adam-p`` with ``p ∈ {1, 0.75, 0.5, 0.25, 0}`` on the PROTOCOLS §3 testbed for 30,000 steps,
each p one ensemble of (seed × learning rate). Two arms come from the same runs: the *per-p*
arm picks each p's rate by the protocol's selection rule; the *fixed-rate* arm reads every p at
each shared rate of the grid. Reference lines: gd (its zoo grid, same budget, selected by the
same rule) and the planted matrix's effective rank.

The study has one run per p and one for the gd reference.

Source: singh2026lossbasis, §7 (the dial, RMS convention; geometric mean as a check);
PROTOCOLS §4.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, field_validator, model_validator

from gaugelab.determinism import deterministic
from gaugelab.experiments._engine import (
    INTERPOLATED,
    Progress,
    RateChoice,
    RuleResult,
    RunOutcome,
    SensingBatch,
    SensingExperiment,
    record_result,
    run_study,
    select_rate,
    train_rule,
)
from gaugelab.experiments.zoo import LearningRateGrids, default_study_name
from gaugelab.study.store import DEFAULT_STORE_PATH
from gaugelab.tasks import effective_rank

__all__ = [
    "DIAL_LRS",
    "DIAL_PS",
    "DialPoint",
    "DialResult",
    "DialSpec",
    "collect_dial",
    "dial_label",
    "dial_runs",
    "is_monotone",
    "run_dial",
]

DIAL_PS = (1.0, 0.75, 0.5, 0.25, 0.0)
"""The dial's settings of p (PROTOCOLS §4)."""
DIAL_LRS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
"""The dial's learning-rate grid (PROTOCOLS §4)."""
GD_LABEL = "gd"


def dial_label(p: float) -> str:
    """The result label of one p, e.g. ``adam-p@0.5``."""
    return f"adam-p@{p:g}"


class DialSpec(SensingExperiment):
    """The Adam-p dial (PROTOCOLS §4); every default is the reference protocol.

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
                )
                record_result(run, result, self.steps)
            if self.gd_reference:
                result = train_rule(self, batch, "gd", self.gd_lrs, decay=self.decays("gd"))
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
        outcomes: every run's outcome (failures included).
    """

    spec: DialSpec
    study: str
    points: list[DialPoint]
    gd: DialPoint | None
    planted_effective_rank: float
    monotone: bool
    outcomes: list[RunOutcome] = field(default_factory=list)

    @property
    def failures(self) -> list[RunOutcome]:
        """Runs that did not complete."""
        return [o for o in self.outcomes if o.termination != "completed"]


def dial_runs(spec: DialSpec) -> list[DialSpec]:
    """The study's runs: one per p (``ps = (p,)``) and one for gd (``ps = ()``)."""
    data = spec.model_dump()
    runs = [DialSpec.model_validate({**data, "ps": (p,), "gd_reference": False}) for p in spec.ps]
    if spec.gd_reference:
        runs.append(DialSpec.model_validate({**data, "ps": (), "gd_reference": True}))
    return runs


def _planted_effective_rank(spec: DialSpec) -> float:
    batch = SensingBatch.build(spec)
    return float(effective_rank(batch.target.to(torch.float64)).mean())


def collect_dial(spec: DialSpec, study: str, outcomes: list[RunOutcome]) -> DialResult:
    """Build the :class:`DialResult` from the runs' outcomes (see :func:`run_dial`)."""
    results: dict[str, RuleResult] = {}
    for outcome in outcomes:
        for label, data in outcome.results.items():
            results[label] = RuleResult.from_dict(data)
    points = [_point(p, results[dial_label(p)]) for p in spec.ps if dial_label(p) in results]
    gd = _point(float("nan"), results[GD_LABEL]) if GD_LABEL in results else None
    monotone = len(points) >= 2 and is_monotone(
        [pt.p for pt in points], [pt.mean_recovery for pt in points]
    )
    return DialResult(spec, study, points, gd, _planted_effective_rank(spec), monotone, outcomes)


def run_dial(
    spec: DialSpec | None = None,
    *,
    store: Any = DEFAULT_STORE_PATH,
    study: str | None = None,
    workers: int = 1,
    threads: int = 1,
    progress: Progress | None = None,
) -> DialResult:
    """Run the dial as a study (one run per p, plus gd) and collect both arms.

    Args:
        spec: the protocol (default: the reference, :class:`DialSpec()`).
        store, study, workers, threads, progress: as :func:`gaugelab.experiments.zoo.run_zoo`.

    Returns:
        The :class:`DialResult`; failed runs are in ``result.failures``.

    Raises:
        ValueError: bad ``workers``; a study name already used by another spec.

    Source: singh2026lossbasis, §7; PROTOCOLS §4.
    """
    spec = spec or DialSpec()
    study = study or default_study_name(spec)
    outcomes = run_study(
        study,
        spec,
        dial_runs(spec),
        store=store,
        workers=workers,
        threads=threads,
        progress=progress,
    )
    return collect_dial(spec, study, outcomes)
