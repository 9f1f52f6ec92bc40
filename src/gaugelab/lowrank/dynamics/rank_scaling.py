"""Rank scaling of the initial product velocity (seed 003 §0x08F–0x08G): the exponent
``1 − 2p − q``, the coefficient ``s² r σ_A²`` and the exact rank ledger. Private; re-exported by
:mod:`gaugelab.lowrank.dynamics.motion`."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

from gaugelab.linalg.operands import scalar
from gaugelab.linalg.rational import Matrix, exact_sqrt, to_fraction


def rank_scaling_exponent(p: object, q: object) -> Fraction | float:
    """The rank exponent ``1 − 2p − q`` of the initial product velocity ``s² r σ_A²`` for
    ``s = α r^{−p}`` and ``σ_A² = κ r^{−q}``.

    Source: seed 003 §0x08F.
    """
    exact = not any(isinstance(x, float) for x in (p, q))
    return (
        1
        - 2 * scalar(p, exact, "rank_scaling_exponent", "p")
        - scalar(q, exact, "rank_scaling_exponent", "q")
    )


def rank_stable_scale_exponent(q: object) -> Fraction | float:
    """The scale exponent ``p = (1 − q)/2`` that makes the initial velocity rank-independent:
    ``q = 0 → p = 1/2`` (``α/√r``, rsLoRA's regime), ``q = 1 → p = 0`` (constant ``α``).

    Source: seed 003 §0x08F (boxed); kalajdzievski2023rank, under its assumptions.
    """
    exact = not isinstance(q, float)
    return (1 - scalar(q, exact, "rank_stable_scale_exponent", "q")) / 2


def _power(r: int, exponent: Fraction | float) -> Fraction | float:
    if isinstance(exponent, Fraction):
        if exponent.denominator == 1:
            return Fraction(r) ** exponent.numerator
        if exponent.denominator == 2:
            try:
                return exact_sqrt(r) ** exponent.numerator
            except ValueError:
                pass
    return float(r) ** float(exponent)


def initial_velocity_coefficient(
    alpha: object, r: int, p: object, q: object, kappa: object = 1
) -> Fraction | float:
    """The coefficient ``s² r σ_A² = α² κ r^{1−2p−q}`` of ``E[Δ̇₀] = −η_B s² r σ_A² G`` at the
    standard start (``B₀ = 0``, rows of ``A₀`` independent with covariance ``σ_A² I``), and of
    ``E‖∇_B L‖² = s² r σ_A² ‖G‖²``.

    Args:
        alpha, kappa: the scale and variance constants; r: the rank ``≥ 1``; p, q: exponents.

    Returns:
        A Fraction when every input is rational and ``r^{1−2p−q}`` is rational, else a float.

    Raises:
        ValueError: ``r < 1``.

    Source: seed 003 §0x08F. An expectation over the initialisation, not a quality claim.
    """
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"initial_velocity_coefficient: r={r!r}; allowed: an integer >= 1")
    exact = not any(isinstance(x, float) for x in (alpha, p, q, kappa))
    a = scalar(alpha, exact, "initial_velocity_coefficient", "alpha")
    k = scalar(kappa, exact, "initial_velocity_coefficient", "kappa")
    return a * a * k * _power(r, rank_scaling_exponent(p, q))


@dataclass(frozen=True)
class RankLedgerRow:
    """One row of the exact rank ledger: a factor normalization and a scale rule.

    Attributes:
        normalization: ``"rank-independent rows"`` (q = 0) or ``"rows divided by √r"`` (q = 1).
        q, p: the variance and scale exponents; scale: ``"α/r"``, ``"α/√r"`` or ``"α"``.
        coefficients: rank → the exact coefficient ``λ`` with ``s² A₀ᵀA₀ = λ I``.
        trend: ``"stable"``, ``"shrinks"`` or ``"grows"`` over the ranks.
    """

    normalization: str
    q: int
    scale: str
    p: Fraction
    coefficients: dict[int, Fraction]
    trend: str


def _repeated_rows(r: int) -> Matrix:
    """``A₀ [r, 2]`` whose rows repeat ``e₁, e₂`` (row-coordinate second moment 1/2)."""
    return Matrix([[1, 0] if i % 2 == 0 else [0, 1] for i in range(r)])


def rank_ledger(ranks: tuple[int, ...] = (4, 16), alpha: object = 1) -> list[RankLedgerRow]:
    """The exact rank ledger: ``s² A₀ᵀA₀`` for rows ``e₁, e₂`` repeated, at each rank.

    ``A₀ᵀA₀ = (r/2) I`` exactly, so the coefficient is not an expectation. Four rows: q = 0
    with ``α/r`` (shrinks) and ``α/√r`` (stable); q = 1 (rows divided by ``√r``) with ``α/√r``
    (shrinks) and constant ``α`` (stable).

    Args:
        ranks: even perfect squares (so ``√r`` is exact and rows pair up), ascending.
        alpha: the scale constant ``α``.

    Returns:
        The four :class:`RankLedgerRow`, in the seed's order.

    Raises:
        ValueError: a rank that is not an even perfect square, or ranks not ascending.

    Source: seed 003 §0x08G (``1/8, 1/32`` and ``1/2, 1/2``). Not a quality benchmark.
    """
    if list(ranks) != sorted(set(ranks)) or not ranks:
        raise ValueError(f"rank_ledger: ranks={ranks!r}; allowed: distinct ascending ranks")
    for r in ranks:
        if (
            isinstance(r, bool)
            or not isinstance(r, int)
            or r < 2
            or r % 2
            or math.isqrt(r) ** 2 != r
        ):
            raise ValueError(
                f"rank_ledger: rank {r!r}; allowed: even perfect squares (4, 16, 36, …)"
            )
    a = to_fraction(alpha, "rank_ledger")
    rules = [
        ("rank-independent rows", 0, "α/r", Fraction(1)),
        ("rank-independent rows", 0, "α/√r", Fraction(1, 2)),
        ("rows divided by √r", 1, "α/√r", Fraction(1, 2)),
        ("rows divided by √r", 1, "α", Fraction(0)),
    ]
    out = []
    for normalization, q, label, p in rules:
        coefficients = {}
        for r in ranks:
            A0 = _repeated_rows(r) / (exact_sqrt(r) if q else 1)
            s = a / _power(r, p)
            gram = (A0.T @ A0) * (s * s)
            lam = gram[0, 0]
            if gram != Matrix.identity(2) * lam:  # the coefficient is a scalar identity
                raise AssertionError("rank_ledger: s² A₀ᵀA₀ is not a multiple of I")
            coefficients[r] = lam
        values = list(coefficients.values())
        if all(v == values[0] for v in values):
            trend = "stable"
        elif all(x > y for x, y in itertools.pairwise(values)):
            trend = "shrinks"
        else:
            trend = "grows"
        out.append(RankLedgerRow(normalization, q, label, p, coefficients, trend))
    return out
