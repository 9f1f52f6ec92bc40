"""Shared helpers of the factor-dynamics and geometry modules: exact-or-float operand checks."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import torch

from gaugelab.linalg.rational import Matrix, is_exact, to_fraction

Operand = Matrix | torch.Tensor


def check_matrix(x: object, where: str, name: str, ndim_min: int = 2) -> None:
    """``x`` must be a :class:`Matrix` or a floating tensor with at least two dims, finite."""
    if isinstance(x, Matrix):
        return
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{where}: {name} is {type(x).__name__}; allowed: a gaugelab Matrix (exact) or a "
            "floating torch.Tensor"
        )
    if x.dim() < ndim_min or not x.is_floating_point():
        raise ValueError(
            f"{where}: {name} has shape {tuple(x.shape)} and dtype {x.dtype}; allowed: a "
            f"floating tensor with >= {ndim_min} dims"
        )
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{where}: {name} has NaN or inf entries; allowed: finite values")


def scalar(
    x: object, exact: bool, where: str, name: str, *, positive: bool = False, nonzero: bool = False
) -> Fraction | float:
    """A real scalar as a Fraction (exact mode) or a float; checks finiteness and sign."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{where}: {name}={x!r}; allowed: a real number (int, Fraction, float)")
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{where}: {name}={x!r}; allowed: a finite real number")
    if positive and not x > 0:
        raise ValueError(f"{where}: {name}={x!r}; allowed: a real number > 0")
    if nonzero and x == 0:
        raise ValueError(f"{where}: {name}={x!r}; allowed: a nonzero real number")
    return to_fraction(x, where) if exact else float(x)


def mode(where: str, **operands: object) -> bool:
    """Check operands and return ``True`` for exact (all Matrix), ``False`` for tensors."""
    for name, x in operands.items():
        check_matrix(x, where, name)
    try:
        return is_exact(*operands.values())
    except TypeError as err:
        raise TypeError(f"{where}: {err}") from None


def chain(where: str, B: Operand, A: Operand, G: Operand | None = None) -> None:
    """Shapes of ``B [d_out, r]``, ``A [r, d_in]`` and ``G [d_out, d_in]`` must fit."""
    bs, as_ = tuple(B.shape), tuple(A.shape)
    if bs[-1] != as_[-2]:
        raise ValueError(
            f"{where}: B {bs} and A {as_} do not chain; allowed: B [d_out, r], A [r, d_in]"
        )
    if G is not None and tuple(G.shape)[-2:] != (bs[-2], as_[-1]):
        raise ValueError(
            f"{where}: G has shape {tuple(G.shape)}; allowed: [d_out, d_in] = "
            f"[{bs[-2]}, {as_[-1]}] (the shape of B A)"
        )


def fro_sq(x: Operand) -> Fraction | torch.Tensor:
    """``‖x‖_F²`` (exact for a Matrix; a tensor over the last two dims otherwise)."""
    if isinstance(x, Matrix):
        return x.frobenius_sq()
    return x.pow(2).sum(dim=(-2, -1))


def is_zero(x: Operand) -> bool:
    """Every entry is exactly zero."""
    return x.is_zero() if isinstance(x, Matrix) else not bool(x.ne(0).any())
