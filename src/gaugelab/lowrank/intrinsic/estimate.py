"""The d90 grid estimate: thresholds, seed aggregation, crossing, bracket and censoring.

``d̂90^G = min{d ∈ G : A_s[max_h S(d, s, h)] ≥ target}`` — the first passing *tested* value of
the grid, never the exact minimum. ``S(d, s, h)`` is the *evaluation* score of trial ``h`` and
``max_h`` its maximum over the seed's scored trials (the best of trials, not the evaluation score
of a trial picked by another score), ``A_s`` the declared seed aggregator (median by default)
over *every* declared seed — a seed whose trials all failed stays in it as
:data:`FAILED_SEED_SCORE` (``−inf``: it counts as not passing), it is never dropped so that the
aggregate runs over the survivors — and the target either the historical ``0.9 · S_full`` (a
ratio that only a non-negative, higher-is-better score supports; anything else needs a
:class:`QualityTransform`) or the normalized-gain alternative ``S_base + τ (S_full − S_base)``.
A tested ``d`` at which every seed failed is a *failing* ``d`` like any other. Scores are never
smoothed by a cumulative maximum; every raw trial record (failed ones too) is kept in the result.

Source: seed 003 §0x02F (the estimate and thresholds), §0x02G (crossing, bracket, censoring,
non-monotonicity), §0x02J (the pseudocode), §0x02K (the result's envelope).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gaugelab.lowrank.intrinsic.thresholds import (
    ACCURACY,
    QualityTransform,
    ThresholdRule,
    historical_threshold,
    normalized_gain,
    normalized_gain_threshold,
)

__all__ = [
    "AGGREGATORS",
    "BOUNDARY_STATES",
    "FAILED_SEED_SCORE",
    "NON_IMPLICATIONS",
    "DimensionSummary",
    "GridCrossing",
    "IntrinsicDimensionEstimate",
    "QualityTransform",
    "ThresholdRule",
    "TrialRecord",
    "classify_grid_crossing",
    "estimate_from_records",
    "historical_threshold",
    "normalized_gain",
    "normalized_gain_threshold",
]

AGGREGATORS: dict[str, Callable[[Sequence[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "min": min,
}
"""Declared seed aggregators ``A_s`` by name."""

FAILED_SEED_SCORE = -math.inf
"""The score a seed without any scored trial at ``d`` enters the seed aggregate with: below every
target, so a failed seed counts as not passing (§0x02J: failed seeds are never overwritten)."""

BOUNDARY_STATES = ("crossed", "left-censored", "right-censored")
"""§0x02G's three states: crossed within the grid (the first passing tested ``d`` is not the
first tested ``d``; bracket ``(previous tested d, first passing d]``); left-censored (the first
tested ``d`` already passes: report ``d90 <= d_min``); right-censored or optimization-unreached
(no tested ``d`` passes: report ``> d_max / unresolved``). A ``d`` at which every seed failed is
a failing ``d``: it can be the bracket's lower end, and it never makes a later pass
left-censored."""

NON_IMPLICATIONS = (
    "that every random subspace of dimension d succeeds",
    "that the exact minimum lies at the first passing grid value",
    "that another projection family has the same coordinate geometry",
    "that a per-layer update has matrix rank d",
    "that a LoRA adapter with rank d is equivalent",
    "that lower protocol dimension causes better generalization",
    "that source-reported model-size trends extrapolate universally",
)
"""§0x02K: what a d90 estimate does not establish."""


@dataclass(frozen=True)
class TrialRecord:
    """One stored trial ``(d, seed, hyperparameters)``, append-only.

    Attributes:
        d: the coordinate budget (SAID: the total, scales included).
        seed: the projection/training seed.
        hyperparameters: the trial's hyperparameters (e.g. ``{"lr": 0.01}``).
        status: ``completed``, ``degenerate`` (SAID ``d = m``: no update; scored untrained) or
            a failure class (kept, never selected).
        selection_score, score: the metric on the selection and evaluation splits (``None``
            unless scored); ``score`` is ``S(d, s, h)``, the one the best of trials maximizes.
        identity: the run's identity in the store; projection: the projection's identity.
        message: why it failed, if it did.
    """

    d: int
    seed: int
    hyperparameters: Mapping[str, Any]
    status: str
    selection_score: float | None = None
    score: float | None = None
    identity: str = ""
    projection: Mapping[str, Any] | None = None
    message: str = ""

    @property
    def scored(self) -> bool:
        """Completed (or degenerate) with a finite evaluation score."""
        return (
            self.status in ("completed", "degenerate")
            and self.score is not None
            and math.isfinite(self.score)
        )


@dataclass
class DimensionSummary:
    """One grid value: the best of trials per seed and their aggregate over every seed.

    Attributes:
        d: the budget; seed_scores: scored seed → ``max_h`` of its trials' evaluation quality;
            selected: scored seed → the hyperparameters of that best trial; failed_seeds:
            seeds without any scored trial (in the aggregate as :data:`FAILED_SEED_SCORE`,
            listed); aggregate: ``A_s`` over every declared seed (``−inf`` when the failed
            seeds decide it, e.g. all of them); passes: ``aggregate >= target``; degenerate:
            every trial was a no-update budget.
    """

    d: int
    seed_scores: dict[int, float] = field(default_factory=dict)
    selected: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed_seeds: list[int] = field(default_factory=list)
    aggregate: float = FAILED_SEED_SCORE
    passes: bool = False
    degenerate: bool = False

    @property
    def all_failed(self) -> bool:
        """No seed was scored at this ``d`` (a failing ``d``, never an unmeasured one)."""
        return not self.seed_scores


@dataclass(frozen=True)
class GridCrossing:
    """Where the aggregate first reaches the target on the tested grid.

    Attributes:
        state: one of :data:`BOUNDARY_STATES`.
        estimate: the first passing tested ``d`` when crossed, else ``None`` (never ``d_min``
            or ``d_max`` standing in for a censored estimate).
        bracket: ``(previous tested d, first passing d]`` when crossed, else ``None``.
        statement: how to report it: ``d90 = 6 on the grid, bracket (4, 6]``, ``d90 <= 4
            (left-censored)``, ``d90 > 8 / unresolved (right-censored)``.
        failing_after: tested ``d`` above the first passing one whose aggregate fails again
            (non-monotone scores, kept as measured).
        all_failed: tested ``d`` at which every seed failed: failing ``d``, named in the
            statement.
    """

    state: str
    estimate: int | None
    bracket: tuple[int, int] | None
    statement: str
    failing_after: tuple[int, ...] = ()
    all_failed: tuple[int, ...] = ()


def classify_grid_crossing(
    scores: Sequence[tuple[int, float | None]] | Sequence[DimensionSummary], target: float
) -> GridCrossing:
    """Classify the grid's boundary state from the aggregated score per tested ``d``.

    Every tested ``d`` takes part; an aggregate of ``−inf`` (failed seeds decide it) fails. A
    ``d`` at which every seed failed (a ``None`` aggregate, or a :class:`DimensionSummary` with
    no scored seed) is a *failing* ``d``: when a later ``d`` passes, the state is ``crossed``
    with the failing ``d`` before it as the bracket's lower end — never ``left-censored``, which
    is only the first tested ``d`` passing.

    Args:
        scores: ``(d, aggregate)`` pairs or :class:`DimensionSummary` (any order; aggregate
            ``None``: every seed failed; ``−inf``: the failed seeds decide the aggregate).
        target: the threshold on the quality scale.

    Returns:
        The :class:`GridCrossing`; the first passing tested ``d`` is the estimate, with no
        cumulative maximum taken over the scores.

    Raises:
        ValueError: an empty grid, repeated ``d``, a non-finite target, or an aggregate that
            is NaN or ``+inf``.

    Source: seed 003 §0x02G.
    """
    rows: list[tuple[int, float, bool]] = []  # (d, aggregate, every seed failed)
    for s in scores:
        if isinstance(s, DimensionSummary):
            rows.append((s.d, s.aggregate, s.all_failed))
        else:
            d, a = int(s[0]), s[1]
            rows.append((d, FAILED_SEED_SCORE if a is None else float(a), a is None))
    if not rows:
        raise ValueError("classify_grid_crossing: scores is empty; allowed: at least one d")
    dims = [d for d, _, _ in rows]
    if len(set(dims)) != len(dims):
        raise ValueError(f"classify_grid_crossing: repeated d in {dims}")
    if not math.isfinite(target):
        raise ValueError(f"classify_grid_crossing: target={target}; allowed: a finite number")
    for d, a, _ in rows:
        if math.isnan(a) or a == math.inf:
            raise ValueError(
                f"classify_grid_crossing: aggregate={a} at d={d}; allowed: a finite number, "
                "-inf or None (every seed failed)"
            )
    rows.sort()
    all_failed = tuple(d for d, _, failed in rows if failed)
    note = f"; every seed failed at d = {', '.join(map(str, all_failed))}" if all_failed else ""
    passing = [a >= target for _, a, _ in rows]
    if not any(passing):
        return GridCrossing(
            "right-censored",
            None,
            None,
            f"d90 > {rows[-1][0]} / unresolved (right-censored: no tested d passes{note})",
            all_failed=all_failed,
        )
    first = passing.index(True)
    after = tuple(d for (d, _, _), ok in zip(rows[first:], passing[first:], strict=True) if not ok)
    if first == 0:
        return GridCrossing(
            "left-censored",
            None,
            None,
            f"d90 <= {rows[0][0]} (left-censored: the first tested d passes{note})",
            after,
            all_failed,
        )
    lo, hi = rows[first - 1][0], rows[first][0]
    return GridCrossing(
        "crossed",
        hi,
        (lo, hi),
        f"d90 = {hi} on the tested grid, bracket ({lo}, {hi}]{note}",
        after,
        all_failed,
    )


@dataclass
class IntrinsicDimensionEstimate:
    """The d90 result with its whole envelope (seed 003 §0x02K).

    Attributes:
        method: ``DID`` or ``SAID``; grid: the tested ``d``; seeds: the projection seeds.
        crossing: the :class:`GridCrossing` (state, estimate, bracket, statement).
        summaries: one :class:`DimensionSummary` per tested ``d``.
        records: every raw trial (failed ones too), as stored.
        full_score, base_score: the references (metric units); target: the threshold on the
            quality scale; threshold: the rule's description; metric: the
            :class:`QualityTransform`'s description.
        aggregator: the seed aggregator's name; selection: the selection rule.
        budget: the optimizer and search budget (optimizer, steps, batch, hyperparameters).
        projections: the family and normalization (and the identity of each trial's map).
        ledger: what ``d`` counts (SAID scales; a head inside ``d`` or disclosed).
        meaning: what the estimate is; non_implications: what it does not establish.
    """

    method: str
    grid: list[int]
    seeds: list[int]
    crossing: GridCrossing
    summaries: list[DimensionSummary]
    records: list[TrialRecord]
    full_score: float
    base_score: float | None
    target: float
    threshold: str
    metric: dict[str, Any]
    aggregator: str
    selection: str
    budget: dict[str, Any] = field(default_factory=dict)
    projections: dict[str, Any] = field(default_factory=dict)
    ledger: dict[str, Any] = field(default_factory=dict)
    meaning: str = (
        "an empirical upper-bound estimate under the sampled subspaces and training "
        "procedure: failure at d does not prove that no useful d-dimensional "
        "subspace exists"
    )
    non_implications: tuple[str, ...] = NON_IMPLICATIONS

    def as_dict(self) -> dict[str, Any]:
        """JSON-able (tuples as lists)."""
        return asdict(self)


SELECTION = (
    "per (d, seed): max over its scored trials h of the evaluation-split score S(d, s, h) "
    "(ties: the first in the declared hyperparameter order); a seed with no scored trial "
    "enters the seed aggregate as -inf (not passing)"
)


def estimate_from_records(
    records: Sequence[TrialRecord],
    *,
    grid: Sequence[int],
    seeds: Sequence[int],
    full_score: float,
    base_score: float | None,
    rule: ThresholdRule = ThresholdRule(),
    aggregator: str = "median",
    transform: QualityTransform = ACCURACY,
    method: str = "DID",
    budget: Mapping[str, Any] | None = None,
    projections: Mapping[str, Any] | None = None,
    ledger: Mapping[str, Any] | None = None,
) -> IntrinsicDimensionEstimate:
    """The seed's pseudocode (§0x02J) on stored trial records: best of trials, aggregate, classify.

    Per ``(d, seed)`` the seed's score is ``max_h S(d, s, h)``, the highest evaluation quality
    over its scored trials (ties: the first record). A seed without a scored trial at ``d``
    enters ``A_s`` as :data:`FAILED_SEED_SCORE` and counts as not passing; the aggregate always
    runs over every declared seed.

    Args:
        records: every trial (any order; failed ones are kept and never chosen).
        grid: the declared candidate dimensions; seeds: the declared projection seeds.
        full_score, base_score: the full fine-tuning reference and the base (untrained-
            coordinates) score, metric units.
        rule: the :class:`ThresholdRule`; aggregator: a key of :data:`AGGREGATORS`;
            transform: the metric's :class:`QualityTransform` (scores are transformed before
            the maximum over trials, aggregation and comparison).
        method, budget, projections, ledger: recorded in the result (§0x02K).

    Returns:
        The :class:`IntrinsicDimensionEstimate`.

    Raises:
        ValueError: an unknown aggregator, an empty grid or seed list, a record whose ``d``
            or seed is not declared, or what the threshold rule raises.

    Source: seed 003 §0x02F, §0x02J, §0x02K.
    """
    if aggregator not in AGGREGATORS:
        raise ValueError(
            f"estimate_from_records: aggregator={aggregator!r}; allowed: {', '.join(AGGREGATORS)}"
        )
    if not grid or not seeds:
        raise ValueError("estimate_from_records: grid and seeds must be non-empty")
    for r in records:
        if r.d not in grid or r.seed not in seeds:
            raise ValueError(
                f"estimate_from_records: a record at d={r.d}, seed={r.seed} is "
                f"outside the declared grid {list(grid)} / seeds {list(seeds)}"
            )
    target = rule.target(full_score, base_score, transform)
    summaries = []
    for d in sorted(grid):
        summary = DimensionSummary(d)
        at_d = [r for r in records if r.d == d]
        summary.degenerate = bool(at_d) and all(r.status == "degenerate" for r in at_d)
        per_seed = []
        for s in seeds:
            trials = [r for r in at_d if r.seed == s and r.scored]
            if not trials:
                summary.failed_seeds.append(s)
                per_seed.append(FAILED_SEED_SCORE)
                continue
            best = max(trials, key=lambda r: transform(r.score))  # max_h S(d, s, h); first of ties
            summary.seed_scores[s] = transform(best.score)
            summary.selected[s] = dict(best.hyperparameters)
            per_seed.append(summary.seed_scores[s])
        summary.aggregate = float(AGGREGATORS[aggregator](per_seed))
        summary.passes = summary.aggregate >= target
        summaries.append(summary)
    return IntrinsicDimensionEstimate(
        method=method,
        grid=sorted(grid),
        seeds=list(seeds),
        crossing=classify_grid_crossing(summaries, target),
        summaries=summaries,
        records=list(records),
        full_score=full_score,
        base_score=base_score,
        target=target,
        threshold=rule.describe(),
        metric=transform.describe(),
        aggregator=aggregator,
        selection=SELECTION,
        budget=dict(budget or {}),
        projections=dict(projections or {}),
        ledger=dict(ledger or {}),
    )
