"""Argument checks shared by the numerics layer and the gauge groups: shapes, dtypes, batching."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_matrix(X: object, func: str, arg: str, *, shape: str = "[..., m, n]") -> torch.Tensor:
    """Raise unless ``X`` is a real floating tensor with at least two dimensions (``shape``: the
    shape the message states)."""
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"{func}: {arg} must be a torch.Tensor, got {type(X).__name__}")
    if X.ndim < 2:
        raise ValueError(
            f"{func}: {arg} must have shape {shape} (at least 2 dimensions), "
            f"got shape {tuple(X.shape)}"
        )
    if not X.is_floating_point():
        raise ValueError(
            f"{func}: {arg} must have a real floating dtype (float16, bfloat16, float32, "
            f"float64), got {X.dtype}"
        )
    return X


def check_float_dtype(dtype: object, func: str) -> torch.dtype:
    """Raise unless ``dtype`` is a real floating torch dtype."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"{func}: dtype must be a real floating torch dtype (e.g. torch.float64), got {dtype!r}"
        )
    return dtype


def check_positive_int(value: object, func: str, arg: str) -> int:
    """Raise unless ``value`` is an int ``>= 1`` (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{func}: {arg} must be an integer >= 1, got {value!r}")
    return value


def normalise_batch(batch: object, func: str) -> tuple[int, ...]:
    """Turn ``batch`` (an int or a sequence of ints >= 0) into a shape tuple."""
    items: Sequence[object] = (batch,) if isinstance(batch, int) else batch  # type: ignore[assignment]
    try:
        shape = tuple(items)
    except TypeError:
        raise ValueError(
            f"{func}: batch must be an int or a sequence of ints >= 0, got {batch!r}"
        ) from None
    for size in shape:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(
                f"{func}: batch must be an int or a sequence of ints >= 0, got {batch!r}"
            )
    return shape  # type: ignore[return-value]


def default_generator(generator: object, func: str) -> torch.Generator:
    """``generator`` itself, or a fresh CPU generator seeded 0 when it is ``None``."""
    if generator is None:
        return torch.Generator().manual_seed(0)
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{func}: generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    return generator


def all_finite(X: torch.Tensor) -> bool:
    """Whether every entry of a floating tensor is finite (no NaN, no ±inf).

    The sum is checked first: it is finite only when every entry is, and one reduction costs a
    few percent of ``torch.isfinite(X).all()`` on the CPU (which builds a boolean tensor).
    Finite entries whose sum overflows fall back to the entrywise check, so the answer is
    exactly ``bool(torch.isfinite(X).all())``.

    Args:
        X: a real floating tensor of any shape (empty: ``True``).
    """
    return bool(torch.isfinite(X.sum())) or bool(torch.isfinite(X).all())
