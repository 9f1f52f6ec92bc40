"""The fast Walsh–Hadamard transform in torch: batched, autograd-correct, ``O(n log n)``.

``fwht(x)`` multiplies the last dimension of ``x`` by the Sylvester–Hadamard matrix ``H_n``
(``H_1 = [1]``, ``H_{2k} = [[H_k, H_k], [H_k, -H_k]]``), unnormalized: ``H_n H_n = n I``. The
transform factors as a Kronecker product ``H_n = H_{n_1} ⊗ … ⊗ H_{n_m}`` of small Hadamard
matrices (``n_i ≤ 32``), each applied as one matrix product on the last axis of
``x.view(…, n_1, …, n_m)`` followed by a rotation of the axes: ``n · Σ n_i`` multiply-adds,
``O(n log n)`` for the fixed radix, with two temporaries of ``x``'s size per factor. ``H_n`` is
symmetric, so the backward of ``y = H x`` is ``H g`` — the same transform, applied once (and,
for the normalized ``H/√n``, scaled once).

Source: seed 003 §0x02D (the Hadamard factors of the Fastfood block).
"""

from __future__ import annotations

import functools
import math

import torch

__all__ = ["fwht", "hadamard_matrix", "reference_fwht"]

_RADIX_BITS = 5  # factors of at most 2^5 = 32


@functools.lru_cache(maxsize=64)
def _small_hadamard(n: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """``[n, n]`` Sylvester–Hadamard matrix (entries ±1), cached per dtype and device."""
    h = torch.ones(1, 1, dtype=dtype, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def hadamard_matrix(n: int, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The ``[n, n]`` Sylvester–Hadamard matrix (entries ±1, unnormalized).

    Raises:
        ValueError: ``n`` is not a power of two ``>= 1``.
    """
    _check_length(n, "hadamard_matrix")
    return _small_hadamard(n, dtype, "cpu").clone()


def _check_length(n: int, where: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n & (n - 1):
        raise ValueError(f"{where}: length {n!r}; allowed: a power of two >= 1")
    return n.bit_length() - 1


def _factors(bits: int) -> list[int]:
    """Split ``2^bits`` into factors of at most ``2^_RADIX_BITS``, as even as possible."""
    if bits == 0:
        return []
    count = math.ceil(bits / _RADIX_BITS)
    base, extra = divmod(bits, count)
    return [2 ** (base + (i < extra)) for i in range(count)]


def _apply(x: torch.Tensor) -> torch.Tensor:
    """``x @ H_n`` along the last dimension (no autograd bookkeeping of its own).

    ``x`` is viewed as ``[R, n_1, …, n_m]``; each pass multiplies the last axis by ``H_{n_m}``
    as one ``[R·n/n_m, n_m] @ [n_m, n_m]`` product and rotates that axis to the front, so after
    ``m`` passes every factor has acted once and the axes are back in order.
    """
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    y = x.reshape(rows, n)
    for f in reversed(_factors(n.bit_length() - 1)):
        h = _small_hadamard(f, x.dtype, str(x.device))
        y = (y.reshape(-1, f) @ h).reshape(rows, n // f, f).transpose(1, 2).contiguous()
    return y.reshape(x.shape)


class _FWHT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[override]
        ctx.scale = scale
        y = _apply(x)
        return y if scale == 1.0 else y.mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        # H is symmetric: the vector–Jacobian product of y = s·H x is s·H g (the scale once)
        return _FWHT.apply(grad, ctx.scale), None


def fwht(x: torch.Tensor, *, normalized: bool = False) -> torch.Tensor:
    """Fast Walsh–Hadamard transform along the last dimension.

    Args:
        x: ``[..., n]`` real tensor, ``n`` a power of two; leading dimensions are a batch.
        normalized: multiply by ``1/√n`` (then the transform is orthogonal and an involution);
            default the unnormalized ``H_n`` (``H_n H_n = n I``).

    Returns:
        ``[..., n]`` tensor in ``x``'s dtype: ``x @ H_n`` (times ``1/√n`` when normalized).
        Differentiable: its backward is the same transform (``H_n`` is symmetric).

    Raises:
        ValueError: ``x`` has no dimension, or its last is not a power of two; ``x`` is not
            floating point.

    Source: seed 003 §0x02D (the Hadamard factor ``H_p`` of the Fastfood block).
    """
    if x.dim() == 0:
        raise ValueError("fwht: x is a scalar; allowed: a tensor [..., n], n a power of two")
    if not x.is_floating_point():
        raise ValueError(f"fwht: x has dtype {x.dtype}; allowed: a floating-point dtype")
    bits = _check_length(int(x.shape[-1]), "fwht")
    scale = 2.0 ** (-bits / 2) if normalized else 1.0
    return _FWHT.apply(x, scale)


def reference_fwht(x: torch.Tensor) -> torch.Tensor:
    """The textbook radix-2 butterfly (``log2 n`` passes of ``(a + b, a − b)``), unnormalized:
    a second, independent implementation that the tests hold :func:`fwht` against.

    Raises:
        ValueError: the last dimension is not a power of two.
    """
    n = int(x.shape[-1])
    _check_length(n, "reference_fwht")
    y, h = x, 1
    while h < n:
        y = y.reshape(*x.shape[:-1], n // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2)
        h *= 2
    return y.reshape(x.shape)
