"""The orthogonal polar factor ("matrix sign"), exactly by SVD or by Newton–Schulz."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gaugelab.linalg.checks import check_matrix, check_positive_int

MUON_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
"""The quintic Newton–Schulz coefficients (a, b, c) of Muon (jordan2024muon)."""

_METHODS = ("newton_schulz", "svd")


def msign(
    X: torch.Tensor,
    *,
    method: str = "svd",
    steps: int = 5,
    coefficients: Sequence[float] = MUON_COEFFICIENTS,
    eps: float = 1e-7,
) -> torch.Tensor:
    """Orthogonal polar factor ("matrix sign") of a batch of matrices.

    For ``X = U diag(σ) Vᵀ`` (compact SVD), ``msign(X) = U Vᵀ``: the closest matrix with
    orthonormal rows or columns. Both methods satisfy ``msign(P X Q) = P msign(X) Q`` for
    orthogonal ``P`` (``[m, m]``) and ``Q`` (``[n, n]``).

    Args:
        X: ``[..., m, n]`` real floating tensor; leading dimensions are a batch.
        method: ``"svd"`` returns ``U Vᵀ`` of the compact SVD exactly; singular values
            ``≤ max(σ)·max(m, n)·finfo(dtype).eps`` count as zero, so a rank-deficient
            matrix gives the partial isometry on its range and an all-zero matrix gives
            zeros. ``"newton_schulz"`` runs the quintic iteration of Muon:
            ``X₀ = X/(‖X‖_F + eps)`` (Frobenius norm per matrix), transposed when
            ``m > n``, then ``steps`` times ``X ← aX + (bA + cA²)X`` with ``A = X Xᵀ``,
            transposed back. It is not exact (with the default coefficients and 5 steps
            the singular values land roughly in [0.7, 1.2], not at 1) but it is exactly
            equivariant, because every iterate is an odd matrix polynomial in ``X₀``.
        steps: Newton–Schulz iteration count, an int ``≥ 1`` (ignored by ``"svd"``).
        coefficients: Newton–Schulz ``(a, b, c)``; each step maps a normalised singular
            value ``s`` to ``a s + b s³ + c s⁵``. Default: Muon's (3.4445, −4.7750, 2.0315).
        eps: Newton–Schulz Frobenius-normalisation floor, ``≥ 0``. An all-zero matrix maps
            to zeros even with ``eps = 0``.

    Returns:
        ``[..., m, n]`` tensor in ``X``'s dtype and device (the computation never casts);
        all-zero matrices map to zeros, never NaN.

    Raises:
        ValueError: ``X`` has fewer than two dimensions or a non-floating (integer, bool,
            complex) dtype; ``method`` is unknown; ``steps < 1``; ``coefficients`` is not
            three numbers; ``eps < 0``.
        TypeError: ``X`` is not a tensor.

    Source:
        singh2026lossbasis, Prop. 4.2(3) (equivariance of msign and of its finite
        Newton–Schulz approximations); jordan2024muon (the Newton–Schulz coefficients).
    """
    check_matrix(X, "msign", "X")
    if method == "svd":
        return _msign_svd(X)
    if method != "newton_schulz":
        raise ValueError(f"msign: unknown method {method!r}; known methods: {', '.join(_METHODS)}")
    check_positive_int(steps, "msign", "steps")
    coeffs = tuple(coefficients)
    if len(coeffs) != 3:
        raise ValueError(
            f"msign: coefficients must be three numbers (a, b, c), got {coefficients!r}"
        )
    if not eps >= 0:
        raise ValueError(f"msign: eps must be a number >= 0, got {eps!r}")
    return _msign_newton_schulz(X, steps, coeffs, eps)


def _msign_svd(X: torch.Tensor) -> torch.Tensor:
    m, n = X.shape[-2:]
    if m == 0 or n == 0:
        return torch.zeros_like(X)
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)  # [..., m, r], [..., r], [..., r, n]
    tol = S.amax(dim=-1, keepdim=True) * (max(m, n) * torch.finfo(X.dtype).eps)
    keep = (S > tol).to(X.dtype)  # [..., r]; all False for an all-zero matrix
    return (U * keep.unsqueeze(-2)) @ Vh


def _msign_newton_schulz(
    X: torch.Tensor, steps: int, coefficients: tuple[float, ...], eps: float
) -> torch.Tensor:
    a, b, c = coefficients
    norm = torch.linalg.matrix_norm(X, ord="fro", dim=(-2, -1), keepdim=True)  # [..., 1, 1]
    denom = norm + eps
    # Only an all-zero matrix with eps = 0 has denom 0; dividing its zeros by 1 keeps them 0.
    denom = torch.where(denom == 0, torch.ones_like(denom), denom)
    Y = X / denom
    transposed = X.shape[-2] > X.shape[-1]
    if transposed:
        Y = Y.mT  # [..., n, m], now rows <= cols so A = Y Yᵀ is the smaller Gram matrix
    for _ in range(steps):
        A = Y @ Y.mT
        B = b * A + c * (A @ A)
        Y = a * Y + B @ Y
    return Y.mT if transposed else Y
