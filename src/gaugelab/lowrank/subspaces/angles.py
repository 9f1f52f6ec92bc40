"""Principal angles between two subspaces given by orthonormal bases, batched, accurate at every
angle (private; the public names are re-exported by ``gaugelab.lowrank.subspaces.compare``).

The cosines are the singular values of the small cross matrix ``Q_Sᵀ Q_T`` (Björck–Golub); the
sines are the singular values of the residual ``(I − P_S) Q_T`` (ascending, paired with the
descending cosines; invariant to rotations inside a cluster of equal cosines); each angle is
``atan2(sin, cos)``. A cosine alone loses every angle below
``√eps`` (``arccos(1 − 1e-17) = 0``), a sine alone every angle near ``π/2``; the arctangent of
both is accurate to about ``eps`` absolute at every angle, in the same pair of subspaces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gaugelab.linalg.checks import all_finite

__all__ = ["SubspaceComparison", "check_basis", "principal_angles", "ranks_of"]


@dataclass(frozen=True)
class SubspaceComparison:
    """Principal angles and every similarity and distance of seed 003 §0x06D–§0x06H.

    ``S`` and ``T`` are subspaces of one ambient ``ℝ^d`` with ranks ``r_S``, ``r_T`` (per member
    of a batch) and ``p = min(r_S, r_T)`` principal angles ``0 ≤ θ_1 ≤ … ≤ θ_p ≤ π/2``.
    ``M = ‖Q_Sᵀ Q_T‖_F² = Σ cos²θ_a`` is the projection mass.

    Attributes:
        cosines, sines, angles: ``[..., k]`` float, ``k = min(columns of Q_S, of Q_T)``: ``cos θ_a``
            (clipped to ``[0, 1]``), ``sin θ_a`` and ``θ_a`` in radians, non-decreasing in
            ``θ``; entries ``a ≥ p`` (a member whose ranks are below ``k``) are NaN — see
            ``valid``.
        valid: ``[..., k]`` bool, ``a < p``.
        cosine_excess: ``[...]``: ``max(0, max_a σ_a − 1)``, how far a raw cosine (a singular
            value of ``Q_Sᵀ Q_T``) exceeded 1 before it was clipped (§0x06K: a numerical
            symptom, not an angle); 0.0 when none did.
        rank_s, rank_t: ``[...]`` long, ``r_S`` and ``r_T``.
        ambient: ``d``.
        projection_mass: ``[...]``, ``M``.
        min_rank_overlap: ``[...]``, ``Ω_min = M / p`` (the LoRA paper's normalisation:
            containment, not equality, §0x06G).
        coverage_s_by_t, coverage_t_by_s: ``[...]``, the directed coverages
            ``C(S|T) = M / r_S`` and ``C(T|S) = M / r_T``.
        chordal_squared: ``[...]``, ``d_chord² = Σ sin²θ_a = p − M``.
        projector_squared: ``[...]``, ``‖P_S − P_T‖_F² = r_S + r_T − 2M`` (charges the
            ``|r_S − r_T|`` unpaired dimensions).
        haar_mass, haar_overlap: ``[...]``, the Haar baseline of the same ranks and ``d``
            (§0x06H): ``E[M] = r_S r_T / d`` and ``E[Ω_min] = max(r_S, r_T) / d``.

    The rank-zero policy (§0x06K: min-rank normalisation would divide by zero): a rank-zero
    side has no principal angle, ``M = 0``, ``d_chord² = 0`` and
    ``‖P_S − P_T‖_F² = r_S + r_T``; every ratio with a zero denominator (``Ω_min`` and
    ``haar_overlap`` when ``p = 0``, ``C(S|T)`` when ``r_S = 0``, ``C(T|S)`` when ``r_T = 0``)
    is NaN: undefined, not 0 and not 1. ``C(S|T) = 0`` when only ``r_T = 0``.
    """

    cosines: torch.Tensor
    sines: torch.Tensor
    angles: torch.Tensor
    valid: torch.Tensor
    cosine_excess: torch.Tensor
    rank_s: torch.Tensor
    rank_t: torch.Tensor
    ambient: int
    projection_mass: torch.Tensor
    min_rank_overlap: torch.Tensor
    coverage_s_by_t: torch.Tensor
    coverage_t_by_s: torch.Tensor
    chordal_squared: torch.Tensor
    projector_squared: torch.Tensor
    haar_mass: torch.Tensor
    haar_overlap: torch.Tensor

    @property
    def batch(self) -> tuple[int, ...]:
        return tuple(self.rank_s.shape)

    def to_dict(self) -> dict[str, object]:
        """The numbers of one pair (not a batch) as Python floats, ints and lists."""
        if self.batch:
            raise ValueError(
                f"SubspaceComparison.to_dict: a batch of shape {self.batch}; index it first "
                "(comparison.member(i))"
            )
        keep = self.valid
        out: dict[str, object] = {
            "cosines": self.cosines[keep].tolist(),
            "angles": self.angles[keep].tolist(),
            "cosine_excess": float(self.cosine_excess),
            "rank_s": int(self.rank_s),
            "rank_t": int(self.rank_t),
            "ambient": self.ambient,
        }
        for name in ("projection_mass", "min_rank_overlap", "coverage_s_by_t",
                     "coverage_t_by_s", "chordal_squared", "projector_squared", "haar_mass",
                     "haar_overlap"):  # fmt: skip
            out[name] = float(getattr(self, name))
        return out

    def member(self, index: int | tuple[int, ...]) -> SubspaceComparison:
        """The comparison of one member of a batch (its angles trimmed to ``p``)."""
        idx = index if isinstance(index, tuple) else (index,)
        fields = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            fields[name] = value[idx] if isinstance(value, torch.Tensor) else value
        p = int(fields["valid"].sum())
        for name in ("cosines", "sines", "angles", "valid"):
            fields[name] = fields[name][:p]
        return SubspaceComparison(**fields)


def check_basis(Q: object, func: str, arg: str) -> torch.Tensor:
    """Raise unless ``Q`` is a finite real floating ``[..., d, k]`` tensor."""
    if not isinstance(Q, torch.Tensor):
        raise TypeError(f"{func}: {arg} must be a torch.Tensor [..., d, k], got {type(Q).__name__}")
    if Q.ndim < 2 or not Q.is_floating_point():
        raise ValueError(
            f"{func}: {arg} must be a real floating tensor [..., d, k], got shape "
            f"{tuple(Q.shape)} and dtype {Q.dtype}"
        )
    if not all_finite(Q):
        raise ValueError(f"{func}: {arg} contains NaN or infinite entries")
    return Q


def ranks_of(rank: object, Q: torch.Tensor, func: str, arg: str) -> torch.Tensor:
    """``rank`` as a long tensor of ``Q``'s batch shape; ``None`` means every column."""
    batch, k = Q.shape[:-2], Q.shape[-1]
    if rank is None:
        return torch.full(batch, k, dtype=torch.long)
    if isinstance(rank, bool) or not isinstance(rank, int | torch.Tensor):
        raise TypeError(f"{func}: {arg} must be an int or a long tensor, got {rank!r}")
    r = torch.as_tensor(rank)
    if r.is_floating_point() or r.dtype == torch.bool:
        raise TypeError(f"{func}: {arg} must hold integers, got dtype {r.dtype}")
    r = r.to(torch.long).expand(batch) if r.ndim == 0 else r.to(torch.long)
    if tuple(r.shape) != tuple(batch):
        raise ValueError(f"{func}: {arg} has shape {tuple(r.shape)}; allowed: {tuple(batch)}")
    if bool((r < 0).any()) or bool((r > k).any()):
        raise ValueError(f"{func}: {arg}={r.tolist()}; allowed: 0 <= rank <= {k} (columns)")
    return r.clone()


def principal_angles(
    Q_S: torch.Tensor,
    Q_T: torch.Tensor,
    *,
    rank_s: int | torch.Tensor | None = None,
    rank_t: int | torch.Tensor | None = None,
) -> SubspaceComparison:
    """Principal angles between ``span(Q_S[..., :, :r_S])`` and ``span(Q_T[..., :, :r_T])``.

    Args:
        Q_S: ``[..., d, k_S]`` real floating tensor whose first ``r_S`` columns are orthonormal
            (further columns, e.g. the rest of a compact SVD, are ignored); leading
            dimensions are a batch (e.g. modules).
        Q_T: ``[..., d, k_T]``, the same ``d``, dtype and batch shape.
        rank_s, rank_t: ``r_S``, ``r_T``: an int, a long tensor of the batch shape, or
            ``None`` for every column.

    Returns:
        :class:`SubspaceComparison` in ``Q_S``'s dtype. Cost: one SVD of the
        ``[k_S, k_T]`` cross matrix and ``O(d k_S k_T)``; no ``d × d`` projector is formed.

    Raises:
        TypeError: a basis is not a tensor, a rank not an integer.
        ValueError: non-floating or non-finite bases; different ``d``, dtypes or batch shapes;
            a rank outside ``[0, columns]``.

    Source:
        bjorck1973numerical (cosines from the SVD of ``Q_Sᵀ Q_T``); knyazev2002principal (sines
        from the residual, for small angles); seed 003 §0x06C–§0x06H, §0x06K.
    """
    func = "principal_angles"
    Q_S, Q_T = check_basis(Q_S, func, "Q_S"), check_basis(Q_T, func, "Q_T")
    if Q_S.dtype != Q_T.dtype or Q_S.shape[:-1] != Q_T.shape[:-1]:
        raise ValueError(
            f"{func}: Q_S {tuple(Q_S.shape)} {Q_S.dtype} and Q_T {tuple(Q_T.shape)} {Q_T.dtype} "
            "need one dtype, one batch shape and one ambient dimension d ([..., d, k])"
        )
    r_s, r_t = ranks_of(rank_s, Q_S, func, "rank_s"), ranks_of(rank_t, Q_T, func, "rank_t")
    d, k_s, k_t = Q_S.shape[-2], Q_S.shape[-1], Q_T.shape[-1]
    keep_s = (torch.arange(k_s) < r_s[..., None]).to(Q_S.dtype)  # [..., k_S]
    keep_t = (torch.arange(k_t) < r_t[..., None]).to(Q_S.dtype)  # [..., k_T]
    S = Q_S * keep_s[..., None, :]  # [..., d, k_S], columns beyond r_S zeroed
    T = Q_T * keep_t[..., None, :]  # [..., d, k_T]
    cross = S.mT @ T  # [..., k_S, k_T]
    sigma = torch.linalg.svdvals(cross)  # [..., k], k = min(k_S, k_T), non-increasing
    k = sigma.shape[-1]
    p = torch.minimum(r_s, r_t)  # [...]
    valid = torch.arange(k) < p[..., None]  # [..., k]
    raw_excess = torch.where(valid, sigma - 1.0, torch.zeros_like(sigma))
    excess = raw_excess.amax(-1).clamp(min=0.0) if k else sigma.new_zeros(r_s.shape)
    # Sines: singular values of (I − P_S) Q_T, i.e. {sin θ_a} ∪ {1 per unpaired column}; a
    # padded column (beyond r_T) gets a unit block appended below, so it adds a 1, not a 0.
    residual = T - S @ cross  # [..., d, k_T]
    pad = torch.diag_embed(1.0 - keep_t)  # [..., k_T, k_T]
    sin_raw = torch.linalg.svdvals(torch.cat([residual, pad], dim=-2)).flip(-1)[..., :k]
    cos_raw, sin_raw = sigma.clamp(0.0, 1.0), sin_raw.clamp(0.0, 1.0)
    theta = torch.atan2(sin_raw, cos_raw)  # [..., k], non-decreasing
    h = torch.hypot(sin_raw, cos_raw)  # ≈ 1; normalising keeps exact 0 and 1 exact
    h = torch.where(h > 0, h, 1.0)
    cos_hat, sin_hat = cos_raw / h, sin_raw / h
    nan = torch.full_like(theta, math.nan)
    angles = torch.where(valid, theta, nan)
    cosines = torch.where(valid, cos_hat, nan)
    sines = torch.where(valid, sin_hat, nan)
    zero = torch.zeros_like(theta)
    mass = torch.where(valid, cos_hat**2, zero).sum(-1)
    chordal = torch.where(valid, sin_hat**2, zero).sum(-1)
    rs, rt, pf = r_s.to(Q_S.dtype), r_t.to(Q_S.dtype), p.to(Q_S.dtype)
    projector = (rs - pf) + (rt - pf) + 2 * chordal  # = r_S + r_T − 2M, accurate when small

    def ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
        return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), math.nan)

    return SubspaceComparison(
        cosines=cosines,
        sines=sines,
        angles=angles,
        valid=valid,
        cosine_excess=excess,
        rank_s=r_s,
        rank_t=r_t,
        ambient=d,
        projection_mass=mass,
        min_rank_overlap=ratio(mass, pf),
        coverage_s_by_t=ratio(mass, rs),
        coverage_t_by_s=ratio(mass, rt),
        chordal_squared=chordal,
        projector_squared=projector,
        haar_mass=rs * rt / d,
        haar_overlap=ratio(torch.maximum(rs, rt) / d * pf, pf),
    )
