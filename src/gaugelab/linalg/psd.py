"""Powers of symmetric positive semi-definite matrices, with damping and an eigenvalue floor."""

from __future__ import annotations

import math

import torch

from gaugelab.linalg.checks import check_matrix


def psd_power(
    S: torch.Tensor,
    power: float,
    *,
    damping: float = 0.0,
    clamp: float = 1e-6,
) -> torch.Tensor:
    """Matrix power of a batch of symmetric positive semi-definite matrices.

    Computes ``V diag(max(λ, clamp)^power) Vᵀ`` where ``S_sym + damping·I = V diag(λ) Vᵀ``
    (``torch.linalg.eigh``) and ``S_sym = (S + Sᵀ)/2``. This is Shampoo's preconditioner
    root: ``psd_power(L, -1/4, damping=λ)`` is ``(L + λI)^(-1/4)`` with eigenvalues floored
    at ``clamp``. The floor acts after damping, on the eigenvalues, so directions in the
    null space of a rank-deficient ``S`` get ``max(damping, clamp)^power``.

    Args:
        S: ``[..., n, n]`` real floating tensor, symmetric positive semi-definite up to
            round-off (only its symmetric part is used); leading dimensions are a batch.
        power: real exponent (e.g. ``0.5``, ``-0.25``, ``-1``).
        damping: ``λ ≥ 0`` added to the diagonal before the eigendecomposition.
        clamp: floor on the eigenvalues, ``≥ 0``; must be ``> 0`` when ``power < 0``
            (a zero eigenvalue has no negative power).

    Returns:
        ``[..., n, n]`` symmetric tensor in ``S``'s dtype and device.

    Raises:
        ValueError: ``S`` has fewer than two dimensions, is not square, or has a non-floating
            dtype; ``damping < 0`` or non-finite; ``clamp < 0``; ``clamp ≤ 0`` with
            ``power < 0``; ``power`` non-finite.

    Source:
        gupta2018shampoo (the inverse-root preconditioners ``L^(-1/4)``, ``R^(-1/4)``,
        computed by symmetric eigendecomposition with damping).
    """
    check_matrix(S, "psd_power", "S")
    if S.shape[-1] != S.shape[-2]:
        raise ValueError(
            f"psd_power: S must be square, shape [..., n, n], got shape {tuple(S.shape)}"
        )
    if not math.isfinite(power):
        raise ValueError(f"psd_power: power must be a finite number, got {power!r}")
    if not (math.isfinite(damping) and damping >= 0):
        raise ValueError(f"psd_power: damping must be a finite number >= 0, got {damping!r}")
    if not clamp >= 0:
        raise ValueError(f"psd_power: clamp must be a number >= 0, got {clamp!r}")
    if power < 0 and clamp <= 0:
        raise ValueError(
            f"psd_power: clamp must be > 0 when power < 0 (got clamp={clamp!r}, "
            f"power={power!r}); a zero eigenvalue has no negative power"
        )
    n = S.shape[-1]
    sym = 0.5 * (S + S.mT)
    if damping:
        sym = sym + damping * torch.eye(n, dtype=S.dtype, device=S.device)
    eigvals, eigvecs = torch.linalg.eigh(sym)  # [..., n], [..., n, n]
    # pow runs vectorized over the whole tensor, with a scalar tail that can round differently:
    # row by row, each matrix's result is independent of its place in a batch (an ensemble
    # that drops members changes no remaining member's bits)
    rows = eigvals.clamp_min(clamp).reshape(-1, n)
    scaled = torch.stack([row.pow(power) for row in rows.unbind(0)]).view_as(eigvals)
    return (eigvecs * scaled.unsqueeze(-2)) @ eigvecs.mT
