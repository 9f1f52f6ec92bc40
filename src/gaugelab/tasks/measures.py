"""What the sensing experiments measure of a solution: the effective rank of ``W`` and the
balancedness ``‖UᵀU − VᵀV‖_F`` of its factors (docs/protocols.md §2–§3)."""

from __future__ import annotations

import torch

from gaugelab.linalg.entropy import ENTROPY_CONVENTIONS, entropy_effective_rank


def effective_rank(W: torch.Tensor, *, convention: str = "energy") -> torch.Tensor:
    """Entropy effective rank ``exp(−Σ p_i ln p_i)`` of the singular values ``σ`` of ``W``.

    Two conventions, never one label (seed 003 §0x04J): ``"energy"`` (the default, seed 003's
    ``r_ent``) normalises the squared singular values, ``p = σ² / Σσ²``;
    ``"roy_vetterli"`` normalises the singular values, ``p = σ / Σσ`` (roy2007effective, the
    metric of the sensing experiments, docs/protocols.md §3). ``diag(4, 3, 2, 1)`` gives
    ≈ 2.9402 and ≈ 3.5961 respectively. The same statistics as
    :mod:`gaugelab.lowrank.spectra.ranks`' ``effective_rank_energy`` and
    ``effective_rank_roy_vetterli`` (one implementation,
    :func:`gaugelab.linalg.entropy_effective_rank`), as bare values.

    Args:
        W: ``[..., d1, d2]`` floating tensor; leading dims are a batch.
        convention: ``"energy"`` or ``"roy_vetterli"``.

    Returns:
        ``[...]`` in ``W``'s dtype, between 1 and ``rank(W)``; ``0 log 0 = 0``, so zero
        singular values do not count. An all-zero matrix gets 0 (no distribution is invented).

    Raises:
        ValueError: ``W`` has fewer than two dimensions; an unknown ``convention``.

    Source: seed 003 §0x00I (``r_ent``), §0x04J; roy2007effective (Def. 1); docs/protocols.md
    §3 (effective rank of ``U Vᵀ``).
    """
    if W.dim() < 2:
        raise ValueError(f"effective_rank: W has shape {tuple(W.shape)}; allowed: [..., d1, d2]")
    if convention not in ENTROPY_CONVENTIONS:
        raise ValueError(
            f"effective_rank: convention={convention!r}; allowed: "
            + ", ".join(repr(c) for c in ENTROPY_CONVENTIONS)
        )
    sigma = torch.linalg.svdvals(W)  # [..., min(d1, d2)]
    return entropy_effective_rank(sigma, convention=convention)


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
