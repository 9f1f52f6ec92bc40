"""Reconstruction: what rank ``r`` can approximate, in weight space and on sampled inputs.

Weight-space truncation keeps the leading ``r`` singular triplets of the frozen update (the
Eckart–Young optimum in Frobenius and spectral norm). Output-weighted truncation minimises the
mean squared change of the layer's outputs on sampled inputs ``X``: the truncated SVD of
``ΔW C^{1/2}`` mapped back with ``C^{†/2}``, ``C = XᵀX/N``. Updates are dense ``[m, n]`` or
factors ``(B, A[, scale])`` of ``ΔW = scale·B A``, decomposed in factor space (seed 003 §0x04).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from gaugelab.lowrank.spectra.covariance import (
    CovarianceSupport,
    InputMoments,
    Inputs,
    OutputResidual,
    check_inputs,
    covariance_support,
    output_residual,
)
from gaugelab.lowrank.spectra.factored import (
    SvdRecord,
    Update,
    as_update,
    check_rank,
    default_rtol,
    scaled,
    unbatched,
    update_svd,
)

__all__ = [
    "BALANCES",
    "CovarianceSupport",
    "InputMoments",
    "OutputResidual",
    "OutputWeightedTruncation",
    "RankSweep",
    "TruncationRow",
    "covariance_support",
    "output_residual",
    "output_weighted_rank_r",
    "reconstruct_by_rank",
]

BALANCES: tuple[str, ...] = ("unbalanced", "balanced")
"""Factor splits of a truncation: ``B_r = U_r Σ_r, A_r = V_rᵀ``, or ``Σ_r^{1/2}`` on each side."""


@dataclass(frozen=True)
class TruncationRow:
    """One rank of a weight-space rank sweep (seed 003 §0x04D's columns).

    Attributes:
        rank: ``r ≥ 0`` (may exceed ``min(m, n)``).
        retained_energy: ``Σ_{i≤r} σ_i² / Σ_i σ_i²`` (squared singular values).
        retained_mass: ``Σ_{i≤r} σ_i / Σ_i σ_i`` (singular values) — a different policy.
            Both are 1.0 for the zero matrix (its rank-0 truncation is exact).
        frobenius_squared: ``‖ΔW − ΔW_r‖_F² = Σ_{i>r} σ_i²``, the tail (§0x04B).
        frobenius_squared_direct: ``‖ΔW − B_r A_r‖_F²`` from the formed residual, for a dense
            ``ΔW``; ``None`` for factors (forming ``B A`` is what factor space avoids).
        spectral: ``‖ΔW − ΔW_r‖_2 = σ_{r+1}``, 0.0 past the last singular value.
        non_unique: ``σ_r`` and ``σ_{r+1}`` tie (``σ_r − σ_{r+1} ≤ tie_rtol·σ_1`` with
            ``σ_{r+1} > tie_rtol·σ_1``), so several rank-``r`` matrices are optimal and this
            row's factors are one choice among them. ``False`` for ``r = 0`` and past the end.
        B: ``[m, r]`` up factor, ``A``: ``[r, n]`` down factor, ``B A = ΔW_r``; for
            ``r > q`` the last ``r − q`` columns of ``B`` and rows of ``A`` are zero.
    """

    rank: int
    retained_energy: float
    retained_mass: float
    frobenius_squared: float
    frobenius_squared_direct: float | None
    spectral: float
    non_unique: bool
    B: torch.Tensor
    A: torch.Tensor


@dataclass(frozen=True)
class RankSweep:
    """A weight-space rank sweep of one matrix: its spectrum, SVD record and rows.

    Attributes:
        matrix_id: the matrix object's id (``None`` when not given).
        shape: ``(m, n)``.
        sigma: ``[q]`` singular values, non-increasing (``q = min(m, n)``, or
            ``min(m, n, r)`` for factors; the rest are exactly zero).
        svd: ``SvdRecord`` of the decomposition (dense or factored, dtype, backend).
        balance: ``"unbalanced"`` or ``"balanced"``.
        tie_rtol: the relative tie tolerance used for ``non_unique``.
        rows: one ``TruncationRow`` per requested rank, in the order requested.
    """

    matrix_id: str | None
    shape: tuple[int, int]
    sigma: torch.Tensor
    svd: SvdRecord
    balance: str
    tie_rtol: float
    rows: tuple[TruncationRow, ...]


def reconstruct_by_rank(
    delta: object,
    ranks: Iterable[int],
    *,
    balance: str = "unbalanced",
    matrix_id: str | None = None,
    tie_rtol: float | None = None,
    computed_in: torch.dtype | None = None,
) -> RankSweep:
    """Truncated-SVD reconstruction of a frozen update at each requested rank.

    One compact SVD ``ΔW = U diag(σ) Vᵀ`` (factor space for factors), then per rank ``r``
    the factors of ``ΔW_r = U_r Σ_r V_rᵀ``, the Frobenius² tail ``Σ_{i>r} σ_i²``, the
    spectral error ``σ_{r+1}``, retained energy and retained mass as separate columns, and a
    flag when a tie ``σ_r = σ_{r+1}`` makes the truncation non-unique.

    Args:
        delta: dense ``[m, n]`` real floating tensor (output × input), or factors ``(B, A)`` /
            ``(B, A, scale)`` with ``B [m, r_cfg]``, ``A [r_cfg, n]``; not batched.
        ranks: ints ``≥ 0``, any order, may exceed ``min(m, n)``.
        balance: ``"unbalanced"`` (``B_r = U_r Σ_r``, ``A_r = V_rᵀ``, the seed's) or
            ``"balanced"`` (``B_r = U_r Σ_r^{1/2}``, ``A_r = Σ_r^{1/2} V_rᵀ``); gauge-equivalent
            when the retained ``σ`` are nonzero.
        matrix_id: the matrix object's id, carried by the result.
        tie_rtol: relative tie tolerance ``≥ 0``; default ``max(m, n)·eps(computed_in)``.
        computed_in: dtype ``delta`` was produced in (default its dtype); sets ``tie_rtol``.

    Returns:
        ``RankSweep`` with ``rows``; factors in ``delta``'s dtype (float32 for half inputs).

    Raises:
        TypeError: ``delta`` is neither a tensor nor factors.
        ValueError: ``delta`` batched, non-floating or non-finite; a rank not an int ``≥ 0``;
            unknown ``balance``; ``tie_rtol < 0``; ``computed_in`` not a floating dtype.

    Source:
        seed 003 §0x04B (Eckart–Young tail and spectral error, tie non-uniqueness;
        eckart1936approximation), §0x04C (factors), §0x04D (the energy and mass columns),
        §0x04K (``reconstruct_by_rank``).
    """
    func = "reconstruct_by_rank"
    update = unbatched(as_update(delta, func), func)
    if balance not in BALANCES:
        raise ValueError(f"{func}: unknown balance {balance!r}; known: {', '.join(BALANCES)}")
    wanted = [check_rank(r, func) for r in ranks]
    tie_rtol = default_rtol(tie_rtol, update.shape, computed_in or update.dtype, func, "tie_rtol")
    U, S, V, record = update_svd(update)
    energy, mass = (S**2).sum(), S.sum()
    rows = []
    for r in wanted:
        B_r, A_r = _truncated_factors(U, S, V, r, balance)
        direct = None
        if update.dense is not None:
            direct = float(((update.dense.to(B_r.dtype) - B_r @ A_r) ** 2).sum())
        rows.append(
            TruncationRow(
                rank=r,
                retained_energy=_fraction((S[:r] ** 2).sum(), energy),
                retained_mass=_fraction(S[:r].sum(), mass),
                frobenius_squared=float((S[r:] ** 2).sum()),
                frobenius_squared_direct=direct,
                spectral=float(S[r]) if r < S.shape[0] else 0.0,
                non_unique=_non_unique(S, r, tie_rtol),
                B=B_r,
                A=A_r,
            )
        )
    return RankSweep(matrix_id, update.shape, S, record, balance, tie_rtol, tuple(rows))


@dataclass(frozen=True)
class OutputWeightedTruncation:
    """The output-weighted rank-``r`` truncation of one update on sampled inputs.

    Attributes:
        matrix_id: the update's id (``None`` when not given).
        rank: ``r``.
        B: ``[m, r]`` ``U_r Σ_r`` of ``M = ΔW C^{1/2}``; ``A``: ``[r, n]`` ``V_rᵀ C^{†/2}``;
            zero columns / rows past ``M``'s last singular value.
        sigma: ``[q]`` singular values of ``M`` (non-increasing).
        non_unique: a tie ``σ_r(M) = σ_{r+1}(M)`` (rule of ``TruncationRow.non_unique``).
        support: the ``CovarianceSupport`` of ``X`` (``invisible``: what the data cannot see).
        invisible_update_energy: ``‖ΔW Q_0‖_F²``, ``Q_0 = support.invisible``: the part of the
            update on input directions the sampled loss cannot see.
        residual: ``OutputResidual`` of ``ΔW_{X,r}``; its value is ``Σ_{i>r} σ_i(M)²``.
        svd: ``SvdRecord`` of the SVD of ``M``.
    """

    matrix_id: str | None
    rank: int
    B: torch.Tensor
    A: torch.Tensor
    sigma: torch.Tensor
    non_unique: bool
    support: CovarianceSupport
    invisible_update_energy: float
    residual: OutputResidual
    svd: SvdRecord

    @property
    def delta_r(self) -> torch.Tensor:
        """``[m, n]`` the minimum-norm representative ``(ΔW C^{1/2})_r C^{†/2} = B A``."""
        return self.B @ self.A


def output_weighted_rank_r(
    delta: object,
    X: Inputs,
    r: int,
    support_tol: float | None = None,
    *,
    matrix_id: str | None = None,
    tie_rtol: float | None = None,
    computed_in: torch.dtype | None = None,
) -> OutputWeightedTruncation:
    """Rank-``r`` update minimising the mean output residual ``(1/N)‖X (ΔW − ΔŴ)ᵀ‖_F²``.

    ``L_X(ΔŴ) = ‖(ΔW − ΔŴ) C^{1/2}‖_F²``, so Eckart–Young applies to ``M = ΔW C^{1/2}``, not
    to ``ΔW``: ``ΔW_{X,r} = M_r C^{†/2}``, the minimum-norm optimum (its rows lie in the
    covariance support). Any ``N0`` with ``N0 C^{1/2} = 0`` can be added without changing the
    sampled loss: the data does not identify the update off its support, and the result
    reports those ``invisible`` directions and how much of ``ΔW`` lies on them. For factors,
    ``M = s·B (A C^{1/2})`` is decomposed in factor space and ``B A`` is never formed.

    Args:
        delta: dense ``[m, n]`` or factors ``(B, A[, scale])``; not batched.
        X: ``[N, n]`` sampled inputs of the layer (rows), ``delta``'s dtype, ``N ≥ 1``; or
            their :class:`InputMoments` (streamed ``XᵀX`` and ``N``: the same truncation).
        r: target rank, an int ``≥ 0``.
        support_tol: covariance cut-off (see ``covariance_support``; default
            ``max(λ)·n·eps(computed_in)``), distinct from ``tie_rtol`` and any rank tolerance.
        matrix_id: the update's id, carried by the result.
        tie_rtol: relative tie tolerance on ``σ(M)``; default ``max(m, n)·eps(computed_in)``.
        computed_in: dtype the inputs were produced in (default ``delta``'s); sets defaults.

    Returns:
        ``OutputWeightedTruncation``.

    Raises:
        TypeError, ValueError: as ``reconstruct_by_rank`` and ``covariance_support``;
            ``X``'s width or dtype differs from ``delta``'s.

    Source:
        seed 003 §0x04F (whitened SVD), §0x04G (pseudo-inverse, invisible null space),
        §0x04H (the ``X_skew`` counterexample), §0x04K (``output_weighted_rank_r``).
    """
    func = "output_weighted_rank_r"
    update = unbatched(as_update(delta, func), func)
    X = check_inputs(X, func, update)
    r = check_rank(r, func)
    dtype = computed_in or update.dtype
    support = covariance_support(X, support_tol=support_tol, computed_in=dtype)
    tie_rtol = default_rtol(tie_rtol, update.shape, dtype, func, "tie_rtol")
    if update.dense is not None:
        whitened = Update(update.dense @ support.sqrt, None, None, 1.0)  # [m, n]
        hidden = update.dense @ support.invisible  # [m, n − k]
    else:
        whitened = Update(None, update.B, update.A @ support.sqrt, update.scale)
        hidden = scaled(update.B, update.scale) @ (update.A @ support.invisible)
    U, S, V, record = update_svd(whitened)
    B_r, A_r = _truncated_factors(U, S, V, r, "unbalanced")
    A_r = A_r @ support.pinv_sqrt  # [r, n]
    return OutputWeightedTruncation(
        matrix_id=matrix_id,
        rank=r,
        B=B_r,
        A=A_r,
        sigma=S,
        non_unique=_non_unique(S, r, tie_rtol),
        support=support,
        invisible_update_energy=float((hidden**2).sum()),
        residual=output_residual(delta, (B_r, A_r), X),
        svd=record,
    )


def _truncated_factors(
    U: torch.Tensor, S: torch.Tensor, V: torch.Tensor, r: int, balance: str
) -> tuple[torch.Tensor, torch.Tensor]:
    k = min(r, S.shape[0])
    left = S[:k] if balance == "unbalanced" else S[:k].sqrt()
    right = torch.ones_like(S[:k]) if balance == "unbalanced" else S[:k].sqrt()
    B = U.new_zeros((U.shape[0], r))
    A = V.new_zeros((r, V.shape[0]))
    B[:, :k] = U[:, :k] * left  # [m, k]
    A[:k] = right[:, None] * V[:, :k].mT  # [k, n]
    return B, A


def _non_unique(S: torch.Tensor, r: int, rtol: float) -> bool:
    if r == 0 or r >= S.shape[0]:
        return False
    tau = rtol * float(S[0])
    return float(S[r]) > tau and float(S[r - 1] - S[r]) <= tau


def _fraction(part: torch.Tensor, total: torch.Tensor) -> float:
    return float(part / total) if float(total) > 0 else 1.0
