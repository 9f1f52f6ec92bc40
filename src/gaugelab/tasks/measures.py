"""What the sensing experiments measure of a solution: the effective rank of ``W`` and the
balancedness ``‖UᵀU − VᵀV‖_F`` of its factors (docs/protocols.md §2–§3)."""

from __future__ import annotations

import torch


def effective_rank(W: torch.Tensor) -> torch.Tensor:
    """Roy–Vetterli effective rank ``exp(H(p))``, ``p = σ / Σσ`` (singular values, not squared).

    Args:
        W: ``[..., d1, d2]`` floating tensor; leading dims are a batch.

    Returns:
        ``[...]`` in ``W``'s dtype, between 1 and ``min(d1, d2)``; ``0 log 0 = 0``, so zero
        singular values do not count. An all-zero matrix gets 0 (**ours**: rank 0).

    Raises:
        ValueError: ``W`` has fewer than two dimensions.

    Source: roy2007effective (Def. 1); docs/protocols.md §3 (effective rank of ``U Vᵀ``).
    """
    if W.dim() < 2:
        raise ValueError(f"effective_rank: W has shape {tuple(W.shape)}; allowed: [..., d1, d2]")
    sigma = torch.linalg.svdvals(W)  # [..., min(d1, d2)]
    total = sigma.sum(dim=-1, keepdim=True)
    p = sigma / torch.where(total > 0, total, torch.ones_like(total))
    entropy = -torch.special.xlogy(p, p).sum(dim=-1)
    return torch.where(total.squeeze(-1) > 0, torch.exp(entropy), torch.zeros_like(entropy))


def balancedness(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``‖UᵀU − VᵀV‖_F``, the conserved quantity of gradient flow on ``U Vᵀ``.

    Args:
        U: ``[..., d1, k]``; V: ``[..., d2, k]``; leading dims are a batch.

    Returns:
        ``[...]`` in the factors' dtype.

    Raises:
        ValueError: the factors' widths differ.

    Source: docs/protocols.md §3 (balancedness) and §2 (conserved by gradient flow).
    """
    if U.dim() < 2 or V.dim() < 2 or U.shape[-1] != V.shape[-1]:
        raise ValueError(
            f"balancedness: U {tuple(U.shape)} and V {tuple(V.shape)}; allowed: [..., d1, k] "
            f"and [..., d2, k] with the same k"
        )
    return torch.linalg.matrix_norm(U.mT @ U - V.mT @ V)
