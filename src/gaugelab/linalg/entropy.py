"""Entropy effective rank of a singular spectrum, in its two named conventions.

The one implementation behind :func:`gaugelab.tasks.effective_rank` and
:mod:`gaugelab.lowrank.spectra.ranks`' ``effective_rank_energy`` /
``effective_rank_roy_vetterli``: the conventions differ only in what is normalised, and seed
003 §0x04J forbids them sharing a label, so every caller names one.
"""

from __future__ import annotations

import torch

ENTROPY_CONVENTIONS: tuple[str, ...] = ("energy", "roy_vetterli")
"""``energy``: ``p_i = σ_i² / Σ_j σ_j²`` (seed 003's ``r_ent``, §0x00I); ``roy_vetterli``:
``p_i = σ_i / Σ_j σ_j`` (roy2007effective)."""


def entropy_effective_rank(sigma: torch.Tensor, *, convention: str) -> torch.Tensor:
    """``exp(−Σ_i p_i ln p_i)`` of a normalised singular spectrum.

    ``(4, 3, 2, 1)`` gives ≈ 2.9402 under ``"energy"`` and ≈ 3.5961 under ``"roy_vetterli"``.
    Terms with ``p_i = 0`` contribute 0 (``0 ln 0 = 0``); a spectrum with no mass (the zero
    matrix, or no singular values) gives 0, not a division by zero.

    Args:
        sigma: ``[..., q]`` nonnegative singular values, floating; leading dims are a batch.
        convention: ``"energy"`` (``p_i = σ_i² / Σ_j σ_j²``) or ``"roy_vetterli"``
            (``p_i = σ_i / Σ_j σ_j``); see :data:`ENTROPY_CONVENTIONS`.

    Returns:
        ``[...]`` in ``sigma``'s dtype: in ``[1, #{σ_i > 0}]``, or 0 for no mass.

    Raises:
        ValueError: ``convention`` is not one of :data:`ENTROPY_CONVENTIONS`.

    Source:
        seed 003 §0x00I (``r_ent``), §0x04J (both conventions, zero matrix → 0);
        roy2007effective.
    """
    if convention == "energy":
        weights = sigma**2
    elif convention == "roy_vetterli":
        weights = sigma
    else:
        raise ValueError(
            f"entropy_effective_rank: convention={convention!r}; allowed: "
            + ", ".join(repr(c) for c in ENTROPY_CONVENTIONS)
        )
    total = weights.sum(-1, keepdim=True)  # [..., 1]
    p = weights / torch.where(total > 0, total, 1.0)
    entropy = -torch.special.xlogy(p, p).sum(-1)  # [...]
    return torch.where(total[..., 0] > 0, torch.exp(entropy), 0.0)
