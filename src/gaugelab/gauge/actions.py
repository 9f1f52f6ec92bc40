"""The gauge action on factor pairs: ``(U, V) ↦ (U A, V A⁻ᵀ)``, which preserves ``U Vᵀ``."""

from __future__ import annotations

from functools import partial

import torch

from gaugelab.linalg.checks import check_matrix

_check_factor = partial(check_matrix, shape="[..., d, k]")


def _check_batch(func: str, **tensors: torch.Tensor) -> None:
    try:
        torch.broadcast_shapes(*(t.shape[:-2] for t in tensors.values()))
    except RuntimeError:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in tensors.items())
        raise ValueError(f"{func}: leading (batch) dimensions do not broadcast: {shapes}") from None


def _check_dtypes(func: str, **tensors: torch.Tensor) -> None:
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) > 1:
        given = ", ".join(f"{name} {t.dtype}" for name, t in tensors.items())
        raise TypeError(f"{func}: all tensors must share one dtype, got {given}")


def represented(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """The represented matrix ``W = U Vᵀ`` of a factor pair: the gauge invariant.

    Args:
        U: ``[..., d1, k]`` real floating tensor.
        V: ``[..., d2, k]`` tensor of the same dtype; leading dimensions broadcast with ``U``'s.

    Returns:
        ``[..., d1, d2]`` tensor ``U @ Vᵀ``.

    Raises:
        ValueError: a tensor has fewer than two dimensions or is not floating, the ``k``
            dimensions differ, or the batch dimensions do not broadcast.
        TypeError: the dtypes differ.

    Source:
        singh2026lossbasis, §3 (GL gauge action).
    """
    func = "represented"
    _check_factor(U, func, "U")
    _check_factor(V, func, "V")
    if U.shape[-1] != V.shape[-1]:
        raise ValueError(
            f"{func}: U [..., d1, k] and V [..., d2, k] must share k, "
            f"got U {tuple(U.shape)} and V {tuple(V.shape)}"
        )
    _check_batch(func, U=U, V=V)
    _check_dtypes(func, U=U, V=V)
    return U @ V.mT


def inverse_transpose(A: torch.Tensor) -> torch.Tensor:
    """``A⁻ᵀ = (A⁻¹)ᵀ`` of a batch of invertible matrices, by a linear solve (no explicit inverse).

    Args:
        A: ``[..., k, k]`` real floating tensor, each matrix invertible.

    Returns:
        ``[..., k, k]`` tensor in ``A``'s dtype, the solution ``X`` of ``Aᵀ X = I``.

    Raises:
        ValueError: ``A`` is not ``[..., k, k]`` or not floating.
        torch.linalg.LinAlgError: a matrix of ``A`` is singular.
    """
    func = "inverse_transpose"
    _check_factor(A, func, "A")
    if A.shape[-1] != A.shape[-2]:
        raise ValueError(f"{func}: A must have shape [..., k, k], got {tuple(A.shape)}")
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return torch.linalg.solve(A.mT, eye)


def _orthogonal_to_round_off(A: torch.Tensor) -> bool:
    tol = 64 * torch.finfo(A.dtype).eps * A.shape[-1]
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return bool(((A.mT @ A - eye).abs() <= tol).all())


def contragredient(A: torch.Tensor) -> torch.Tensor:
    """``A⁻ᵀ``, returned as ``A`` itself when ``A`` is orthogonal to round-off.

    This is how a gradient (or a momentum buffer) transforms when its parameter becomes
    ``p @ A``, and how the second factor of a pair moves; taking ``A`` itself for orthogonal
    elements keeps orthogonal twins free of solve round-off.

    Args:
        A: ``[..., k, k]`` invertible real matrices.

    Returns:
        ``[..., k, k]`` in ``A``'s dtype.

    Raises:
        ValueError / torch.linalg.LinAlgError: as :func:`inverse_transpose`.
    """
    return A if _orthogonal_to_round_off(A) else inverse_transpose(A)


def act(
    U: torch.Tensor,
    V: torch.Tensor,
    A: torch.Tensor,
    *,
    orthogonal: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GL(k) gauge action on a factor pair: ``(U, V) ↦ (U A, V A⁻ᵀ)``.

    The represented matrix is unchanged: ``(U A)(V A⁻ᵀ)ᵀ = U A A⁻¹ Vᵀ = U Vᵀ``. For
    orthogonal ``A``, ``A⁻ᵀ = A`` and the result is exactly ``(U @ A, V @ A)`` with no solve,
    so an orthogonal gauge twin carries no round-off beyond the two products.

    Args:
        U: ``[..., d1, k]`` real floating tensor.
        V: ``[..., d2, k]`` tensor of the same dtype.
        A: ``[..., k, k]`` invertible matrices of the same dtype; all leading dimensions of
            ``U``, ``V`` and ``A`` broadcast together.
        orthogonal: ``True`` trusts that ``A`` is orthogonal and returns ``(U @ A, V @ A)``
            unchecked; ``False`` always solves for ``A⁻ᵀ``; ``None`` (default) takes the
            orthogonal path when every matrix of ``A`` satisfies
            ``max |AᵀA − I| ≤ 64·k·finfo(dtype).eps``, and solves otherwise.

    Returns:
        ``(U A, V A⁻ᵀ)``: tensors of shapes ``[..., d1, k]`` and ``[..., d2, k]``.

    Raises:
        ValueError: a tensor has fewer than two dimensions or is not floating; ``U`` and
            ``V`` differ in ``k``; ``A`` is not ``[..., k, k]``; batch dimensions do not
            broadcast.
        TypeError: the dtypes differ.
        torch.linalg.LinAlgError: ``A`` is singular (non-orthogonal path only).

    Source:
        singh2026lossbasis, §3 (GL gauge action).
    """
    func = "act"
    _check_factor(U, func, "U")
    _check_factor(V, func, "V")
    _check_factor(A, func, "A")
    k = U.shape[-1]
    if V.shape[-1] != k:
        raise ValueError(
            f"{func}: U [..., d1, k] and V [..., d2, k] must share k, "
            f"got U {tuple(U.shape)} and V {tuple(V.shape)}"
        )
    if tuple(A.shape[-2:]) != (k, k):
        raise ValueError(
            f"{func}: A must have shape [..., k, k] with k={k} (from U {tuple(U.shape)}), "
            f"got A {tuple(A.shape)}"
        )
    _check_batch(func, U=U, V=V, A=A)
    _check_dtypes(func, U=U, V=V, A=A)
    if orthogonal is None:
        orthogonal = _orthogonal_to_round_off(A)
    if orthogonal:
        return U @ A, V @ A
    return U @ A, V @ inverse_transpose(A)
