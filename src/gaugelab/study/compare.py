"""Comparison statistics for matched studies.

Four separate results, each a small function of its definition:

* ``paired_differences`` — per-seed differences over the seeds both arms share, their mean, a
  paired bootstrap interval whose resampling unit is the seed, and the descriptive range;
* ``upper_envelope`` and ``iso_quality_cost_ratio`` — the observed upper envelope over a finite
  cost grid and the iso-quality cost ratio ``C_A(q) / C_B(q)`` on its domain;
* ``pareto_front`` and ``feasible_selection`` — the non-dominated set and the constraint-feasible
  lexicographic choice, kept apart (neither calls the other);
* ``select_then_report`` — select on the validation split, then open the held-out report for the
  chosen candidate only.

Source: the chapter "Optimizer geometry and representation dependence", ftip-00JJ, ftip-00JP,
ftip-00KX, ftip-00L0, ftip-00LB, ftip-00LI, ftip-00LJ; the article "Low-Rank Theory", §0x0BI,
§0x0BK, §0x0BP–0x0BT, §0x0CF–0x0CG.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

Direction = Literal["max", "min"]
_DIRECTIONS = ("max", "min")
_BOOT_CHUNK = 1 << 20  # resample indices drawn per block, bounds memory at ~8 MiB

# --------------------------------------------------------------------------------------------
# Paired differences over shared seeds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedComparison:
    """Paired per-seed differences ``d_s = a_s − b_s`` over the seeds both arms share.

    Attributes:
        seeds: the shared seeds, sorted; ``n = len(seeds)``.
        differences: ``[n]`` float64 values ``a_s − b_s``, in the order of ``seeds``.
        mean: ``d̄ = (1/n) Σ_s d_s``.
        interval: ``(lo, hi)`` percentile paired-bootstrap interval for the mean difference
            at ``level``, resampling seeds with replacement; ``None`` when ``n < 2``.
        range: ``(min_s d_s, max_s d_s)`` — descriptive endpoints, always reported, never a
            confidence interval.
        unpaired_a: seeds present only in ``a`` (reported, never used).
        unpaired_b: seeds present only in ``b`` (reported, never used).
        level: the interval's nominal coverage.
        n_boot: bootstrap resamples drawn.
        note: why ``interval`` is ``None``; otherwise ``None``.
    """

    seeds: tuple[Hashable, ...]
    differences: tuple[float, ...]
    mean: float
    interval: tuple[float, float] | None
    range: tuple[float, float]
    unpaired_a: tuple[Hashable, ...]
    unpaired_b: tuple[Hashable, ...]
    level: float
    n_boot: int
    note: str | None


def _sorted_seeds(seeds: set[Hashable], what: str) -> tuple[Hashable, ...]:
    try:
        return tuple(sorted(seeds))
    except TypeError as err:
        raise TypeError(
            f"paired_differences: {what} seeds {seeds!r} are not mutually orderable; "
            "use seeds of one type (e.g. all int)"
        ) from err


def _finite_scores(name: str, scores: Mapping[Hashable, float]) -> dict[Hashable, float]:
    out = {}
    for seed, value in scores.items():
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(
                f"paired_differences: {name}[{seed!r}] = {value!r} is not finite; "
                "a failed run is an attempt outcome, not a score"
            )
        out[seed] = v
    return out


def paired_differences(
    a: Mapping[Hashable, float],
    b: Mapping[Hashable, float],
    *,
    n_boot: int = 10_000,
    level: float = 0.95,
    rng_seed: int = 0,
) -> PairedComparison:
    """Paired differences ``a − b`` over shared seeds, with a paired bootstrap over seeds.

    Only seeds present in both ``a`` and ``b`` form pairs; a seed present on one side only is
    listed in ``unpaired_a`` / ``unpaired_b`` and never substituted or used. The interval is
    the percentile bootstrap: draw ``n_boot`` resamples of the ``n`` shared seeds with
    replacement (``numpy.random.default_rng(rng_seed)``), take each resample's mean difference,
    and report its ``(1 − level)/2`` and ``(1 + level)/2`` quantiles (numpy's default linear
    interpolation). The seed is the resampling unit, so each resampled seed carries both arms.

    With few seeds the bootstrap is coarse: ``n`` seeds admit at most ``C(2n − 1, n)``
    distinct resample means (10 for ``n = 3``), and the interval cannot be wider than the
    range. Three seeds with a narrow range are not proof of a narrow population interval; the
    range is then the honest summary, and it is always reported — as a range, not an interval.

    Args:
        a, b: seed → finite score (float64, the metric's own units), one score per seed and arm.
            Seeds must be mutually orderable (e.g. all ``int``).
        n_boot: number of bootstrap resamples, ≥ 1.
        level: nominal coverage in ``(0, 1)``.
        rng_seed: seed of the bootstrap generator; same inputs and seed ⇒ same interval.

    Returns:
        ``PairedComparison``; ``interval`` is ``None`` (with ``note``) when fewer than two seeds
        are shared.

    Raises:
        ValueError: no seed is shared; a score is NaN or ±inf; ``n_boot < 1``; ``level`` not in
            ``(0, 1)``.
        TypeError: the seeds cannot be sorted.

    Source: "Low-Rank Theory", §0x0BK (paired differences, resampling unit matches the
    dependence), §0x0CF (an incomplete pair is never re-paired with another seed), §0x0CG
    (a seed range is not a confidence interval); ftip-00LB (paired uncertainty estimates).
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ValueError(f"paired_differences: n_boot={n_boot!r}; expected an integer ≥ 1")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"paired_differences: level={level!r}; expected a number in (0, 1)")
    a_scores, b_scores = _finite_scores("a", a), _finite_scores("b", b)
    shared = set(a_scores) & set(b_scores)
    if not shared:
        raise ValueError(
            f"paired_differences: no shared seed between a (seeds {sorted(map(repr, a_scores))}) "
            f"and b (seeds {sorted(map(repr, b_scores))}); unpaired runs are never paired"
        )
    seeds = _sorted_seeds(shared, "shared")
    unpaired_a = _sorted_seeds(set(a_scores) - shared, "a-only")
    unpaired_b = _sorted_seeds(set(b_scores) - shared, "b-only")

    d = np.array([a_scores[s] - b_scores[s] for s in seeds], dtype=np.float64)  # [n]
    n = d.shape[0]
    mean = float(d.mean())
    interval: tuple[float, float] | None = None
    note: str | None = None
    if n < 2:
        note = (
            f"interval undefined: a bootstrap over seeds needs at least 2 shared seeds, got {n}; "
            "report the range"
        )
    else:
        rng = np.random.default_rng(rng_seed)
        boot = np.empty(n_boot, dtype=np.float64)  # [n_boot] resampled mean differences
        rows = max(1, _BOOT_CHUNK // n)
        for start in range(0, n_boot, rows):
            stop = min(n_boot, start + rows)
            idx = rng.integers(0, n, size=(stop - start, n))  # [rows, n] seed indices
            boot[start:stop] = d[idx].mean(axis=1)
        lo, hi = np.quantile(boot, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
        # Every resample mean lies in [min d, max d]; clip away floating-point rounding.
        lo, hi = np.clip([lo, hi], d.min(), d.max())
        interval = (float(lo), float(hi))
    return PairedComparison(
        seeds=seeds,
        differences=tuple(float(x) for x in d),
        mean=mean,
        interval=interval,
        range=(float(d.min()), float(d.max())),
        unpaired_a=unpaired_a,
        unpaired_b=unpaired_b,
        level=float(level),
        n_boot=int(n_boot),
        note=note,
    )


# --------------------------------------------------------------------------------------------
# Observed upper envelope and iso-quality cost ratio
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvelopeValue:
    """The observed envelope at one budget: a value, or ``None`` with the reason."""

    value: float | None
    reason: str | None


@dataclass(frozen=True)
class Envelope:
    """Observed upper envelope ``U(C_i) = max_{j ≤ i} s(C_j)`` on a finite cost grid.

    Attributes:
        costs: ``[m]`` distinct measured costs ``C_1 < … < C_m`` (≥ 0, the study's declared
            scalar cost units).
        scores: ``[m]`` best observed score at each grid cost, ``s(C_i)`` (the raw measurements;
            may decrease with cost).
        values: ``[m]`` envelope ``U(C_i)``, non-decreasing.

    Raises:
        ValueError: (on construction) lengths differ, the grid is empty, not strictly
            increasing, negative or non-finite, or ``values`` is not the running maximum of
            ``scores``.
    """

    costs: tuple[float, ...]
    scores: tuple[float, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        c, s, v = (np.asarray(x, dtype=np.float64) for x in (self.costs, self.scores, self.values))
        if not (c.ndim == s.ndim == v.ndim == 1 and c.shape == s.shape == v.shape and c.size):
            raise ValueError(
                f"Envelope: costs, scores, values must be non-empty and of equal length; "
                f"got {len(self.costs)}, {len(self.scores)}, {len(self.values)}"
            )
        if not (np.isfinite(c).all() and np.isfinite(s).all() and (c >= 0).all()):
            raise ValueError("Envelope: costs must be finite and ≥ 0, scores finite")
        if (np.diff(c) <= 0).any():
            raise ValueError(f"Envelope: costs {self.costs} must be strictly increasing")
        if not np.array_equal(v, np.maximum.accumulate(s)):
            raise ValueError("Envelope: values must be the running maximum of scores")

    def value_at(self, c: float) -> EnvelopeValue:
        """The envelope's step function at budget ``c``: best observed score at cost ≤ ``c``.

        Between grid points this is the step function of the observations — the score of the
        best measured run the budget admits, a lower bound from a finite search — not the
        frontier ``V(c)``, which the grid does not observe there.

        Args:
            c: finite budget in the grid's cost units.

        Returns:
            ``EnvelopeValue``; ``value`` is ``None`` below the smallest grid cost, with the
            reason: no measured run is admissible there (the frontier's empty feasible set would
            have value ``−inf``; the observations say nothing finite).

        Raises:
            ValueError: ``c`` is NaN or ±inf.
        """
        c = float(c)
        if not math.isfinite(c):
            raise ValueError(f"Envelope.value_at: c={c!r}; expected a finite budget")
        i = int(np.searchsorted(np.asarray(self.costs), c, side="right")) - 1
        if i < 0:
            return EnvelopeValue(
                None,
                f"no measured run at cost ≤ {c!r}: below the smallest grid cost {self.costs[0]!r} "
                "(empty feasible set)",
            )
        return EnvelopeValue(self.values[i], None)

    def cost_to_reach(self, q: float) -> float:
        """Smallest grid cost at which the envelope reaches ``q``; ``+inf`` if it never does.

        On the right-continuous step function this is ``inf{C ≥ 0 : U(C) ≥ q}``, attained at a
        grid cost: the smallest measured cost reaching ``q``.

        Args:
            q: finite real quality target, in the score's units.

        Raises:
            ValueError: ``q`` is NaN or ±inf.
        """
        q = float(q)
        if not math.isfinite(q):
            raise ValueError(f"Envelope.cost_to_reach: q={q!r}; expected a finite real target")
        reached = np.flatnonzero(np.asarray(self.values) >= q)
        return float(self.costs[reached[0]]) if reached.size else math.inf


def upper_envelope(costs: Sequence[float], scores: Sequence[float]) -> Envelope:
    """Observed upper envelope of scored runs over their finite cost grid.

    The grid is the sorted distinct costs ``C_1 < … < C_m``; ``s(C_i)`` is the best score
    measured at ``C_i`` and the envelope is ``U(C_i) = max_{j ≤ i} s(C_j)`` — equivalently the
    best score over runs with cost ≤ ``C_i``. It is a descriptive monotone summary of the
    measured points: not evidence that unmeasured costs attain it, nor that extra cost cannot
    lower the score (``Envelope.scores`` keeps the raw, possibly decreasing, measurements).

    Args:
        costs: ``[n]`` finite costs ≥ 0 of the runs, in one declared scalar cost unit.
        scores: ``[n]`` finite scores of the same runs, higher is better.

    Returns:
        ``Envelope`` with ``costs``, ``scores``, ``values`` of length ``m`` (distinct costs).

    Raises:
        ValueError: shapes are not equal 1-D and non-empty; a cost is negative or non-finite
            (an infinite-cost run is infeasible at every finite budget: drop it explicitly);
            a score is non-finite.

    Source: ftip-00LI (finite cost grid), ftip-00LJ (observed upper envelope), ftip-00JJ
    (``V(C)`` is a supremum over interventions with cost ≤ ``C``), ftip-00LX (a finite search
    gives a lower bound).
    """
    c = np.asarray(costs, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    if c.ndim != 1 or c.shape != s.shape or c.size == 0:
        raise ValueError(
            f"upper_envelope: costs {c.shape} and scores {s.shape} must be equal non-empty 1-D"
        )
    if not np.isfinite(c).all() or (c < 0).any():
        raise ValueError(f"upper_envelope: costs {c.tolist()} must be finite and ≥ 0")
    if not np.isfinite(s).all():
        raise ValueError(f"upper_envelope: scores {s.tolist()} must be finite")
    grid, where = np.unique(c, return_inverse=True)  # [m], [n]
    best = np.full(grid.shape, -np.inf)
    np.maximum.at(best, where, s)  # s(C_i): best run at each grid cost
    values = np.maximum.accumulate(best)  # U(C_i)
    return Envelope(
        costs=tuple(float(x) for x in grid),
        scores=tuple(float(x) for x in best),
        values=tuple(float(x) for x in values),
    )


@dataclass(frozen=True)
class RatioResult:
    """Iso-quality cost ratio ``C_A(q) / C_B(q)``, or ``None`` with the reason.

    Attributes:
        value: the ratio, or ``None`` outside its domain.
        reason: why the ratio is undefined (``"; "``-joined when several apply), else ``None``.
        cost_a, cost_b: ``C_A(q)``, ``C_B(q)`` in cost units; ``+inf`` when unreached.
        q: the target.
    """

    value: float | None
    reason: str | None
    cost_a: float
    cost_b: float
    q: float


def iso_quality_cost_ratio(envelope_a: Envelope, envelope_b: Envelope, q: float) -> RatioResult:
    """Iso-quality cost ratio ``ρ_{A/B}(q) = C_A(q) / C_B(q)`` on the observed envelopes.

    ``C_X(q)`` is the smallest measured cost at which ``X``'s envelope reaches ``q``
    (``+inf`` if none does). The ratio is defined only on the domain
    ``0 ≤ C_A(q) < +inf`` and ``0 < C_B(q) < +inf``; otherwise ``value`` is ``None`` and
    ``reason`` is ``"target q unreached by A"``, ``"target q unreached by B"`` or
    ``"denominator C_B(q) is zero"`` (all that apply, joined by ``"; "``; ``0/0`` is excluded).

    These are measured target-achieving costs on the grid, i.e. the measured ratio ``ρ̂`` — not
    the inverse-frontier infima, which a finite grid does not identify. Both envelopes must use
    the same target, evaluation interface, cost units and comparison arm; that is the caller's
    declaration.

    Args:
        envelope_a, envelope_b: observed envelopes from ``upper_envelope``.
        q: finite real quality target in the score's units.

    Returns:
        ``RatioResult``.

    Raises:
        ValueError: ``q`` is NaN or ±inf.

    Source: ftip-00JP (inverse cost and the ratio's domain), ftip-00KX and ftip-00L0 (smallest
    measured cost; undefined when unmeasured or the denominator is zero), ftip-00K8.
    """
    q = float(q)
    if not math.isfinite(q):
        raise ValueError(f"iso_quality_cost_ratio: q={q!r}; expected a finite real target")
    cost_a, cost_b = envelope_a.cost_to_reach(q), envelope_b.cost_to_reach(q)
    reasons = []
    if math.isinf(cost_a):
        reasons.append("target q unreached by A")
    if math.isinf(cost_b):
        reasons.append("target q unreached by B")
    elif cost_b == 0.0:
        reasons.append("denominator C_B(q) is zero")
    if reasons:
        return RatioResult(None, "; ".join(reasons), cost_a, cost_b, q)
    return RatioResult(cost_a / cost_b, None, cost_a, cost_b, q)


# --------------------------------------------------------------------------------------------
# Pareto front and constraint-feasible selection (two separate results)
# --------------------------------------------------------------------------------------------


def _metric(fn: str, points: Sequence[Mapping[str, float]], i: int, key: str) -> float:
    try:
        v = float(points[i][key])
    except KeyError:
        raise ValueError(
            f"{fn}: point {i} lacks metric {key!r}; missing metrics fail closed"
        ) from None
    if math.isnan(v):
        raise ValueError(f"{fn}: point {i} has {key}=nan; missing metrics fail closed")
    return v


def _check_direction(fn: str, key: str, direction: str) -> None:
    if direction not in _DIRECTIONS:
        raise ValueError(f"{fn}: unknown direction {direction!r} for {key!r}; known: max, min")


def pareto_front(
    points: Sequence[Mapping[str, float]], objectives: Mapping[str, Direction]
) -> list[int]:
    """Indices of the non-dominated points (the Pareto set), ascending.

    Point ``j`` dominates ``i`` when it is at least as good on every objective and strictly
    better on at least one. Identical points do not dominate each other, so duplicates are kept
    together (or removed together, when something else dominates them). Keys of a point that are
    not objectives are ignored.

    Args:
        points: ``n`` records metric name → value (float; ``±inf`` allowed, NaN not).
        objectives: metric name → ``"max"`` (higher is better) or ``"min"``; non-empty.

    Returns:
        ``list[int]`` of indices into ``points``, sorted.

    Raises:
        ValueError: ``objectives`` empty or has an unknown direction; a point lacks an objective
            or holds NaN.

    Source: "Low-Rank Theory", §0x0BP (Pareto dominance), §0x0BS (the frontier and the feasible
    set are different).
    """
    if not objectives:
        raise ValueError("pareto_front: objectives is empty; name at least one metric")
    for key, direction in objectives.items():
        _check_direction("pareto_front", key, direction)
    n = len(points)
    if n == 0:
        return []
    sign = {"max": 1.0, "min": -1.0}
    m = np.array(  # [n, k], oriented so larger is better
        [
            [sign[d] * _metric("pareto_front", points, i, key) for key, d in objectives.items()]
            for i in range(n)
        ],
        dtype=np.float64,
    )
    at_least = (m[:, None, :] >= m[None, :, :]).all(axis=-1)  # [n, n]: j ⪰ i on every objective
    better = (m[:, None, :] > m[None, :, :]).any(axis=-1)  # [n, n]: j ≻ i on some objective
    dominated = (at_least & better).any(axis=0)  # [n]
    return [int(i) for i in np.flatnonzero(~dominated)]


@dataclass(frozen=True)
class Selection:
    """Constraint-feasible set and the lexicographic choice within it.

    Attributes:
        feasible: indices of points satisfying every constraint, ascending.
        chosen: the selected index, or ``None`` when ``feasible`` is empty.
        reason: why nothing was chosen, else ``None``.
        violations: per point (aligned with the input), the names of the constraints it
            violates, in the constraints' order — the audit trail.
    """

    feasible: tuple[int, ...]
    chosen: int | None
    reason: str | None
    violations: tuple[tuple[str, ...], ...]


def feasible_selection(
    points: Sequence[Mapping[str, float]],
    constraints: Mapping[str, tuple[float | None, float | None]],
    order: Sequence[tuple[str, Direction]],
) -> Selection:
    """Points meeting every constraint, then the lexicographically best of them.

    A point is feasible when ``lo ≤ value ≤ hi`` for every constraint (both bounds inclusive;
    ``None`` leaves a side open). Exceeding one floor never compensates for violating another.
    Among the feasible points the chosen one is best by ``order``'s first key, ties broken by
    the next key, and finally by the smallest index (the deterministic identifier). The Pareto
    front is a different object: use ``pareto_front``.

    Args:
        points: ``n`` records metric name → value (float; ``±inf`` allowed, e.g. "no configured
            rank" as ``inf``; NaN not).
        constraints: metric name → ``(lo, hi)``; may be empty (every point feasible).
        order: ``(metric, "max" | "min")`` pairs, most significant first; may be empty (the
            smallest feasible index wins).

    Returns:
        ``Selection``; with an empty feasible set, ``chosen`` is ``None`` and ``reason`` says so
        (fail closed: no release).

    Raises:
        ValueError: a point lacks a constrained or ordering metric or holds NaN there; a bound
            is NaN or ``lo > hi``; an unknown direction.

    Source: "Low-Rank Theory", §0x0BQ (feasible set and lexicographic rule
    ``argmin (C_i, r_i, id_i)``), §0x0BR (exact validation oracle), §0x0BS, §0x0BU.
    """
    for key, (lo, hi) in constraints.items():
        lo_f = -math.inf if lo is None else float(lo)
        hi_f = math.inf if hi is None else float(hi)
        if math.isnan(lo_f) or math.isnan(hi_f) or lo_f > hi_f:
            raise ValueError(
                f"feasible_selection: constraint {key!r} has bounds ({lo!r}, {hi!r}); "
                "expected lo ≤ hi, None for an open side"
            )
    for key, direction in order:
        _check_direction("feasible_selection", key, direction)

    violations = []
    for i in range(len(points)):
        broken = []
        for key, (lo, hi) in constraints.items():
            v = _metric("feasible_selection", points, i, key)
            if (lo is not None and v < float(lo)) or (hi is not None and v > float(hi)):
                broken.append(key)
        violations.append(tuple(broken))
    feasible = tuple(i for i, broken in enumerate(violations) if not broken)

    def rank_key(i: int) -> tuple[float | int, ...]:
        metric = "feasible_selection"
        ranks = [(-1.0 if d == "max" else 1.0) * _metric(metric, points, i, k) for k, d in order]
        return (*ranks, i)

    keys = {i: rank_key(i) for i in range(len(points))}  # fail closed on every point's metrics
    if not feasible:
        return Selection(feasible, None, "no release: the feasible set is empty", tuple(violations))
    chosen = min(feasible, key=keys.__getitem__)
    return Selection(feasible, chosen, None, tuple(violations))


# --------------------------------------------------------------------------------------------
# Selection nested inside validation; the held-out split is a report
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectionReport:
    """A validation-only selection and the held-out report of the chosen candidate.

    Attributes:
        selection: the ``Selection`` computed on the ``select_on`` records alone.
        chosen: index of the frozen candidate, or ``None`` (no release).
        report: the chosen candidate's ``report_on`` record (read-only), or ``None`` — the
            held-out split was not opened.
        reason: why nothing was reported, else ``None``.
    """

    selection: Selection
    chosen: int | None
    report: Mapping[str, float] | None
    reason: str | None


def select_then_report(
    candidates: Sequence[Mapping[str, Mapping[str, float]]],
    constraints: Mapping[str, tuple[float | None, float | None]],
    order: Sequence[tuple[str, Direction]],
    *,
    select_on: str = "validation",
    report_on: str = "test",
) -> SelectionReport:
    """Select on validation with ``feasible_selection``, then report the chosen one on test.

    Only each candidate's ``select_on`` record enters the selection; the ``report_on`` record
    is read for the chosen candidate alone, after the choice is fixed, and never feeds back
    (no runner-up on test failure: a failed release gate means no release or a new study). With
    an empty feasible set the held-out split stays closed. Checkpoint selection is nested
    inside: each candidate's ``select_on`` record must already be its validation-chosen
    checkpoint.

    Args:
        candidates: ``n`` records split name → (metric name → value); every candidate needs a
            ``select_on`` record; ``report_on`` is read only for the chosen one.
        constraints, order: as in ``feasible_selection``.
        select_on, report_on: split names; they must differ.

    Returns:
        ``SelectionReport``.

    Raises:
        ValueError: ``select_on == report_on``; a candidate lacks its ``select_on`` record; the
            chosen candidate lacks its ``report_on`` record; anything ``feasible_selection``
            raises.

    Source: "Low-Rank Theory", §0x0BI (checkpoint selection nested inside candidate selection),
    §0x0BT (held-out test is a report, not another selection round), §0x0CH, §0x0CL.
    """
    if select_on == report_on:
        raise ValueError(
            f"select_then_report: select_on and report_on are both {select_on!r}; "
            "selecting and reporting on one split leaks the evaluation into the selection"
        )
    validation: list[Mapping[str, float]] = []
    for i, candidate in enumerate(candidates):
        if select_on not in candidate:
            raise ValueError(f"select_then_report: candidate {i} lacks its {select_on!r} record")
        validation.append(candidate[select_on])
    selection = feasible_selection(validation, constraints, order)
    if selection.chosen is None:
        return SelectionReport(selection, None, None, selection.reason)
    chosen: Any = candidates[selection.chosen]
    if report_on not in chosen:
        raise ValueError(
            f"select_then_report: chosen candidate {selection.chosen} lacks its "
            f"{report_on!r} record"
        )
    report = MappingProxyType(dict(chosen[report_on]))
    return SelectionReport(selection, selection.chosen, report, None)
