"""Tangent and normal projectors of :mod:`gaugelab.lowrank.geometry.factor_map` (seed 003
§0x03G–0x03I).
Private; re-exported there."""

from __future__ import annotations

import torch

from gaugelab.linalg.operands import Operand, chain, mode
from gaugelab.linalg.rational import Matrix


def _two_d(where: str, **xs: object) -> bool:
    exact = mode(where, **xs)
    for name, x in xs.items():
        if not exact and x.dim() != 2:  # type: ignore[union-attr]
            raise ValueError(f"{where}: {name} has shape {tuple(x.shape)}; allowed: a 2-D matrix")  # type: ignore[union-attr]
    return exact


def orthogonal_projectors(B: Operand, A: Operand) -> tuple[Operand, Operand]:
    """The orthogonal projectors onto ``col(B)`` and ``row(A)``:
    ``P_U = B (BᵀB)⁻¹ Bᵀ`` ``[m, m]`` and ``P_V = Aᵀ (A Aᵀ)⁻¹ A`` ``[n, n]`` (exact for
    rationals; ``U Uᵀ``, ``V Vᵀ`` of any orthonormal bases).

    Raises:
        ValueError: ``B`` lacks full column rank or ``A`` full row rank (exact operands; for
            tensors ``torch.linalg.solve`` raises on a singular Gram).

    Source: seed 003 §0x03H.
    """
    _two_d("orthogonal_projectors", B=B, A=A)
    chain("orthogonal_projectors", B, A)
    if isinstance(B, Matrix):
        try:
            return B @ (B.T @ B).inverse() @ B.T, A.T @ (A @ A.T).inverse() @ A
        except ValueError as err:
            raise ValueError(f"orthogonal_projectors: {err}; allowed: full-rank factors") from None
    return B @ torch.linalg.solve(B.T @ B, B.T), A.T @ torch.linalg.solve(A @ A.T, A)


def _check_orthonormal(where: str, **bases: Operand) -> None:
    for name, X in bases.items():
        k = tuple(X.shape)[1]
        gram = X.T @ X
        if isinstance(X, Matrix):
            ok = gram == Matrix.identity(k)
        else:
            ok = bool(torch.allclose(gram, torch.eye(k, dtype=X.dtype), atol=1e-9, rtol=0))
        if not ok:
            raise ValueError(
                f"{where}: {name} is not orthonormal ({name}ᵀ{name} ≠ I); "
                "allowed: an orthonormal basis"
            )


def tangent_project(Z: Operand, U: Operand, V: Operand) -> Operand:
    """The Frobenius-orthogonal projection onto ``T_W R_{=r}`` at ``W = U Σ Vᵀ``:
    ``P_T(Z) = P_U Z + Z P_V − P_U Z P_V``.

    Not one Euclidean SGD step in arbitrary factors (that depends on the factor gauge and the
    optimizer metric).

    Args:
        Z: ``[m, n]``; U: ``[m, r]`` and V: ``[n, r]`` orthonormal bases of ``col(W)`` and
            ``row(W)`` (checked exactly, or to 1e-9).

    Source: seed 003 §0x03H, §0x03L (``tangent_project``).
    """
    _two_d("tangent_project", Z=Z, U=U, V=V)
    _check_orthonormal("tangent_project", U=U, V=V)
    PU, PV = U @ U.T, V @ V.T
    return PU @ Z + Z @ PV - PU @ Z @ PV


def normal_project(Z: Operand, U: Operand, V: Operand) -> Operand:
    """The normal component ``P_N(Z) = (I − P_U) Z (I − P_V)``; ``Z = P_T(Z) + P_N(Z)``.

    Args: as :func:`tangent_project`.

    Source: seed 003 §0x03H, §0x03L (``normal_project``).
    """
    _two_d("normal_project", Z=Z, U=U, V=V)
    _check_orthonormal("normal_project", U=U, V=V)
    m, n = tuple(Z.shape)
    if isinstance(Z, Matrix):
        Im, In = Matrix.identity(m), Matrix.identity(n)
    else:
        Im, In = torch.eye(m, dtype=Z.dtype), torch.eye(n, dtype=Z.dtype)
    return (Im - U @ U.T) @ Z @ (In - V @ V.T)


def _operator(fn, Z_shape: tuple[int, int], exact: bool, dtype: torch.dtype | None) -> Operand:
    m, n = Z_shape
    columns = []
    for i in range(m):
        for j in range(n):
            if exact:
                columns.append(fn(Matrix.unit(m, n, i, j)).flatten())
            else:
                E = torch.zeros(m, n, dtype=dtype)
                E[i, j] = 1
                columns.append(fn(E).reshape(-1))
    return Matrix.from_columns(columns) if exact else torch.stack(columns, dim=1)


def tangent_projector_operator(U: Operand, V: Operand) -> Operand:
    """``P_T`` as an ``[m n, m n]`` operator on ``vec_row`` (symmetric, idempotent, rank
    ``r(m + n − r)``). Args: as :func:`tangent_project`. Source: seed 003 §0x03I."""
    exact = _two_d("tangent_projector_operator", U=U, V=V)
    shape = (next(iter(U.shape)), next(iter(V.shape)))
    return _operator(lambda Z: tangent_project(Z, U, V), shape, exact, None if exact else U.dtype)


def normal_projector_operator(U: Operand, V: Operand) -> Operand:
    """``P_N`` as an ``[m n, m n]`` operator on ``vec_row`` (rank ``(m − r)(n − r)``).
    Args: as :func:`tangent_project`. Source: seed 003 §0x03I."""
    exact = _two_d("normal_projector_operator", U=U, V=V)
    shape = (next(iter(U.shape)), next(iter(V.shape)))
    return _operator(lambda Z: normal_project(Z, U, V), shape, exact, None if exact else U.dtype)


def is_normal(B: Operand, A: Operand, N: Operand, atol: float = 1e-9) -> bool:
    """Whether ``N`` is orthogonal to every ``Ḃ A + B Ȧ``: ``Bᵀ N = 0`` and ``N Aᵀ = 0``
    (exactly for rationals; to ``atol`` in max-abs for tensors).

    Source: seed 003 §0x03H (the normal space without an SVD).
    """
    _two_d("is_normal", B=B, A=A, N=N)
    chain("is_normal", B, A, N)
    left, right = B.T @ N, N @ A.T
    if isinstance(left, Matrix):
        return left.is_zero() and right.is_zero()
    return bool(left.abs().max() <= atol) and bool(right.abs().max() <= atol)
