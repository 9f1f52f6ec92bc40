"""Random orthogonal matrices (Haar, and the QR factor as drawn) and rank-revealing
orthonormal bases."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gaugelab.linalg.checks import (
    check_float_dtype,
    check_matrix,
    check_positive_int,
    default_generator,
    normalise_batch,
)


def haar_orthogonal(
    k: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    batch: int | Sequence[int] = (),
) -> torch.Tensor:
    """Haar-distributed random orthogonal matrices, drawn with an explicit generator.

    Draws ``Z`` standard normal of shape ``[*batch, k, k]`` with ``generator``, takes
    ``Q, R = qr(Z)`` and multiplies column ``j`` of ``Q`` by ``sign(R[j, j])`` (sign 0 counts
    as +1). Without that sign fix the law of ``Q`` depends on the QR convention and is not
    Haar; with it, ``Q`` is the Q factor of the QR decomposition whose ``R`` has a positive
    diagonal, which is Haar on O(k). Determinants are ±1 with both signs.

    Args:
        k: matrix size, an int ``≥ 1``.
        generator: CPU ``torch.Generator`` to draw from; it is advanced by the draw.
            ``None`` uses a fresh generator seeded 0 (so the result is then always the same).
            The global RNG is never touched.
        dtype: real floating dtype of the draw and the result (default ``torch.float64``).
        batch: leading batch shape (an int or a sequence of ints), default ``()``.

    Returns:
        ``[*batch, k, k]`` tensor of dtype ``dtype`` on the CPU with ``QᵀQ = I`` to round-off.

    Raises:
        ValueError: ``k < 1``, ``dtype`` not a real floating dtype, or a bad ``batch``.
        TypeError: ``generator`` is neither ``None`` nor a ``torch.Generator``.

    Source:
        mezzadri2007haar (the sign fix of the QR factor that makes its law Haar).
    """
    check_positive_int(k, "haar_orthogonal", "k")
    check_float_dtype(dtype, "haar_orthogonal")
    shape = normalise_batch(batch, "haar_orthogonal")
    gen = default_generator(generator, "haar_orthogonal")
    Z = torch.randn(*shape, k, k, generator=gen, dtype=dtype)
    Q, R = torch.linalg.qr(Z)  # [*batch, k, k] each
    diag = torch.diagonal(R, dim1=-2, dim2=-1)  # [*batch, k]
    signs = torch.where(diag < 0, -torch.ones_like(diag), torch.ones_like(diag))
    return Q * signs.unsqueeze(-2)  # column j times sign(R[j, j])


def qr_orthogonal(
    k: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    draw_dtype: torch.dtype | None = None,
    batch: int | Sequence[int] = (),
) -> torch.Tensor:
    """The Q factor of ``torch.linalg.qr`` of a standard normal draw, as the routine returns it.

    Draws ``Z`` standard normal of shape ``[*batch, k, k]`` in ``draw_dtype`` with
    ``generator``, casts it to ``dtype`` and returns ``torch.linalg.qr(Z)[0]`` **without** the
    sign fix of :func:`haar_orthogonal`: the column signs follow the QR routine's convention
    (Householder, so ``R`` may have negative diagonal entries), and the law is therefore not
    exactly Haar. This is the draw of scripts that rotate by ``torch.linalg.qr(torch.randn(k,
    k))[0]``; it exists to reproduce them bit for bit. With ``draw_dtype == dtype`` (the
    default) the result is exactly ``torch.linalg.qr(torch.randn(..., dtype=dtype))[0]``.

    Args:
        k: matrix size, an int ``≥ 1``.
        generator: CPU ``torch.Generator`` to draw from; it is advanced by the draw (as
            ``torch.randn(*batch, k, k, dtype=draw_dtype)`` advances it). ``None`` uses a fresh
            generator seeded 0. The global RNG is never touched.
        dtype: real floating dtype of the QR and the result (default ``torch.float64``).
        draw_dtype: real floating dtype of the normal draw (default: ``dtype``). Drawing in
            ``torch.float32`` and factoring in ``torch.float64`` gives the float32 stream's
            matrices, orthogonal to float64 round-off.
        batch: leading batch shape (an int or a sequence of ints), default ``()``.

    Returns:
        ``[*batch, k, k]`` tensor of dtype ``dtype`` on the CPU with ``QᵀQ = I`` to the
        round-off of ``dtype``.

    Raises:
        ValueError: ``k < 1``, ``dtype`` or ``draw_dtype`` not a real floating dtype, or a bad
            ``batch``.
        TypeError: ``generator`` is neither ``None`` nor a ``torch.Generator``.

    Source:
        singh2026lossbasis, §6 (the reference scripts' gauge draw); docs/protocols.md §5.
    """
    check_positive_int(k, "qr_orthogonal", "k")
    check_float_dtype(dtype, "qr_orthogonal")
    draw_dtype = dtype if draw_dtype is None else draw_dtype
    if not isinstance(draw_dtype, torch.dtype) or not draw_dtype.is_floating_point:
        raise ValueError(
            f"qr_orthogonal: draw_dtype must be a real floating torch dtype (e.g. "
            f"torch.float32), got {draw_dtype!r}"
        )
    shape = normalise_batch(batch, "qr_orthogonal")
    gen = default_generator(generator, "qr_orthogonal")
    Z = torch.randn(*shape, k, k, generator=gen, dtype=draw_dtype).to(dtype)
    return torch.linalg.qr(Z)[0]  # [*batch, k, k], column signs as the routine leaves them


def orthonormal_basis(X: torch.Tensor, *, rtol: float | None = None) -> torch.Tensor:
    """Rank-revealing orthonormal basis of the column space of a matrix.

    Takes the compact SVD ``X = U diag(σ) Vᵀ`` and keeps the columns of ``U`` whose singular
    value exceeds ``rtol·max(σ)``; their number ``r`` is the numerical rank.

    Args:
        X: ``[m, n]`` real floating tensor (not batched: the rank varies per matrix).
        rtol: relative threshold ``≥ 0``; default ``max(m, n)·finfo(X.dtype).eps``.

    Returns:
        ``[m, r]`` tensor in ``X``'s dtype with orthonormal columns, ``0 ≤ r ≤ min(m, n)``,
        ordered by decreasing singular value; ``[m, 0]`` for an all-zero ``X``.

    Raises:
        ValueError: ``X`` is not two-dimensional or not floating; ``rtol < 0``.
    """
    check_matrix(X, "orthonormal_basis", "X")
    if X.ndim != 2:
        raise ValueError(
            f"orthonormal_basis: X must have shape [m, n] (2 dimensions), "
            f"got shape {tuple(X.shape)}"
        )
    m, n = X.shape
    if rtol is None:
        rtol = max(m, n) * torch.finfo(X.dtype).eps
    elif not rtol >= 0:
        raise ValueError(f"orthonormal_basis: rtol must be a number >= 0, got {rtol!r}")
    if m == 0 or n == 0:
        return X.new_zeros((m, 0))
    U, S, _ = torch.linalg.svd(X, full_matrices=False)  # [m, min(m, n)], [min(m, n)]
    rank = int((S > rtol * S[0]).sum())  # S is sorted in decreasing order
    return U[:, :rank]
