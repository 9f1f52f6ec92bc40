"""The LoRA paper's normalised similarity φ over leading singular directions, and orthogonal
Procrustes alignment of bases (private; re-exported by ``gaugelab.lowrank.subspaces.compare``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gaugelab.lowrank.subspaces.angles import check_basis

__all__ = ["SIDES", "PhiMatrix", "ProcrustesFit", "lora_phi", "phi_matrix", "procrustes_align"]

SIDES: tuple[str, ...] = ("row", "column")
"""``row``: the input space ``ℝ^{d_in}`` (right singular vectors); ``column``: the output
space ``ℝ^{d_out}`` (left singular vectors)."""


@dataclass(frozen=True)
class PhiMatrix:
    """``φ(i, j) = ‖(Q_1^i)ᵀ Q_2^j‖_F² / min(i, j)`` for ``1 ≤ i ≤ I``, ``1 ≤ j ≤ J``.

    Attributes:
        phi: ``[I, J]`` float64 in ``[0, 1]``; ``phi[i-1, j-1]`` is ``φ(i, j)``.
        baseline: ``[I, J]`` float64, the Haar expectation ``max(i, j) / d`` (§0x06H).
        ambient: ``d``; side: ``row``, ``column`` or ``given`` (bases handed in).
    """

    phi: torch.Tensor
    baseline: torch.Tensor
    ambient: int
    side: str


def phi_matrix(Q_1: torch.Tensor, Q_2: torch.Tensor, *, side: str = "given") -> PhiMatrix:
    """φ of two ordered orthonormal bases (leading direction first).

    One cross matrix ``C = Q_1ᵀ Q_2`` and a two-dimensional prefix sum of ``C²`` give every
    ``(i, j)`` at once: ``φ(i, j) = Σ_{a≤i, b≤j} C_ab² / min(i, j)``.

    Args:
        Q_1: ``[d, I]`` with orthonormal columns, ordered (e.g. by singular value).
        Q_2: ``[d, J]``, the same ``d`` and dtype.
        side: a label stored in the result.

    Returns:
        :class:`PhiMatrix` (computed in float64).

    Raises:
        TypeError, ValueError: a basis not a finite real ``[d, k]`` tensor, different ``d``,
            or a batch.

    Source:
        hu2021lora, §7.2 and Appendix G (Figure 3); seed 003 §0x06J.
    """
    func = "phi_matrix"
    Q_1, Q_2 = check_basis(Q_1, func, "Q_1"), check_basis(Q_2, func, "Q_2")
    if Q_1.ndim != 2 or Q_2.ndim != 2 or Q_1.shape[0] != Q_2.shape[0]:
        raise ValueError(
            f"{func}: Q_1 {tuple(Q_1.shape)} and Q_2 {tuple(Q_2.shape)}; allowed: [d, I] and "
            "[d, J] with one d (no batch)"
        )
    d, n_i, n_j = Q_1.shape[0], Q_1.shape[1], Q_2.shape[1]
    C2 = (Q_1.double().mT @ Q_2.double()).square()  # [I, J]
    prefix = C2.cumsum(0).cumsum(1)  # Σ_{a≤i, b≤j}
    i = torch.arange(1, n_i + 1, dtype=torch.float64)[:, None]
    j = torch.arange(1, n_j + 1, dtype=torch.float64)[None, :]
    phi = (prefix / torch.minimum(i, j)).clamp(0.0, 1.0)
    return PhiMatrix(phi, torch.maximum(i, j) / d, d, side)


def _directions(X: torch.Tensor, side: str, func: str, arg: str) -> torch.Tensor:
    X = check_basis(X, func, arg)
    if X.ndim != 2:
        raise ValueError(f"{func}: {arg} must be one matrix, got shape {tuple(X.shape)}")
    U, _, Vh = torch.linalg.svd(X.double(), full_matrices=False)
    return Vh.mT if side == "row" else U


def lora_phi(
    X_1: torch.Tensor,
    X_2: torch.Tensor,
    *,
    side: str = "row",
    i_max: int | None = None,
    j_max: int | None = None,
) -> PhiMatrix:
    """The LoRA paper's φ between the leading singular directions of two factors.

    ``side="row"``: the right singular vectors of down factors ``A [r, d_in]`` (the paper's
    comparison of ``A_{r=8}`` and ``A_{r=64}``); ``side="column"``: the left singular vectors
    of up factors ``B [d_out, r]`` (its "analogous" analysis for ``B``). These are *factor*
    spans: when the other factor has collapsed, ``row(B A) ≠ row(A)`` (§0x06J) — compare the
    update's own bases (:func:`update_bases` then :func:`phi_matrix`) for that.

    Args:
        X_1, X_2: ``[r_1, d]`` and ``[r_2, d]`` (row) or ``[d, r_1]`` and ``[d, r_2]``
            (column) real floating tensors.
        side: ``"row"`` or ``"column"``.
        i_max, j_max: how many leading directions of each (default all ``min(r, d)``).

    Returns:
        :class:`PhiMatrix` ``[i_max, j_max]``.

    Raises:
        ValueError: an unknown side, a non-matrix, mismatched ``d``, ``i_max``/``j_max``
            outside ``[1, directions]``.

    Source:
        hu2021lora, §7.2, Appendix G; seed 003 §0x06J.
    """
    func = "lora_phi"
    if side not in SIDES:
        raise ValueError(f"{func}: side={side!r}; allowed: {', '.join(SIDES)}")
    Q_1 = _directions(X_1, side, func, "X_1")
    Q_2 = _directions(X_2, side, func, "X_2")
    out = []
    for name, value, Q in (("i_max", i_max, Q_1), ("j_max", j_max, Q_2)):
        k = Q.shape[1]
        if value is None:
            value = k
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= k:
            raise ValueError(f"{func}: {name}={value!r}; allowed: an int in [1, {k}]")
        out.append(Q[:, :value])
    if out[0].shape[0] != out[1].shape[0]:
        raise ValueError(
            f"{func}: X_1 and X_2 live in different ambient dimensions ({out[0].shape[0]} and "
            f"{out[1].shape[0]}) on side {side!r}"
        )
    return phi_matrix(out[0], out[1], side=side)


@dataclass(frozen=True)
class ProcrustesFit:
    """The orthogonal Procrustes alignment ``R* = argmin_{RᵀR=I} ‖Q_S − Q_T R‖_F²``.

    Attributes:
        rotation: ``[r, r]``, ``R* = L R_0ᵀ`` from ``Q_Tᵀ Q_S = L Σ R_0ᵀ``.
        aligned_squared: ``‖Q_S − Q_T R*‖_F²`` (computed).
        closed_form: ``2r − 2 Σ_a cos θ_a`` (§0x06I), equal to ``aligned_squared``.
        raw_squared: ``‖Q_S − Q_T‖_F²`` of the bases as given — basis coordinates, not the
            span (compare by the fit, never by the rotation).
    """

    rotation: torch.Tensor
    aligned_squared: float
    closed_form: float
    raw_squared: float


def procrustes_align(Q_S: torch.Tensor, Q_T: torch.Tensor) -> ProcrustesFit:
    """Align the orthonormal basis ``Q_T`` to ``Q_S`` by an orthogonal change of coordinates.

    Only after span extraction (QR or SVD): it does not solve the ``GL(r)`` gauge of raw LoRA
    factors; projectors and principal angles stay the primary invariants (§0x06I).

    Args:
        Q_S, Q_T: ``[d, r]`` each, orthonormal columns, one dtype.

    Returns:
        :class:`ProcrustesFit`.

    Raises:
        TypeError, ValueError: not finite real matrices, or different shapes or dtypes.

    Source:
        schonemann1966generalized (orthogonal Procrustes); seed 003 §0x06I.
    """
    func = "procrustes_align"
    Q_S, Q_T = check_basis(Q_S, func, "Q_S"), check_basis(Q_T, func, "Q_T")
    if Q_S.ndim != 2 or Q_S.shape != Q_T.shape or Q_S.dtype != Q_T.dtype:
        raise ValueError(
            f"{func}: Q_S {tuple(Q_S.shape)} {Q_S.dtype} and Q_T {tuple(Q_T.shape)} {Q_T.dtype}; "
            "allowed: two [d, r] bases of one shape and dtype"
        )
    L, sigma, R0h = torch.linalg.svd(Q_T.mT @ Q_S)  # [r, r], [r], [r, r]
    R = L @ R0h
    r = Q_S.shape[1]
    return ProcrustesFit(
        rotation=R,
        aligned_squared=float((Q_S - Q_T @ R).square().sum()),
        closed_form=float(2 * r - 2 * sigma.clamp(0.0, 1.0).sum()),
        raw_squared=float((Q_S - Q_T).square().sum()),
    )
