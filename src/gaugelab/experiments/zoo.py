"""The matrix-sensing optimizer zoo: every rule on the PROTOCOLS §3 testbed, one table.

For each rule, every (seed × learning rate) trains as one ensemble (see ``_engine``); the rate
is chosen by the protocol's rule; the table reports recovery error, train loss, effective rank,
balancedness and steps; the *split* compares the worst orthogonally equivariant rule with the
best coordinatewise one. A convex reference row (minimum nuclear norm subject to the
measurements, by cvxpy + SCS) is added when cvxpy is installed (``gaugelab[convex]``).

The study has one run per rule (plus one for the convex row): each is resumable on its own, a
failure of one rule does not lose the others, and rules can run in parallel worker processes.

Source: singh2026lossbasis, §5 (the zoo) and Table 6 (schedule control); PROTOCOLS §3.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gaugelab.determinism import deterministic
from gaugelab.experiments._engine import (
    INTERPOLATED,
    PROGRESS,
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
from gaugelab.optim import CLAIMS, EQUIVARIANT, OPTIMIZERS
from gaugelab.study.store import DEFAULT_STORE_PATH
from gaugelab.tasks import effective_rank

__all__ = [
    "CONVEX",
    "DECAYED",
    "ZOO_RULES",
    "LearningRateGrids",
    "SplitVerdict",
    "ZooResult",
    "ZooRow",
    "ZooSpec",
    "collect_zoo",
    "nuclear_norm_reference",
    "rule_class",
    "run_zoo",
    "split_verdict",
    "zoo_runs",
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
"""The rules of the reference zoo (PROTOCOLS §3 targets), in table order."""
DECAYED = ("muon", "signum", "lion", "rmsprop")
"""The rules on the cosine schedule in the reference protocol."""
CONVEX = "nuclear-norm"
"""Label of the convex reference row."""
EQUIVARIANT_CLASS, COORDINATEWISE_CLASS = "equivariant", "coordinatewise"


def _grid(default: tuple[float, ...], why: str) -> Any:
    return Field(default, min_length=1, description=why)


class LearningRateGrids(BaseModel):
    """Learning-rate grid per rule: four half-decade rates. **Ours** — the reference grids are
    not published (PROTOCOLS §3 gives only the selection rule).

    One principle: Adam's grid ``{1e-3, 3e-3, 1e-2, 3e-2}`` scaled by the rule's typical
    per-entry step relative to Adam's. Sign updates (signum, sign-sgd, lion) move every entry by
    the full η every step, and so do momentum-free normalised updates (rmsprop, adafactor, whose
    ``G/√v`` has RMS ≈ 1): 10× smaller (the Lion convention of a 3–10× smaller rate than
    Adam). msign steps have spectral norm ≈ 1, entries ≈ 1/√n: 3× larger. gd and shampoo
    (which is gd-like while its damping λ = 1 dominates) are not normalised: their grids end
    at the measured stability edge on the n = 40 testbed (1e-1 diverges within 10 steps).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gd: tuple[float, ...] = _grid(
        (1e-3, 3e-3, 1e-2, 3e-2), "gd (ours): up to the stability edge (1e-1 diverges)."
    )
    heavy_ball: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "heavy-ball (ours): gd's / 10, as the sum-form μ = 0.9 does."
    )
    nesterov: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "nesterov (ours): gd's / 10, as the sum-form μ = 0.9 does."
    )
    adam: tuple[float, ...] = _grid((1e-3, 3e-3, 1e-2, 3e-2), "adam (ours): the base grid.")
    adamw: tuple[float, ...] = _grid((1e-3, 3e-3, 1e-2, 3e-2), "adamw (ours): adam's.")
    rmsprop: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "rmsprop (ours): adam's / 10 (momentum-free, RMS step ≈ η)."
    )
    signum: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "signum (ours): adam's / 10 (full-η sign steps)."
    )
    sign_sgd: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "sign-sgd (ours): adam's / 10 (full-η sign steps)."
    )
    lion: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "lion (ours): adam's / 10 (full-η sign steps)."
    )
    adafactor: tuple[float, ...] = _grid(
        (1e-4, 3e-4, 1e-3, 3e-3), "adafactor (ours): adam's / 10 (momentum-free, RMS step ≈ η)."
    )
    scalar_adam: tuple[float, ...] = _grid((1e-3, 3e-3, 1e-2, 3e-2), "scalar-adam (ours): adam's.")
    muon: tuple[float, ...] = _grid(
        (3e-3, 1e-2, 3e-2, 1e-1), "muon (ours): adam's × 3 (msign entries ≈ 1/√n)."
    )
    shampoo: tuple[float, ...] = _grid(
        (3e-3, 1e-2, 3e-2, 1e-1), "shampoo (ours): gd-like, up to the stability edge."
    )

    def grid(self, rule: str) -> tuple[float, ...]:
        """The grid of registry name ``rule``.

        Raises:
            ValueError: no grid for ``rule``.
        """
        key = rule.replace("-", "_")
        if key not in type(self).model_fields:
            known = ", ".join(f.replace("_", "-") for f in type(self).model_fields)
            raise ValueError(f"LearningRateGrids.grid: rule={rule!r}; rules with a grid: {known}")
        return getattr(self, key)

    @field_validator("*")
    @classmethod
    def _positive(cls, grid: tuple[float, ...]) -> tuple[float, ...]:
        if any(not (math.isfinite(x) and x > 0) for x in grid):
            raise ValueError(f"learning rates {grid}; allowed: finite numbers > 0")
        return grid


class ZooSpec(SensingExperiment):
    """The optimizer zoo (PROTOCOLS §3). Every default is the reference protocol, except the
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
                )
                record_result(run, result, self.steps)
        if self.convex:
            record_result(run, nuclear_norm_reference(self, batch), self.steps)


def nuclear_norm_reference(spec: SensingExperiment, batch: SensingBatch) -> RuleResult:
    """The convex reference: ``min ‖X‖_* s.t. A vec(X) = y`` per seed, by cvxpy with SCS.

    Always solved in float64, on the float64 instance (the same float32 draws, ``y`` formed in
    float64; a float32 ``y`` is not exactly consistent and SCS stalls on it), with SCS
    tolerances ``eps_abs = eps_rel = 1e-9`` (**ours**; 1e-6 leaves errors of ~1e-4) and at most
    100,000 iterations, so a recovery error below ~1e-6 means exact recovery. The recovery error
    is measured against ``batch.target``. At the reference m = 462 the convex program does not
    recover every instance (seed 456: 0.100 with SCS and with Clarabel — its minimiser has a
    smaller nuclear norm than ``X*``). Recorded as a :class:`RuleResult` with one "rate" (0)
    and status ``interpolated`` when SCS reports ``optimal``, else ``budget``.

    Raises:
        ImportError: cvxpy is not installed (``pip install 'gaugelab[convex]'``).

    Source: recht2010guaranteed (nuclear-norm minimisation); the solver: SCS
    (odonoghue2016conic) through cvxpy (diamond2016cvxpy).
    """
    try:
        import cvxpy as cp
    except ImportError:
        raise ImportError(
            "the convex reference row needs cvxpy with SCS: pip install 'gaugelab[convex]' "
            "(or pass convex=False / --no-convex)"
        ) from None

    start = time.perf_counter()
    exact = SensingBatch.build(spec.model_copy(update={"dtype": "float64"}))
    n = exact.target.shape[-1]
    rows: dict[str, list[list[Any]]] = {k: [] for k in ("rec", "loss", "erank", "status", "sv")}
    for s in range(len(exact.seeds)):
        A, y = exact.A[s].numpy(), exact.y[s].numpy()
        X = cp.Variable((n, n))
        problem = cp.Problem(cp.Minimize(cp.normNuc(X)), [A @ cp.vec(X, order="C") == y])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "may be inaccurate": see the status
            problem.solve(solver=cp.SCS, eps_abs=1e-9, eps_rel=1e-9, max_iters=100_000)
        W = torch.as_tensor(np.asarray(X.value, dtype=np.float64))
        rows["rec"].append(
            [
                float(
                    torch.linalg.matrix_norm(W - batch.target[s].double())
                    / torch.linalg.matrix_norm(batch.target[s].double())
                )
            ]
        )
        residual = exact.A[s] @ W.reshape(-1) - exact.y[s]  # [m]
        rows["loss"].append([float((residual * residual).mean())])
        rows["erank"].append([float(effective_rank(W))])
        rows["status"].append([INTERPOLATED if problem.status == "optimal" else "budget"])
        rows["sv"].append([torch.linalg.svdvals(W).tolist()])
        progress = PROGRESS.get()
        if progress is not None:
            progress(CONVEX, (s + 1) * spec.steps // len(exact.seeds), spec.steps)
    return RuleResult(
        rule=CONVEX,
        hyper={"solver": "SCS", "eps": 1e-9},
        decayed=False,
        lrs=[0.0],
        seeds=list(exact.seeds),
        recovery=rows["rec"],
        loss=rows["loss"],
        effective_rank=rows["erank"],
        balancedness=[[float("nan")] for _ in exact.seeds],
        steps=[[0] for _ in exact.seeds],
        status=rows["status"],
        spectra=rows["sv"],
        curve_steps=[],
        curve_loss=[],
        curve_recovery=[],
        seconds=time.perf_counter() - start,
    )


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


@dataclass(frozen=True)
class SplitVerdict:
    """Worst orthogonally equivariant rule against the best coordinatewise rule.

    Attributes:
        worst_equivariant, worst_equivariant_recovery: the equivariant rule with the highest
            mean recovery error, and that error.
        best_coordinatewise, best_coordinatewise_recovery: the coordinatewise rule with the
            lowest mean recovery error, and that error.
        gap: ``best_coordinatewise_recovery − worst_equivariant_recovery``.
        clean: ``gap > 0`` — every equivariant rule recovers better than every coordinatewise
            rule.
        classified, total: rules on the correct side of the best single threshold on mean
            recovery error, out of all compared rules (the reference: 9/9).
    """

    worst_equivariant: str
    worst_equivariant_recovery: float
    best_coordinatewise: str
    best_coordinatewise_recovery: float
    gap: float
    clean: bool
    classified: int
    total: int

    def sentence(self) -> str:
        """The verdict in one line."""
        word = "clean split" if self.clean else "no clean split"
        return (
            f"{word}: worst equivariant {self.worst_equivariant} "
            f"{self.worst_equivariant_recovery:.3f} vs best coordinatewise "
            f"{self.best_coordinatewise} {self.best_coordinatewise_recovery:.3f} "
            f"(gap {self.gap:+.3f}); {self.classified}/{self.total} classified by one threshold"
        )


def split_verdict(recoveries: dict[str, float], classes: dict[str, str]) -> SplitVerdict | None:
    """The split of mean recovery errors by class.

    Args:
        recoveries: rule → mean recovery error (NaN entries are ignored).
        classes: rule → ``"equivariant"`` or ``"coordinatewise"``.

    Returns:
        The :class:`SplitVerdict`, or ``None`` when either class has no finite entry.

    Source: singh2026lossbasis, §5 (the 9/9 classification); PROTOCOLS §3.
    """
    finite = {r: x for r, x in recoveries.items() if math.isfinite(x)}
    eq = {r: x for r, x in finite.items() if classes[r] == EQUIVARIANT_CLASS}
    co = {r: x for r, x in finite.items() if classes[r] == COORDINATEWISE_CLASS}
    if not eq or not co:
        return None
    worst = max(eq, key=lambda r: (eq[r], r))
    best = min(co, key=lambda r: (co[r], r))
    values = sorted(finite.values())
    cuts = [values[0] - 1.0] + [(a + b) / 2 for a, b in itertools.pairwise(values)]
    cuts.append(values[-1] + 1.0)
    classified = max(
        sum(x < c for x in eq.values()) + sum(x > c for x in co.values()) for c in cuts
    )
    gap = co[best] - eq[worst]
    return SplitVerdict(worst, eq[worst], best, co[best], gap, gap > 0, classified, len(finite))


@dataclass
class ZooResult:
    """The zoo as read back from the run store.

    Attributes:
        spec: the study's spec.
        study: the study's name.
        rows: one :class:`ZooRow` per rule that completed, in the spec's order.
        convex: the convex reference row, if run and completed.
        split: the :class:`SplitVerdict` over ``rows`` (``None`` if a class is missing).
        outcomes: every run's :class:`RunOutcome` (failures included).
    """

    spec: ZooSpec
    study: str
    rows: list[ZooRow]
    convex: ZooRow | None
    split: SplitVerdict | None
    outcomes: list[RunOutcome] = field(default_factory=list)

    @property
    def failures(self) -> list[RunOutcome]:
        """Runs that did not complete."""
        return [o for o in self.outcomes if o.termination != "completed"]


def zoo_runs(spec: ZooSpec) -> list[ZooSpec]:
    """The study's runs: one per rule (``rules = (rule,)``, no convex row) and, if
    ``spec.convex``, one for the convex row (``rules = ()``)."""
    data = spec.model_dump()
    runs = [ZooSpec.model_validate({**data, "rules": (r,), "convex": False}) for r in spec.rules]
    if spec.convex:
        runs.append(ZooSpec.model_validate({**data, "rules": (), "convex": True}))
    return runs


def collect_zoo(spec: ZooSpec, study: str, outcomes: list[RunOutcome]) -> ZooResult:
    """Build the :class:`ZooResult` from the runs' outcomes (see :func:`run_zoo`)."""
    results: dict[str, RuleResult] = {}
    for outcome in outcomes:
        for label, data in outcome.results.items():
            results[label] = RuleResult.from_dict(data)
    rows = [ZooRow.from_result(results[r], rule_class(r)) for r in spec.rules if r in results]
    convex = ZooRow.from_result(results[CONVEX], "convex") if CONVEX in results else None
    split = split_verdict({r.rule: r.mean_recovery for r in rows}, {r.rule: r.klass for r in rows})
    return ZooResult(spec, study, rows, convex, split, outcomes)


def default_study_name(spec: SensingExperiment) -> str:
    """``{kind}-{identity[:12]}``: the same spec always names the same study."""
    return f"{spec.kind}-{spec.identity()[:12]}"


def run_zoo(
    spec: ZooSpec | None = None,
    *,
    store: Any = DEFAULT_STORE_PATH,
    study: str | None = None,
    workers: int = 1,
    threads: int = 1,
    progress: Progress | None = None,
) -> ZooResult:
    """Run the zoo as a study (one run per rule, plus the convex row) and collect the table.

    Runs already completed in the store are not run again (same spec ⇒ same identity).

    Args:
        spec: the protocol (default: the reference, :class:`ZooSpec()`).
        store: the run store path.
        study: the study name (default ``zoo-<identity prefix>``).
        workers: worker processes (1: this process, with per-step progress).
        threads: torch threads per run process (default 1; see ``run_study``).
        progress: ``progress(label, step, total)``.

    Returns:
        The :class:`ZooResult`; failed runs are in ``result.failures``.

    Raises:
        ValueError: bad ``workers``; a study name already used by another spec.

    Source: PROTOCOLS §3.
    """
    spec = spec or ZooSpec()
    study = study or default_study_name(spec)
    outcomes = run_study(
        study,
        spec,
        zoo_runs(spec),
        store=store,
        workers=workers,
        threads=threads,
        progress=progress,
    )
    return collect_zoo(spec, study, outcomes)
