"""The Gram-determined structure of memoryless right-equivariant update maps."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gaugelab.linalg import psd_power


def gram_representative(
    phi: Callable[[torch.Tensor], torch.Tensor], G: torch.Tensor, *, canonical: bool = False
) -> torch.Tensor:
    """The matrix ``H`` with ``Φ(G) = H(G Gᵀ) G`` for a right-equivariant map ``Φ``.

    On full-column-rank ``G`` (``k ≤ n``), a map with ``Φ(GQ) = Φ(G) Q`` for all orthogonal
    ``Q`` is Gram-determined: ``X(G) = Φ(G) G⁺`` depends on ``G`` only through ``G Gᵀ``.
    In the square invertible case the canonical representative is
    ``H(P) = Φ(P^{1/2}) P^{−1/2}`` with ``P = G Gᵀ``, and it equals ``Φ(G) G⁻¹``.

    Args:
        phi: the update map, ``[n, k] → [n, k]``.
        G: ``[n, k]`` full-column-rank matrix (square invertible when ``canonical``).
        canonical: use the square-case formula ``Φ(P^{1/2}) P^{−1/2}``.

    Returns:
        ``[n, n]`` tensor in ``G``'s dtype.

    Raises:
        ValueError: ``G`` not a matrix, ``k > n``, not full column rank, or not square when
            ``canonical``.

    Source: singh2026lossbasis, Thm. 4.5 (structure theorem) and its square corollary.
    """
    if G.dim() != 2:
        raise ValueError(f"gram_representative: G has shape {tuple(G.shape)}; allowed: [n, k]")
    n, k = G.shape
    if k > n:
        raise ValueError(f"gram_representative: G is {n}×{k}; the theorem needs k ≤ n")
    s = torch.linalg.svdvals(G)
    if s[-1] <= s[0] * max(n, k) * torch.finfo(G.dtype).eps:
        raise ValueError("gram_representative: G is not full column rank")
    if not canonical:
        return phi(G) @ torch.linalg.pinv(G)
    if n != k:
        raise ValueError(f"gram_representative: canonical=True needs square G; got {n}×{k}")
    P = G @ G.mT
    root = psd_power(P, 0.5, clamp=torch.finfo(G.dtype).tiny)
    inv_root = psd_power(P, -0.5, clamp=torch.finfo(G.dtype).tiny)
    return phi(root) @ inv_root
