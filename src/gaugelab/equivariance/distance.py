"""The relative distance every twin comparison uses (``gaugelab check`` and the twin protocol)."""

from __future__ import annotations

import torch

FLOOR = 1e-12  # added to the mean norm, so two all-zero tensors are at distance 0, not NaN


def relative_distance(
    a: torch.Tensor, b: torch.Tensor, dims: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """Symmetric relative Frobenius distance ``‖a − b‖_F / (½(‖a‖_F + ‖b‖_F) + 1e-12)``.

    The denominator is the mean of the two norms, so the distance is symmetric in ``a`` and
    ``b`` and at most 2; the ``1e-12`` floor keeps it finite (0) when both are zero, and is
    negligible next to any represented object the twins compare (norms of order 1). For a twin
    within ``δ`` of its base it equals ``‖a − b‖_F / ‖b‖_F`` up to a factor ``1 ± δ/2``.

    Args:
        a, b: real tensors of one shape (or broadcastable shapes) and one dtype.
        dims: the dimensions the norms run over: all of them (``None``, a scalar result), or
            e.g. ``(-2, -1)`` for one distance per matrix of a ``[L, H, d, d]`` stack.

    Returns:
        A tensor in ``a``'s dtype with ``dims`` reduced (0-dimensional for ``dims=None``);
        unitless (relative Frobenius distance), in ``[0, 2]``.

    Source: singh2026lossbasis, §6 (twin distances); docs/protocols.md §5 (logit distance and
    QK drift).
    """
    norm = torch.linalg.vector_norm
    return norm(a - b, dim=dims) / (0.5 * (norm(a, dim=dims) + norm(b, dim=dims)) + FLOOR)


__all__ = ["relative_distance"]
