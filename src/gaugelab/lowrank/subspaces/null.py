"""Null models for subspace similarity: the exact Haar baseline and a seeded Monte-Carlo null
(private; re-exported by ``gaugelab.lowrank.subspaces.compare``)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch

__all__ = ["HaarBaseline", "HaarNull", "haar_baseline", "haar_null"]


def _rank(value: object, func: str, arg: str, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{func}: {arg}={value!r}; allowed: an int >= {low}")
    return value


@dataclass(frozen=True)
class HaarBaseline:
    """Expected similarities of two independent Haar-random subspaces (exact rationals).

    Attributes:
        ambient, rank_s, rank_t: ``d``, ``r_S``, ``r_T``.
        projection_mass: ``E[M] = r_S r_T / d``.
        min_rank_overlap: ``E[Ω_min] = max(r_S, r_T) / d`` (``None`` when ``min = 0``).
        coverage_s_by_t, coverage_t_by_s: ``E[C(S|T)] = r_T / d``, ``E[C(T|S)] = r_S / d``
            (``None`` when the covered side has rank 0).
        projector_squared: ``E‖P_S − P_T‖_F² = r_S + r_T − 2 r_S r_T / d``.
    """

    ambient: int
    rank_s: int
    rank_t: int
    projection_mass: Fraction
    min_rank_overlap: Fraction | None
    coverage_s_by_t: Fraction | None
    coverage_t_by_s: Fraction | None
    projector_squared: Fraction


def haar_baseline(d: int, r_s: int, r_t: int) -> HaarBaseline:
    """The Haar baseline of seed 003 §0x06H, as exact fractions.

    ``E[P_T] = (r_T/d) I`` by rotational symmetry, so ``E[M] = tr(P_S r_T/d) = r_S r_T/d``.
    Learned subspaces are not Haar random: a baseline contract, not a p-value.

    Args:
        d: ambient dimension ``≥ 1``; r_s, r_t: ranks in ``[0, d]``.

    Returns:
        :class:`HaarBaseline`; ``d = 6, r_S = 2, r_T = 3`` gives ``E[M] = 1``,
        ``E[Ω_min] = 1/2``.

    Raises:
        ValueError: ``d < 1`` or a rank outside ``[0, d]``.

    Source:
        seed 003 §0x06H.
    """
    func = "haar_baseline"
    d = _rank(d, func, "d", low=1)
    r_s, r_t = _rank(r_s, func, "r_s"), _rank(r_t, func, "r_t")
    if max(r_s, r_t) > d:
        raise ValueError(f"{func}: ranks ({r_s}, {r_t}) exceed d={d}; allowed: 0 <= r <= d")
    mass = Fraction(r_s * r_t, d)
    p = min(r_s, r_t)
    return HaarBaseline(
        ambient=d,
        rank_s=r_s,
        rank_t=r_t,
        projection_mass=mass,
        min_rank_overlap=Fraction(max(r_s, r_t), d) if p else None,
        coverage_s_by_t=Fraction(r_t, d) if r_s else None,
        coverage_t_by_s=Fraction(r_s, d) if r_t else None,
        projector_squared=r_s + r_t - 2 * mass,
    )


@dataclass(frozen=True)
class HaarNull:
    """A seeded Monte-Carlo null of the projection mass and min-rank overlap.

    Attributes:
        ambient, rank_s, rank_t, samples, seed: what was drawn.
        mass_mean, mass_std: mean and standard deviation (``n − 1``) of ``M`` over the draws.
        overlap_mean, overlap_std: the same for ``Ω_min``.
        overlap_quantiles: the 5%, 50% and 95% quantiles of ``Ω_min``.
        mass_stderr: ``mass_std / √samples``, the Monte-Carlo error of ``mass_mean``.
    """

    ambient: int
    rank_s: int
    rank_t: int
    samples: int
    seed: int
    mass_mean: float
    mass_std: float
    overlap_mean: float
    overlap_std: float
    overlap_quantiles: tuple[float, float, float]

    @property
    def mass_stderr(self) -> float:
        return self.mass_std / self.samples**0.5


def haar_null(
    d: int, r_s: int, r_t: int, *, samples: int = 1000, seed: int = 0, chunk: int = 256
) -> HaarNull:
    """Draw ``samples`` independent pairs of Haar-random subspaces and measure ``M``, ``Ω_min``.

    Each subspace is the span of a ``[d, r]`` standard normal matrix (Haar on the
    Grassmannian), orthonormalised by QR; float64 throughout, from one ``torch.Generator``
    seeded ``seed`` (global RNG state untouched).

    Args:
        d: ambient dimension ``≥ 1``; r_s, r_t: ranks in ``[1, d]``.
        samples: draws ``≥ 2``; seed: the generator's seed; chunk: draws per batch (memory
            ``~ chunk·d·(r_s + r_t)`` floats).

    Returns:
        :class:`HaarNull`; its ``mass_mean`` converges to ``r_S r_T / d`` (§0x06H).

    Raises:
        ValueError: ``d < 1``, a rank outside ``[1, d]``, ``samples < 2``, ``chunk < 1``.

    Source:
        seed 003 §0x06H (the baseline it samples); the LoRA paper's random-Gaussian comparison
        (hu2021lora, §7.2).
    """
    func = "haar_null"
    d = _rank(d, func, "d", low=1)
    r_s, r_t = _rank(r_s, func, "r_s", low=1), _rank(r_t, func, "r_t", low=1)
    if max(r_s, r_t) > d:
        raise ValueError(f"{func}: ranks ({r_s}, {r_t}) exceed d={d}; allowed: 1 <= r <= d")
    samples = _rank(samples, func, "samples", low=2)
    chunk = _rank(chunk, func, "chunk", low=1)
    gen = torch.Generator().manual_seed(seed)
    masses = []
    left = samples
    while left:
        n = min(chunk, left)
        Q_S = torch.linalg.qr(torch.randn(n, d, r_s, generator=gen, dtype=torch.float64))[0]
        Q_T = torch.linalg.qr(torch.randn(n, d, r_t, generator=gen, dtype=torch.float64))[0]
        masses.append((Q_S.mT @ Q_T).square().sum((-2, -1)))  # [n]
        left -= n
    mass = torch.cat(masses)
    overlap = mass / min(r_s, r_t)
    q = torch.quantile(overlap, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64))
    return HaarNull(
        ambient=d,
        rank_s=r_s,
        rank_t=r_t,
        samples=samples,
        seed=seed,
        mass_mean=float(mass.mean()),
        mass_std=float(mass.std()),
        overlap_mean=float(overlap.mean()),
        overlap_std=float(overlap.std()),
        overlap_quantiles=(float(q[0]), float(q[1]), float(q[2])),
    )
