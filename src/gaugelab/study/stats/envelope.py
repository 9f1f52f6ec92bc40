"""The observed upper envelope over a finite cost grid and the iso-quality cost ratio.

``upper_envelope`` summarises scored runs as ``U(C_i) = max_{j ≤ i} s(C_j)`` on their measured
costs; ``iso_quality_cost_ratio`` compares two envelopes by the measured costs
``C_A(q) / C_B(q)`` at which they reach a target ``q``, and says why when that ratio is outside
its domain.

Source: the chapter "Optimizer geometry and representation dependence", ftip-00JJ, ftip-00JP,
ftip-00KX, ftip-00L0, ftip-00LI, ftip-00LJ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Envelope", "EnvelopeValue", "RatioResult", "iso_quality_cost_ratio", "upper_envelope"]


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
