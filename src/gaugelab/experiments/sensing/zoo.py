"""The matrix-sensing optimizer zoo: every rule on the docs/protocols.md §3 testbed, one table.

For each rule, every (seed × learning rate) trains as one ensemble (see ``_training``); the
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from gaugelab.determinism import deterministic
from gaugelab.experiments.sensing.convex import (
    CONVEX,
    CONVEX_SKIPPED,
    convex_missing,
    nuclear_norm_reference,
)
from gaugelab.experiments.sensing.grids import LearningRateGrids
from gaugelab.experiments.sensing.problem import (
    COORDINATEWISE_CLASS,
    EQUIVARIANT_CLASS,
    SensingBatch,
    SensingExperiment,
)
from gaugelab.experiments.sensing.rates import RateChoice, select_rate
from gaugelab.experiments.sensing.results import RuleResult, read_study, record_result
from gaugelab.experiments.sensing.split import SplitVerdict, split_verdict
from gaugelab.experiments.sensing.train import train_rule
from gaugelab.experiments.sensing.views import zoo_report, zoo_tables
from gaugelab.optim import CLAIMS, EQUIVARIANT, OPTIMIZERS
from gaugelab.study.experiment import (
    RunState,
    StudyOutcome,
    run_experiment,
)
from gaugelab.study.report.builder import Table
from gaugelab.study.store.db import RunStore
from gaugelab.study.sweep import Sweep

__all__ = [
    "CONVEX",
    "DECAYED",
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

ZOO_RULES = (
    "gd",
    "adam",
    "scalar-adam",
    "rmsprop",
    "signum",
    "lion",
    "adafactor",
    "muon",
    "shampoo",
)
"""The rules of the reference zoo (docs/protocols.md §3 targets), in table order."""
DECAYED = ("muon", "signum", "lion", "rmsprop")
"""The rules on the cosine schedule in the reference protocol."""


class ZooSpec(SensingExperiment):
    """The optimizer zoo (docs/protocols.md §3). Every default is the reference protocol, except the
    learning-rate grids, which are ours (see :class:`LearningRateGrids`).

    ``execute(run)`` trains every rule of :attr:`rules` (and the convex row when
    :attr:`convex`) and records each rule's metrics and ``result`` artifact.
    """

    kind: ClassVar[str] = "zoo"

    rules: tuple[str, ...] = Field(
        ZOO_RULES, description="Rules to run (registry names; adam-p belongs to the dial)."
    )
    decayed: tuple[str, ...] = Field(
        DECAYED, description="Rules on the cosine schedule when schedule = reference (§3)."
    )
    lr_grids: LearningRateGrids = Field(
        default_factory=LearningRateGrids, description="Learning-rate grid per rule (ours)."
    )
    convex: bool = Field(
        True, description="Add the minimum-nuclear-norm reference row (cvxpy + SCS)."
    )

    @field_validator("rules", "decayed")
    @classmethod
    def _known_rules(cls, rules: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [r for r in rules if r not in OPTIMIZERS or r == "adam-p"]
        if unknown:
            known = ", ".join(r for r in OPTIMIZERS if r != "adam-p")
            raise ValueError(f"unknown rule(s) {unknown}; allowed: {known}")
        if len(set(rules)) != len(rules):
            raise ValueError(f"rules {rules} repeat a rule")
        return rules

    @model_validator(mode="after")
    def _has_work(self) -> ZooSpec:
        if not self.rules and not self.convex:
            raise ValueError("ZooSpec: no rules and convex=False: nothing to run")
        return self

    def labels(self) -> list[str]:
        """The rows this spec produces (rules, then the convex row)."""
        return list(self.rules) + ([CONVEX] if self.convex else [])

    def execute(self, run: Any) -> None:
        """Train every rule as one ensemble of (seed × rate) and record it; then the convex row.

        Each rule checkpoints into ``run`` (see :func:`train_rule`) and resumes from there.

        Raises:
            ValueError: bad hyperparameters (from the zoo).
        """
        with deterministic():
            batch = SensingBatch.build(self)
            for rule in self.rules:
                result = train_rule(
                    self,
                    batch,
                    rule,
                    self.lr_grids.grid(rule),
                    decay=self.decays(rule, self.decayed),
                    run=run,
                )
                record_result(run, result, self.steps)
        if self.convex:
            record_result(run, nuclear_norm_reference(self, batch), self.steps)


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
        """Runs that did not complete."""
        return [r for r in self.runs if not r.completed]


def default_study_name(spec: SensingExperiment) -> str:
    """``{kind}-{identity[:12]}``: the same spec always names the same study."""
    return f"{spec.kind}-{spec.identity()[:12]}"


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
    spec: ZooSpec | None = None, *, study: str | None = None, **options: Any
) -> StudyOutcome[ZooResult]:
    """Run the zoo as a study, collect the table and write the report.

    Runs already completed in the store are not run again (same spec ⇒ same identity); a run
    killed mid-way resumes from its latest checkpoint.

    Args:
        spec: the protocol (default: the reference, :class:`ZooSpec()`).
        study: the study name (default ``zoo-<identity prefix>``).
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
    return run_experiment(plan(spec or ZooSpec(), study), collect, report, **options)
