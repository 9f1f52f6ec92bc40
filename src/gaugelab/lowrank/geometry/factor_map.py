"""The geometry of one LoRA update: the factor map ``φ(B, A) = B A``, its differential and
adjoint, the infinitesimal gauge, the fixed-rank dimension and the tangent / normal projectors.

How many locally distinct matrix directions does ``B ∈ ℝ^{m×r}``, ``A ∈ ℝ^{r×n}`` represent,
and which factor changes leave ``B A`` unchanged (seed 003 §0x03)? The differential is
``Dφ(Ḃ, Ȧ) = Ḃ A + B Ȧ``, its Frobenius adjoint ``Dφ*(G) = (G Aᵀ, Bᵀ G)``; its kernel at
full-rank factors is spanned by the ``r²`` gauge directions ``(B K, −K A)``, so its rank is
``r(m + n − r)``, the dimension of the rank-``r`` manifold.

**The declared flattening** (§0x03E; every Jacobian here uses it): the factor vector
``[m r + r n]`` is ``vec_row(Ḃ)`` then ``vec_row(Ȧ)``; the ambient vector ``[m n]`` is
``vec_row(Ẇ)``; the Jacobian ``[m n, m r + r n]`` has one column per factor coordinate. In
that order ``J = [I_m ⊗ Aᵀ | B ⊗ I_n]``. Changing any one order changes ``J`` although every
shape still fits — the test oracle ``tests/support/geometry_oracle.py`` lists such single mutations
and
the checks that reject each.

Operands are exact :class:`~gaugelab.linalg.rational.Matrix` (ranks by fraction-free
elimination, no tolerance) or 2-D floating tensors (ranks by SVD with a stated tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gaugelab.linalg.operands import Operand, chain
from gaugelab.linalg.rational import Matrix
from gaugelab.lowrank.geometry.projectors import (
    _two_d,
    is_normal,
    normal_project,
    normal_projector_operator,
    orthogonal_projectors,
    tangent_project,
    tangent_projector_operator,
)

__all__ = [
    "EXACT_JACOBIAN_LIMIT",
    "FixedRankDimension",
    "JacobianRank",
    "Matrix",
    "exact_rank",
    "factor_map_adjoint",
    "factor_map_differential",
    "factor_map_jacobian",
    "fixed_rank_dimension",
    "flatten_factors",
    "gauge_directions",
    "is_normal",
    "jacobian_rank",
    "normal_project",
    "normal_projector_operator",
    "orthogonal_projectors",
    "svd_rank",
    "tangent_project",
    "tangent_projector_operator",
    "unflatten_factors",
]


def flatten_factors(dB: Operand, dA: Operand) -> Operand:
    """The declared factor vector: ``vec_row(Ḃ)`` then ``vec_row(Ȧ)``.

    Args:
        dB: ``[m, r]``; dA: ``[r, n]``.

    Returns:
        A ``[m r + r n, 1]`` Matrix column, or a ``[m r + r n]`` tensor.

    Source: seed 003 §0x03E (the flattening contract).
    """
    if _two_d("flatten_factors", dB=dB, dA=dA):
        return Matrix.column(dB.flatten() + dA.flatten())  # type: ignore[union-attr]
    return torch.cat([dB.reshape(-1), dA.reshape(-1)])  # torch is row-major


def unflatten_factors(vector: Operand, m: int, r: int, n: int) -> tuple[Operand, Operand]:
    """The inverse of :func:`flatten_factors`: ``(Ḃ [m, r], Ȧ [r, n])``.

    Raises:
        ValueError: ``vector`` does not hold ``m r + r n`` entries.
    """
    size = m * r + r * n
    if isinstance(vector, Matrix):
        flat = vector.flatten()
        if len(flat) != size:
            raise ValueError(f"unflatten_factors: {len(flat)} entries; allowed: m*r + r*n = {size}")
        return Matrix.column(flat[: m * r]).reshape(m, r), Matrix.column(flat[m * r :]).reshape(
            r, n
        )
    if vector.numel() != size:
        raise ValueError(
            f"unflatten_factors: {vector.numel()} entries; allowed: m*r + r*n = {size}"
        )
    flat = vector.reshape(-1)
    return flat[: m * r].reshape(m, r), flat[m * r :].reshape(r, n)


def factor_map_differential(B: Operand, A: Operand, dB: Operand, dA: Operand) -> Operand:
    """``Dφ_{B,A}(Ḃ, Ȧ) = Ḃ A + B Ȧ`` — the first-order change of ``B A``; the quadratic
    remainder ``t² Ḃ Ȧ`` is why the feasible set is not one linear subspace.

    Args:
        B: ``[m, r]``; A: ``[r, n]``; dB: ``[m, r]``; dA: ``[r, n]``.

    Returns:
        ``[m, n]``.

    Raises:
        ValueError: shapes that do not match; TypeError: mixed exact / tensor operands.

    Source: seed 003 §0x03E.
    """
    _two_d("factor_map_differential", B=B, A=A, dB=dB, dA=dA)
    chain("factor_map_differential", B, A)
    if tuple(dB.shape) != tuple(B.shape) or tuple(dA.shape) != tuple(A.shape):
        raise ValueError(
            f"factor_map_differential: dB {tuple(dB.shape)}, dA {tuple(dA.shape)}; allowed: the "
            f"shapes of B {tuple(B.shape)} and A {tuple(A.shape)}"
        )
    return dB @ A + B @ dA


def factor_map_adjoint(B: Operand, A: Operand, G: Operand) -> tuple[Operand, Operand]:
    """The Frobenius adjoint ``Dφ*(G) = (G Aᵀ, Bᵀ G)``:
    ``⟨G, Ḃ A + B Ȧ⟩_F = ⟨G Aᵀ, Ḃ⟩_F + ⟨Bᵀ G, Ȧ⟩_F``.

    Args:
        B: ``[m, r]``; A: ``[r, n]``; G: ``[m, n]`` ambient probe.

    Returns:
        ``([m, r], [r, n])``; in the declared flattening, ``flatten_factors(*Dφ*(G)) =
        Jᵀ vec_row(G)``.

    Source: seed 003 §0x03E (an executable transpose check).
    """
    _two_d("factor_map_adjoint", B=B, A=A, G=G)
    chain("factor_map_adjoint", B, A, G)
    return G @ A.T, B.T @ G


def factor_map_jacobian(B: Operand, A: Operand) -> Operand:
    """The Jacobian ``J_φ [m n, m r + r n]`` of ``φ`` at ``(B, A)`` in the declared flattening.

    Exact operands: built column by column as the seed's oracle does (row-major ``B``
    coordinates first, then row-major ``A`` coordinates; each column ``vec_row(Ḃ A + B Ȧ)``
    of a basis perturbation). Tensors: the closed form ``[I_m ⊗ Aᵀ | B ⊗ I_n]``.

    Args:
        B: ``[m, r]``; A: ``[r, n]``.

    Returns:
        ``[m n, m r + r n]`` (Matrix or tensor in ``A``'s dtype).

    Source: seed 003 §0x03E, §0x03L (``factor_map_jacobian``).
    """
    exact = _two_d("factor_map_jacobian", B=B, A=A)
    chain("factor_map_jacobian", B, A)
    (m, r), n = tuple(B.shape), tuple(A.shape)[1]
    if not exact:
        eye_m = torch.eye(m, dtype=A.dtype, device=A.device)
        eye_n = torch.eye(n, dtype=A.dtype, device=A.device)
        return torch.cat(
            [torch.kron(eye_m, A.T.contiguous()), torch.kron(B.contiguous(), eye_n)], dim=1
        )
    columns = [(Matrix.unit(m, r, i, j) @ A).flatten() for i in range(m) for j in range(r)]
    columns += [(B @ Matrix.unit(r, n, i, j)).flatten() for i in range(r) for j in range(n)]
    return Matrix.from_columns(columns)


def gauge_directions(B: Operand, A: Operand) -> Operand:
    """The infinitesimal gauge directions ``(B K, −K A)`` for the elementary ``K = E_ij``
    (row-major order of ``(i, j)``), flattened: ``[m r + r n, r²]``, one column each.

    They lie in ``ker Dφ`` (``B K A − B K A = 0``); at full-rank factors they span it.

    Source: seed 003 §0x03F.
    """
    exact = _two_d("gauge_directions", B=B, A=A)
    chain("gauge_directions", B, A)
    r = tuple(B.shape)[1]
    columns = []
    for i in range(r):
        for j in range(r):
            if exact:
                K = Matrix.unit(r, r, i, j)
                columns.append(flatten_factors(B @ K, -(K @ A)).flatten())  # type: ignore[union-attr]
            else:
                K = torch.zeros(r, r, dtype=A.dtype, device=A.device)
                K[i, j] = 1
                columns.append(flatten_factors(B @ K, -(K @ A)))
    return Matrix.from_columns(columns) if exact else torch.stack(columns, dim=1)


def exact_rank(matrix: Matrix) -> int:
    """The exact rank of a rational matrix by fraction-free (Bareiss) elimination — no
    tolerance.

    Raises:
        TypeError: ``matrix`` is not a :class:`~gaugelab.linalg.rational.Matrix` (use
            :func:`svd_rank` for floats, with a stated tolerance).

    Source: seed 003 §0x03L ("exact rational elimination rather than a floating-point rank
    tolerance"); Bareiss 1968.
    """
    if not isinstance(matrix, Matrix):
        raise TypeError(
            f"exact_rank: matrix is {type(matrix).__name__}; allowed: a gaugelab Matrix of "
            "rationals (svd_rank takes float tensors with a tolerance)"
        )
    return matrix.rank()


def svd_rank(matrix: torch.Tensor, tol: float | None = None) -> tuple[int, float]:
    """The numerical rank ``#{σ_i > tol}`` of a float matrix by SVD, and the tolerance used
    (for a full :class:`~gaugelab.lowrank.spectra.ranks.RankReport` use
    :func:`gaugelab.lowrank.spectra.ranks.numerical_rank`).

    Args:
        matrix: ``[p, q]`` floating tensor, finite.
        tol: absolute singular-value threshold; default ``max(p, q) · eps(dtype) · σ_max``
            (numpy's ``matrix_rank`` rule).

    Returns:
        ``(rank, tol)``.

    Raises:
        ValueError: not 2-D / not floating / non-finite; ``tol < 0``.

    Source: seed 003 §0x03L ("later empirical rank diagnostics must name their numerical
    threshold separately").
    """
    _two_d("svd_rank", matrix=matrix)
    s = torch.linalg.svdvals(matrix)
    if tol is None:
        tol = (
            max(matrix.shape) * torch.finfo(matrix.dtype).eps * (float(s[0]) if s.numel() else 0.0)
        )
    if tol < 0:
        raise ValueError(f"svd_rank: tol={tol!r}; allowed: tol >= 0")
    return int((s > tol).sum()), float(tol)


@dataclass(frozen=True)
class JacobianRank:
    """The rank of the factor-map Jacobian at one factor point.

    Attributes:
        rank, nullity: ``rank J`` and ``(m r + r n) − rank J``.
        method: ``"exact"`` (fraction-free elimination) or ``"svd"``; tol: the SVD threshold
            (``None`` when exact).
    """

    rank: int
    nullity: int
    method: str
    tol: float | None


def jacobian_rank(B: Operand, A: Operand, tol: float | None = None) -> JacobianRank:
    """The number of first-order matrix directions available at ``(B, A)``: ``rank Dφ``.

    ``r(m + n − r)`` at full-rank factors; ``m r`` at ``B = 0`` with full-row-rank ``A``
    (all ``Ȧ`` directions vanish at first order — the local geometry of a zero-product start,
    not a permanent confinement: once ``B`` moves the ``B Ȧ`` path opens).

    Args:
        B: ``[m, r]``; A: ``[r, n]``; tol: SVD threshold for tensors (see
            :func:`svd_rank`); must be ``None`` for exact operands.

    Source: seed 003 §0x03F, §0x03J (``16`` → ``8`` on the 4×6, r = 2 fixture).
    """
    J = factor_map_jacobian(B, A)
    cols = tuple(J.shape)[1]
    if isinstance(J, Matrix):
        if tol is not None:
            raise ValueError("jacobian_rank: tol given for exact operands; allowed: tol=None")
        rank = J.rank()
        return JacobianRank(rank, cols - rank, "exact", None)
    rank, used = svd_rank(J, tol)
    return JacobianRank(rank, cols - rank, "svd", used)


EXACT_JACOBIAN_LIMIT = 20_000
"""Largest Jacobian (entries) whose rank :func:`fixed_rank_dimension` computes exactly."""


@dataclass(frozen=True)
class FixedRankDimension:
    """``dim R_{=r}`` three ways, and the ambient ledger of seed 003 §0x03I.

    Attributes:
        m, n, r: shape and rank.
        via_subspaces: ``r(m − r) + r(n − r) + r²`` (two Grassmannians and a core).
        via_fibre: ``r(m + n) − r²`` (factor coordinates minus the ``GL(r)`` fibre).
        via_jacobian: the rank of ``J_φ`` at the full-rank point ``B = [I_r; 0]``,
            ``A = [I_r 0]`` — exact (fraction-free) when ``J`` has at most
            :data:`EXACT_JACOBIAN_LIMIT` entries, else float64 SVD (the point's singular values
            are 1 and √2, so the default tolerance cannot misjudge it).
        jacobian_method: ``"exact"`` or ``"svd"``.
        ambient, factor, gauge, normal: ``m n``, ``r(m + n)``, ``r²``, ``(m − r)(n − r)``.
    """

    m: int
    n: int
    r: int
    via_subspaces: int
    via_fibre: int
    via_jacobian: int
    jacobian_method: str
    ambient: int
    factor: int
    gauge: int
    normal: int


def fixed_rank_dimension(m: int, n: int, r: int) -> FixedRankDimension:
    """The dimension ``r(m + n − r)`` of the rank-``r`` matrices ``R_{=r} ⊂ ℝ^{m×n}``, three
    ways, with the ledger ``m n = r(m + n − r) + (m − r)(n − r)``.

    Raises:
        ValueError: not ``1 ≤ r ≤ min(m, n)``.

    Source: seed 003 §0x03C, §0x03D, §0x03F, §0x03I; vandereycken2013lowrank.
    """
    for name, v in (("m", m), ("n", n), ("r", r)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"fixed_rank_dimension: {name}={v!r}; allowed: an integer >= 1")
    if r > min(m, n):
        raise ValueError(
            f"fixed_rank_dimension: r={r} > min(m, n)={min(m, n)}; allowed: r <= min(m, n)"
        )
    B = Matrix([[1 if i == j else 0 for j in range(r)] for i in range(m)])
    A = Matrix([[1 if i == j else 0 for j in range(n)] for i in range(r)])
    if m * n * r * (m + n) > EXACT_JACOBIAN_LIMIT:
        B, A = B.to_tensor(), A.to_tensor()
    jac = jacobian_rank(B, A)
    return FixedRankDimension(
        m,
        n,
        r,
        r * (m - r) + r * (n - r) + r * r,
        r * (m + n) - r * r,
        jac.rank,
        jac.method,
        m * n,
        r * (m + n),
        r * r,
        (m - r) * (n - r),
    )
