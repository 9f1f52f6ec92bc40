"""The sensing experiments' configurations: :class:`ZooSpec` (the optimizer zoo,
docs/protocols.md §3) and :class:`DialSpec` (the Adam-p dial, §4), each one run per rule or p
of the study, trained by :func:`~gaugelab.experiments.sensing.train.train_rule`.

Source: singh2026lossbasis, §5 and §7; docs/protocols.md §3–§4.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gaugelab.determinism import deterministic
from gaugelab.experiments.sensing.convex import (
    CONVEX,
    nuclear_norm_reference,
)
from gaugelab.experiments.sensing.grids import LearningRateGrids, positive_rates
from gaugelab.experiments.sensing.problem import (
    SensingBatch,
    SensingExperiment,
)
from gaugelab.experiments.sensing.records import record_result
from gaugelab.experiments.sensing.train import train_rule
from gaugelab.optim import OPTIMIZERS

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


def default_study_name(spec: SensingExperiment) -> str:
    """``{kind}-{identity[:12]}``: the same spec always names the same study."""
    return f"{spec.kind}-{spec.identity()[:12]}"


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

    _check_lrs = field_validator("lrs", "gd_lrs")(positive_rates)

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
