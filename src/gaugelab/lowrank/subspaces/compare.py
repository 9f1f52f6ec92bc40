"""Gauge-invariant subspace similarity of low-rank updates: bases, principal angles, overlaps.

``B A = (B G)(G⁻¹ A)`` for every invertible ``G`` (seed 003 §0x06A), so raw factor entries,
norms and cosines say nothing intrinsic about an update. Every comparison here is between
*spans* extracted from the update ``ΔW = s·B A`` by a declared rank policy
(:func:`update_bases`: QR of ``B`` and ``Aᵀ`` and the SVD of the small core, ``B A`` never
formed; batched over modules), on both sides — the row space in ``ℝ^{d_in}`` (what the update
reads) and the column space in ``ℝ^{d_out}`` (what it writes), §0x06F — and, for factors, the
factors' own spans beside them, labelled, since they differ once a factor has collapsed
(§0x06B, §0x06J).

* :func:`principal_angles` — cosines from the cross matrix, sines from the residual,
  ``atan2`` of both (accurate for tiny and large angles in one pair), the cosine excess
  recorded before clipping, projection mass, min-rank overlap, both directed coverages,
  chordal and projector distances, the Haar baseline of the same ranks (§0x06C–§0x06H, §0x06K);
* :func:`compare_updates` — all of that for the row and column spaces of two updates;
* :func:`haar_baseline` (exact) and :func:`haar_null` (seeded Monte Carlo, with its spread);
* :func:`procrustes_align` — aligned bases compared by the fit, never by the rotation (§0x06I);
* :func:`lora_phi` / :func:`phi_matrix` — the LoRA paper's ``φ(A_i, A_j, i, j)`` (§0x06J).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gaugelab.lowrank.spectra.factored import (
    SvdRecord,
    as_update,
    factor_roundoff,
    update_svd,
)
from gaugelab.lowrank.spectra.ranks import algebraic_rank, energy_rank, numerical_rank
from gaugelab.lowrank.spectra.spectrum import RankReport, Spectrum, check_id, reports
from gaugelab.lowrank.subspaces.angles import SubspaceComparison, principal_angles
from gaugelab.lowrank.subspaces.null import HaarBaseline, HaarNull, haar_baseline, haar_null
from gaugelab.lowrank.subspaces.phi import (
    SIDES,
    PhiMatrix,
    ProcrustesFit,
    lora_phi,
    phi_matrix,
    procrustes_align,
)

__all__ = [
    "BASIS_POLICIES",
    "SIDES",
    "HaarBaseline",
    "HaarNull",
    "PhiMatrix",
    "ProcrustesFit",
    "SubspaceComparison",
    "SubspaceReport",
    "UpdateBases",
    "compare_updates",
    "haar_baseline",
    "haar_null",
    "lora_phi",
    "phi_matrix",
    "principal_angles",
    "procrustes_align",
    "update_bases",
]

BASIS_POLICIES: tuple[str, ...] = ("numerical", "algebraic", "energy", "configured")
"""Rank policies that choose how many leading singular directions span an update (an ``int``
``k`` is also accepted: the leading ``min(k, q)``). ``configured`` is the factor width ``r``."""


@dataclass(frozen=True)
class UpdateBases:
    """Row and column bases of an update ``ΔW [..., m, n]`` chosen by a rank policy.

    Attributes:
        column: ``[..., m, q]`` left singular vectors, energy-ordered; the first ``rank``
            columns are ``Q_col`` (the span the update writes).
        row: ``[..., n, q]`` right singular vectors; the first ``rank`` are ``Q_row``.
        sigma: ``[..., q]`` singular values, non-increasing.
        rank: ``[...]`` long, the retained rank per member.
        policy: the :class:`RankReport` (one, or a tuple per member of a batch) that chose it.
        svd: how the SVD was computed (``factored`` for factors: ``B A`` never formed).
        factor_column, factor_row: for factors ``(B, A[, s])``: ``[..., m, r]`` left singular
            vectors of ``B`` and ``[..., n, r]`` right singular vectors of ``A`` — the factors'
            own spans; ``None`` for a dense update.
        factor_column_rank, factor_row_rank: ``[...]`` long numerical ranks of ``B`` and
            ``A`` (``max(shape)·eps`` rule), or ``None``.
    """

    column: torch.Tensor
    row: torch.Tensor
    sigma: torch.Tensor
    rank: torch.Tensor
    policy: RankReport | tuple[RankReport, ...]
    svd: SvdRecord
    factor_column: torch.Tensor | None = None
    factor_row: torch.Tensor | None = None
    factor_column_rank: torch.Tensor | None = None
    factor_row_rank: torch.Tensor | None = None

    def basis(self, side: str) -> torch.Tensor:
        """``Q_row`` ``[n, rank]`` or ``Q_col`` ``[m, rank]`` of one update (not a batch).

        Raises:
            ValueError: an unknown side, or a batch.
        """
        if side not in SIDES:
            raise ValueError(f"UpdateBases.basis: side={side!r}; allowed: {', '.join(SIDES)}")
        if self.rank.ndim:
            raise ValueError(
                f"UpdateBases.basis: a batch of shape {tuple(self.rank.shape)}; index a member"
            )
        Q = self.row if side == "row" else self.column
        return Q[:, : int(self.rank)]


def _factor_span(X: torch.Tensor, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    rtol = max(X.shape[-2:]) * torch.finfo(X.dtype).eps
    first = S[..., :1] if S.shape[-1] else S.new_zeros((*S.shape[:-1], 1))
    rank = (S > rtol * first).sum(-1)
    return (U if left else Vh.mT), rank


def _policy_rank(
    sp: Spectrum, policy: str | int, rtol: float | None, rho: float, configured: int | None
) -> RankReport | tuple[RankReport, ...]:
    func = "update_bases"
    if isinstance(policy, int) and not isinstance(policy, bool):
        if policy < 0:
            raise ValueError(f"{func}: policy={policy}; allowed: an int >= 0 or {BASIS_POLICIES}")
        q = sp.sigma.shape[-1]
        return _fixed(sp, "leading", min(policy, q), {"k": policy, "q": q})
    if policy == "numerical":
        return numerical_rank(sp, rtol=rtol)
    if policy == "algebraic":
        return algebraic_rank(sp)
    if policy == "energy":
        return energy_rank(sp, rho=rho)
    if policy == "configured":
        if configured is None:
            raise ValueError(f"{func}: policy='configured' needs factors (B, A[, scale])")
        return _fixed(sp, "configured", min(configured, sp.sigma.shape[-1]), {"r": configured})
    raise ValueError(
        f"{func}: policy={policy!r}; allowed: {', '.join(BASIS_POLICIES)}, or an int k"
    )


def _fixed(sp: Spectrum, name: str, value: int, params: dict) -> RankReport | tuple:
    values = torch.full(sp.batch, value, dtype=torch.long)
    return reports(sp, f"{name}(k={value})", values, params)


def update_bases(
    x: object,
    *,
    policy: str | int = "numerical",
    rtol: float | None = None,
    rho: float = 0.99,
    computed_in: torch.dtype | None = None,
    matrix_id: str = "update",
    factor_spans: bool = True,
) -> UpdateBases:
    """Row and column bases of an update, by a declared rank policy, in factor space.

    Args:
        x: a dense ``[..., m, n]`` update, or factors ``(B, A)`` / ``(B, A, scale)`` with
            ``B [..., m, r]``, ``A [..., r, n]`` of ``ΔW = scale·B A`` (leading dims a batch,
            e.g. the modules of one shape).
        policy: ``numerical`` (``#{σ_i > rtol·σ_1}``), ``algebraic`` (``σ_i > 0``),
            ``energy`` (smallest ``k`` with energy fraction ``≥ rho``), ``configured`` (the
            factor width ``r``), or an int ``k`` (the leading ``min(k, q)`` directions). The
            policies are :mod:`gaugelab.lowrank.spectra.ranks`'.
        rtol: the numerical policy's threshold (default ``max(m, n)·eps(computed_in)``).
        rho: the energy policy's fraction, in ``(0, 1]``.
        computed_in: the dtype the update was produced in (sets the default ``rtol``).
        matrix_id: the update's id in the rank report.
        factor_spans: also the factors' own spans (an SVD of ``B`` and of ``A``); ``False``
            leaves them ``None``.

    Returns:
        :class:`UpdateBases` in ``x``'s dtype (float32 for half precision).

    Raises:
        TypeError, ValueError: a bad update (see :func:`gaugelab.lowrank.spectrum`), an
            unknown policy, ``configured`` for a dense update, a bad ``rtol`` or ``rho``.

    Source:
        seed 003 §0x06B (``Q_col = U_r``, ``Q_row = V_r``), §0x06L steps 2–4, §0x00I
        (rank is a policy).
    """
    func = "update_bases"
    mid = check_id(matrix_id, func)
    update = as_update(x, func, "x")
    U, S, V, record = update_svd(update)
    roundoff = None if update.dense is not None else factor_roundoff(update, S.dtype)
    sp = Spectrum(mid, S, update.shape, computed_in or update.dtype, record, roundoff)
    configured = None if update.B is None else update.B.shape[-1]
    report = _policy_rank(sp, policy, rtol, rho, configured)
    members = report if isinstance(report, tuple) else (report,)
    rank = torch.tensor([int(r.value) for r in members], dtype=torch.long).reshape(sp.batch)
    extra = {}
    if update.B is not None and factor_spans:
        work = S.dtype
        fc, fc_rank = _factor_span(update.B.to(work), left=True)  # type: ignore[union-attr]
        fr, fr_rank = _factor_span(update.A.to(work), left=False)  # type: ignore[union-attr]
        extra = dict(factor_column=fc, factor_row=fr, factor_column_rank=fc_rank,
                     factor_row_rank=fr_rank)  # fmt: skip
    return UpdateBases(U, V, S, rank, report, record, **extra)


@dataclass(frozen=True)
class SubspaceReport:
    """Two updates compared on both sides (seed 003 §0x06K's ``subspace_report``).

    Attributes:
        row, column: :class:`SubspaceComparison` of the updates' row spaces (``ℝ^n``) and
            column spaces (``ℝ^m``).
        factor_row, factor_column: the same for the factors' own spans, ``row(A_S)`` against
            ``row(A_T)`` and ``col(B_S)`` against ``col(B_T)`` (numerical rank of each factor);
            ``None`` unless both are factors. They equal ``row``/``column`` at full factor
            rank and differ once a factor has collapsed (§0x06B, §0x06J).
        bases_s, bases_t: the :class:`UpdateBases` compared.
    """

    row: SubspaceComparison
    column: SubspaceComparison
    factor_row: SubspaceComparison | None
    factor_column: SubspaceComparison | None
    bases_s: UpdateBases
    bases_t: UpdateBases


def compare_updates(
    x_s: object,
    x_t: object,
    *,
    policy: str | int = "numerical",
    rtol: float | None = None,
    rho: float = 0.99,
    computed_in: torch.dtype | None = None,
    factor_spans: bool = True,
) -> SubspaceReport:
    """Row- and column-space principal angles and overlaps of two updates of one shape.

    Args:
        x_s, x_t: updates as :func:`update_bases` takes them (dense or factors, any mix), of
            one shape ``[..., m, n]``, batch shape and dtype (factors of different ranks are
            fine).
        policy, rtol, rho, computed_in: the rank policy, applied to each update
            (:func:`update_bases`).
        factor_spans: also compare the factors' own spans (``factor_row``/``factor_column``).

    Returns:
        :class:`SubspaceReport`.

    Raises:
        TypeError, ValueError: as :func:`update_bases`; different shapes, batch shapes or
            dtypes.

    Source:
        seed 003 §0x06K, §0x06L (steps 2–7), §0x06F (both sides), §0x06J (factor spans).
    """
    func = "compare_updates"
    kw = dict(policy=policy, rtol=rtol, rho=rho, computed_in=computed_in,
              factor_spans=factor_spans)  # fmt: skip
    b_s = update_bases(x_s, matrix_id="S", **kw)
    b_t = update_bases(x_t, matrix_id="T", **kw)
    if b_s.row.shape[:-1] != b_t.row.shape[:-1] or b_s.column.shape[:-1] != b_t.column.shape[:-1]:
        raise ValueError(
            f"{func}: updates of shapes {tuple(b_s.column.shape[:-1])}×{b_s.row.shape[-2]} and "
            f"{tuple(b_t.column.shape[:-1])}×{b_t.row.shape[-2]}; allowed: one [..., m, n]"
        )
    if b_s.row.dtype != b_t.row.dtype:
        raise ValueError(f"{func}: dtypes {b_s.row.dtype} and {b_t.row.dtype}; allowed: one")
    row = principal_angles(b_s.row, b_t.row, rank_s=b_s.rank, rank_t=b_t.rank)
    column = principal_angles(b_s.column, b_t.column, rank_s=b_s.rank, rank_t=b_t.rank)
    factor_row = factor_column = None
    if b_s.factor_row is not None and b_t.factor_row is not None:
        factor_row = principal_angles(
            b_s.factor_row, b_t.factor_row,
            rank_s=b_s.factor_row_rank, rank_t=b_t.factor_row_rank,
        )  # fmt: skip
        factor_column = principal_angles(
            b_s.factor_column, b_t.factor_column,  # type: ignore[arg-type]
            rank_s=b_s.factor_column_rank, rank_t=b_t.factor_column_rank,
        )  # fmt: skip
    return SubspaceReport(row, column, factor_row, factor_column, b_s, b_t)
