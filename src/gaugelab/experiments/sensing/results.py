"""The sensing studies read back: the zoo's rows (:class:`ZooRow`, :class:`ZooResult`) and the
dial's points (:class:`DialPoint`, :class:`DialResult`), each at the rate the protocol's
selection rule picks.

Source: docs/protocols.md §3 (rate selection, the table), §4 (the dial's two arms).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gaugelab.experiments.sensing.problem import (
    COORDINATEWISE_CLASS,
    EQUIVARIANT_CLASS,
)
from gaugelab.experiments.sensing.rates import RateChoice, select_rate
from gaugelab.experiments.sensing.records import INTERPOLATED, RuleResult
from gaugelab.experiments.sensing.spec import (
    DialSpec,
    ZooSpec,
)
from gaugelab.experiments.sensing.split import SplitVerdict
from gaugelab.optim import CLAIMS, EQUIVARIANT
from gaugelab.study.store.results import RunState


def rule_class(rule: str) -> str:
    """``"equivariant"`` (the zoo claims orthogonal equivariance) or ``"coordinatewise"``."""
    prop = CLAIMS[rule]["orthogonal"].property
    return EQUIVARIANT_CLASS if prop == EQUIVARIANT else COORDINATEWISE_CLASS


@dataclass
class ZooRow:
    """One row of the zoo table: a rule at its chosen learning rate (per-seed lists).

    ``recovery`` etc. are ``[S]`` at the chosen rate (empty when no rate qualifies).
    """

    rule: str
    klass: str
    choice: RateChoice
    decayed: bool
    seeds: list[int]
    recovery: list[float]
    loss: list[float]
    effective_rank: list[float]
    balancedness: list[float]
    steps: list[int]
    status: list[str]
    spectra: list[list[float]]
    grid: RuleResult

    @property
    def mean_recovery(self) -> float:
        """Mean recovery error over seeds (NaN when no rate qualifies)."""
        return _mean(self.recovery)

    @classmethod
    def from_result(cls, result: RuleResult, klass: str) -> ZooRow:
        """The row of ``result`` at the rate :func:`select_rate` picks."""
        choice = select_rate(result)
        j = choice.index

        def at(values: list[list[Any]]) -> list[Any]:
            return [] if j is None else [row[j] for row in values]

        return cls(
            rule=result.rule,
            klass=klass,
            choice=choice,
            decayed=result.decayed,
            seeds=result.seeds,
            recovery=at(result.recovery),
            loss=at(result.loss),
            effective_rank=at(result.effective_rank),
            balancedness=at(result.balancedness),
            steps=at(result.steps),
            status=at(result.status),
            spectra=at(result.spectra),
            grid=result,
        )


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


@dataclass
class ZooResult:
    """The zoo as read back from the run store.

    Attributes:
        spec: the study's spec.
        study: the study's name.
        rows: one :class:`ZooRow` per rule that completed, in the spec's order.
        convex: the convex reference row, if run and completed.
        split: the :class:`SplitVerdict` over ``rows`` (``None`` if a class is missing).
        runs: every run of the study with its latest termination (failures included).
        convex_skipped: why the convex row was not run (cvxpy missing when the study was
            planned: ``"skipped: install gaugelab[convex] …"``), else ``None``.
    """

    spec: ZooSpec
    study: str
    rows: list[ZooRow]
    convex: ZooRow | None
    split: SplitVerdict | None
    runs: list[RunState] = field(default_factory=list)
    convex_skipped: str | None = None

    @property
    def failures(self) -> list[RunState]:
        """Runs that ended without completing (running ones are not failures)."""
        return [r for r in self.runs if r.failed]


@dataclass
class DialPoint:
    """One p of the dial.

    Attributes:
        p: the dial setting.
        choice: the per-p arm's rate (:func:`select_rate`).
        recovery, effective_rank: ``[S]`` at the chosen rate (empty if none qualifies); the
            effective rank is Roy–Vetterli's (docs/protocols.md §3).
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


def dial_point(p: float, result: RuleResult) -> DialPoint:
    """The :class:`DialPoint` of setting ``p``: its result at the rate :func:`select_rate`
    picks."""
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
        planted_effective_rank: mean Roy–Vetterli effective rank of the planted targets.
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
        """Runs that ended without completing (running ones are not failures)."""
        return [r for r in self.runs if r.failed]
