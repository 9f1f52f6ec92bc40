"""Intrinsic dimension as a protocol: projections with exact adjoints, DID and SAID, the d90 rule.

Three layers, one concept (seed 003 §0x02):

* **Projections** ``P: ℝ^d → ℝ^D`` with one interface — ``forward`` (``P u``), ``adjoint``
  (``Pᵀ g``), ``apply`` (differentiable, its backward the adjoint) and an identity record
  (:class:`ProjectionIdentity`): :class:`DenseProjection` (Gaussian with unit-norm columns;
  ``normalization="qr"`` exactly orthonormal), :class:`SparseProjection` (very sparse random),
  :class:`FastfoodProjection` (``(1/p) H G Π H B`` blocks, ``O(D)`` state, ``O(D log d)``
  time, our own :func:`fwht`), :class:`MatrixProjection` (a given matrix). The adjoint identity
  ``⟨g, P v⟩ = ⟨Pᵀ g, v⟩`` is :func:`adjoint_defect`; the projector facts of §0x02B are
  :func:`is_orthonormal`, :func:`orthogonal_projector` and :func:`induced_metric`.
* **Reparameterizations** of any ``nn.Module`` through ``torch.func.functional_call``:
  :class:`DIDReparameterization` (``θ = θ₀ + P u``) and :class:`SAIDReparameterization`
  (``θ_i = θ₀_i + λ_i R_i P(z)``, the ``m`` scales inside ``d``), with :func:`said_ledger` and
  :class:`DegenerateBudget` for ``d = m``.
* **The d90 rule**: :func:`historical_threshold`, :func:`normalized_gain_threshold`,
  :class:`QualityTransform` (required for lower-is-better metrics), :func:`classify_grid_crossing`
  (crossing and bracket, left/right censoring, no cumulative maximum) and
  :func:`estimate_from_records` (the seed's pseudocode on stored trial records).

Source: seed 003 §0x02A–K; li2018intrinsic; aghajanyan2021intrinsic.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gaugelab.lowrank.intrinsic.estimate import (
    AGGREGATORS,
    BOUNDARY_STATES,
    FAILED_SEED_SCORE,
    DimensionSummary,
    GridCrossing,
    IntrinsicDimensionEstimate,
    QualityTransform,
    ThresholdRule,
    TrialRecord,
    classify_grid_crossing,
    estimate_from_records,
    historical_threshold,
    normalized_gain,
    normalized_gain_threshold,
)
from gaugelab.lowrank.intrinsic.fastfood import (
    FASTFOOD_NORMALIZATIONS,
    FastfoodProjection,
    fastfood_width,
)
from gaugelab.lowrank.intrinsic.hadamard import fwht, hadamard_matrix, reference_fwht
from gaugelab.lowrank.intrinsic.projections import (
    DENSE_NORMALIZATIONS,
    SPARSE_NORMALIZATIONS,
    DenseProjection,
    MatrixProjection,
    Projection,
    ProjectionIdentity,
    SparseProjection,
)
from gaugelab.lowrank.intrinsic.reparam import (
    DegenerateBudget,
    DIDReparameterization,
    ParameterLayout,
    SAIDReparameterization,
    said_ledger,
)

__all__ = [
    "AGGREGATORS",
    "BOUNDARY_STATES",
    "DENSE_NORMALIZATIONS",
    "FAILED_SEED_SCORE",
    "FAMILIES",
    "FASTFOOD_NORMALIZATIONS",
    "SPARSE_NORMALIZATIONS",
    "DIDReparameterization",
    "DegenerateBudget",
    "DenseProjection",
    "DimensionSummary",
    "FastfoodProjection",
    "GridCrossing",
    "IntrinsicDimensionEstimate",
    "MatrixProjection",
    "ParameterLayout",
    "Projection",
    "ProjectionIdentity",
    "QualityTransform",
    "SAIDReparameterization",
    "SparseProjection",
    "ThresholdRule",
    "TrialRecord",
    "adjoint_defect",
    "classify_grid_crossing",
    "estimate_from_records",
    "fastfood_width",
    "fwht",
    "hadamard_matrix",
    "historical_threshold",
    "induced_metric",
    "is_orthonormal",
    "make_projection",
    "normalized_gain",
    "normalized_gain_threshold",
    "orthogonal_projector",
    "reference_fwht",
    "said_ledger",
]

FAMILIES = ("dense", "orthonormal", "sparse", "fastfood")
"""Projection families of :func:`make_projection`."""


def make_projection(
    family: str,
    ambient_dim: int,
    subspace_dim: int,
    seed: int,
    *,
    dtype: torch.dtype = torch.float32,
    normalization: str | None = None,
) -> Projection:
    """A projection of ``family`` (one of :data:`FAMILIES`).

    Args:
        family: ``dense`` (Gaussian, unit-norm columns by default), ``orthonormal`` (QR),
            ``sparse`` (very sparse random), ``fastfood``.
        ambient_dim, subspace_dim, seed: ``D``, ``d`` and the seed of the draw.
        dtype: ``torch.float32`` or ``torch.float64``.
        normalization: the family's normalization (default: ``unit-columns`` for dense and
            sparse, ``qr`` for orthonormal, ``1/p`` for Fastfood).

    Raises:
        ValueError: an unknown family, or what the family's constructor raises.

    Source: seed 003 §0x02C.
    """
    if family == "dense":
        return DenseProjection(
            ambient_dim,
            subspace_dim,
            seed,
            dtype=dtype,
            normalization=normalization or "unit-columns",
        )
    if family == "orthonormal":
        if normalization not in (None, "qr"):
            raise ValueError(
                f"make_projection: family 'orthonormal' with normalization="
                f"{normalization!r}; allowed: qr"
            )
        return DenseProjection(ambient_dim, subspace_dim, seed, dtype=dtype, normalization="qr")
    if family == "sparse":
        return SparseProjection(
            ambient_dim,
            subspace_dim,
            seed,
            dtype=dtype,
            normalization=normalization or "unit-columns",
        )
    if family == "fastfood":
        return FastfoodProjection(
            ambient_dim, subspace_dim, seed, dtype=dtype, normalization=normalization or "1/p"
        )
    raise ValueError(f"make_projection: family={family!r}; allowed: {', '.join(FAMILIES)}")


def adjoint_defect(
    forward: Projection | Callable[[torch.Tensor], torch.Tensor],
    adjoint: Callable[[torch.Tensor], torch.Tensor] | None = None,
    *,
    shape: tuple[int, int] | None = None,
    probes: int = 8,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> float:
    """The largest relative defect of the adjoint identity over random probe pairs.

    For probes ``v ∈ ℝ^d`` and ``g ∈ ℝ^D`` (standard normal, from their own generator),
    ``|⟨g, P v⟩ − ⟨Pᵀ g, v⟩| / (‖g‖ ‖P v‖ + ‖Pᵀ g‖ ‖v‖)`` — zero up to rounding for a correct
    adjoint (≲ 1e-15 in float64), order one for a wrong transpose, a changed flattening order, a
    forward permutation reused in the adjoint, or a forward and adjoint from different seeds.

    Args:
        forward: a :class:`Projection`, or a function ``[d] → [D]``.
        adjoint: the function ``[D] → [d]`` (default: ``forward.adjoint``).
        shape: ``(D, d)`` (default: the projection's).
        probes: probe pairs; seed: their seed; dtype: their dtype (the map's, for a
            :class:`Projection`).

    Returns:
        The maximum over the probes (a float ``>= 0``).

    Raises:
        ValueError: ``shape`` missing for plain functions; ``probes < 1``.

    Source: seed 003 §0x02A (the adjoint identity), §0x02D.
    """
    if isinstance(forward, Projection):
        adjoint = adjoint or forward.adjoint
        shape = shape or (forward.ambient_dim, forward.subspace_dim)
        dtype = forward.dtype
        forward = forward.forward
    if shape is None or adjoint is None:
        raise ValueError("adjoint_defect: plain functions need adjoint= and shape=(D, d)")
    if probes < 1:
        raise ValueError(f"adjoint_defect: probes={probes}; allowed: an integer >= 1")
    D, d = shape
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    for _ in range(probes):
        v = torch.randn(d, generator=gen, dtype=dtype)
        g = torch.randn(D, generator=gen, dtype=dtype)
        Pv, Ptg = forward(v), adjoint(g)
        scale = float(g.norm() * Pv.norm() + Ptg.norm() * v.norm())
        gap = abs(float(g @ Pv) - float(Ptg @ v))
        worst = max(worst, gap / scale if scale > 0 else gap)
    return worst


def is_orthonormal(M: torch.Tensor, *, tol: float = 1e-12) -> bool:
    """Whether ``MᵀM = I_d`` to ``tol`` (max entry), so ``MMᵀ`` is the orthogonal projector.

    Args:
        M: ``[D, d]`` float tensor (a :meth:`Projection.matrix`).

    Source: seed 003 §0x02B.
    """
    eye = torch.eye(M.shape[1], dtype=M.dtype)
    return bool((M.T @ M - eye).abs().max() <= tol)


def orthogonal_projector(M: torch.Tensor) -> torch.Tensor:
    """``[D, D]`` ``Π = M (MᵀM)⁻¹ Mᵀ``, the orthogonal projector onto ``col(M)`` (``M`` of full
    column rank; for orthonormal ``M`` this is ``MMᵀ``).

    Raises:
        torch.linalg.LinAlgError: ``MᵀM`` is singular (``M`` rank-deficient).

    Source: seed 003 §0x02B.
    """
    return M @ torch.linalg.solve(M.T @ M, M.T)


def induced_metric(M: torch.Tensor) -> torch.Tensor:
    """``[D, D]`` ``MMᵀ``: one plain gradient step in ``u`` moves ``θ`` by ``−η MMᵀ ∇_θ L``.
    A projector only when ``MᵀM = I`` (:func:`is_orthonormal`); ``M ↦ MR`` keeps
    :func:`orthogonal_projector` and changes this.

    Source: seed 003 §0x02A–B.
    """
    return M @ M.T
