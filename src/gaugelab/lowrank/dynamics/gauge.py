"""The scalar factor gauge, Adam's first step, factor decay, rank scaling and dtype range.

Private; the public names are re-exported by :mod:`gaugelab.lowrank.dynamics.motion` (seed 003
§0x08B–0x08I). Operands are exact :class:`~gaugelab.linalg.rational.Matrix` or floating
tensors, as there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from gaugelab.linalg.operands import Operand, chain, fro_sq, mode, scalar
from gaugelab.linalg.rational import Matrix


def scalar_gauge(B: Operand, A: Operand, c: object) -> tuple[Operand, Operand]:
    """The scalar factor gauge ``(B, A) ↦ (c B, A/c)``; the product ``B A`` is unchanged.

    Gauge-equivalent factors need not follow gauge-equivalent paths: with unchanged rates the
    product velocity becomes ``−s²(η_B/c² G AᵀA + c² η_A B Bᵀ G)``.

    Args:
        B: ``[..., d_out, r]``; A: ``[..., r, d_in]``; c: a nonzero real.

    Returns:
        ``(c B, A / c)``.

    Raises:
        ValueError: ``c = 0`` or not finite; TypeError/ValueError: bad factors.

    Source: seed 003 §0x08B (the ``c = 2`` fixture).
    """
    exact = mode("scalar_gauge", B=B, A=A)
    chain("scalar_gauge", B, A)
    k = scalar(c, exact, "scalar_gauge", "c", nonzero=True)
    return B * k, A * (1 / k)


def compensated_rates(
    eta_B: object, eta_A: object, c: object
) -> tuple[Fraction | float, Fraction | float]:
    """The per-factor rates ``(c² η_B, η_A / c²)`` that undo the scalar gauge ``(c B, A/c)``
    for plain SGD.

    Exact for plain (simultaneous) SGD at every step: ``∇_{cB} = ∇_B / c``,
    ``∇_{A/c} = c ∇_A``, so the gauged step lands on ``(c B⁺, A⁺/c)`` (the cross term too:
    ``η_A' η_B' = η_A η_B``) and, since ``G`` depends only on the product, the argument
    repeats. Not an equivalence for anything acting on factor coordinates: clipping, factor
    decay, adaptive moments (:func:`adam_first_step`), finite-precision range.

    Args:
        eta_B, eta_A: rates ``> 0`` (ints/Fractions give exact Fractions, floats give floats).
        c: the gauge scalar, nonzero.

    Returns:
        ``(eta_B', eta_A')``.

    Raises:
        ValueError: a rate ``≤ 0``, ``c = 0``, non-finite values.

    Source: seed 003 §0x08C (``c = 2``: ``2/5`` and ``1/20``).
    """
    exact = not any(isinstance(x, float) for x in (eta_B, eta_A, c))
    eb = scalar(eta_B, exact, "compensated_rates", "eta_B", positive=True)
    ea = scalar(eta_A, exact, "compensated_rates", "eta_A", positive=True)
    k = scalar(c, exact, "compensated_rates", "c", nonzero=True)
    return eb * k * k, ea / (k * k)


def adam_direction(g: Operand, eps: Fraction | float) -> Operand:
    """Zero-state bias-corrected Adam's first direction ``u(g) = g ⊘ (|g| + ε)``."""
    if isinstance(g, Matrix):
        return g.map(lambda x: x / (abs(x) + eps))
    return g / (g.abs() + eps)


@dataclass(frozen=True)
class AdamStep:
    """One first bias-corrected Adam step from zero moments (no weight decay).

    Attributes:
        B, A: the new factors; product: ``s B⁺A⁺``; direction_B, direction_A: ``u(∇)``.
    """

    B: Operand
    A: Operand
    product: Operand
    direction_B: Operand
    direction_A: Operand


def adam_first_step(
    B: Operand,
    A: Operand,
    G: Operand,
    scale: object = 1,
    eta_B: object = 1,
    eta_A: object = 1,
    eps: object = 1e-8,
) -> AdamStep:
    """The first Adam step of both factors from zero moments: ``m̂ = g``, ``v̂ = g²``, so each
    coordinate moves by ``η g/(|g| + ε)``.

    The additive ``ε`` makes ``u`` non-homogeneous, so the scalar gauge's ``1/c`` and ``c``
    gradient scales do not cancel: compensated rates (:func:`compensated_rates`) give a
    different product after one step (the ε = 1/10 counterexample). This one step does not
    characterise long-run AdamW behaviour.

    Args:
        B, A, G, scale, eta_B, eta_A: as :func:`gaugelab.lowrank.dynamics.motion.product_velocity`.
        eps: Adam's ``ε ≥ 0``.

    Returns:
        :class:`AdamStep`.

    Raises:
        ValueError: ``eps < 0``; as :func:`gaugelab.lowrank.dynamics.motion.factor_gradients`.

    Source: seed 003 §0x08D (``Δ⁺_base = [[380/231, −5/21], [0, 17/11]]``); kingma2015adam.
    """
    exact = mode("adam_first_step", B=B, A=A, G=G)
    chain("adam_first_step", B, A, G)
    e = scalar(eps, exact, "adam_first_step", "eps")
    if e < 0:
        raise ValueError(f"adam_first_step: eps={eps!r}; allowed: eps >= 0")
    s = scalar(scale, exact, "adam_first_step", "scale")
    eb = scalar(eta_B, exact, "adam_first_step", "eta_B", positive=True)
    ea = scalar(eta_A, exact, "adam_first_step", "eta_A", positive=True)
    grad_B, grad_A = (G @ A.mT) * s, (B.mT @ G) * s  # seed 003 §0x07A
    uB, uA = adam_direction(grad_B, e), adam_direction(grad_A, e)
    B_next, A_next = B - uB * eb, A - uA * ea
    return AdamStep(B_next, A_next, (B_next @ A_next) * s, uB, uA)


def factor_penalty(B: Operand, A: Operand) -> Fraction | torch.Tensor:
    """The factor penalty ``‖A‖_F² + ‖B‖_F²`` (L2 / weight decay on the factors).

    It is gauge-dependent: ``R(A/c, c B) = c⁻²‖A‖² + c²‖B‖²`` while ``B A`` is unchanged, so
    factor decay chooses a gauge; it is not ``‖B A‖_F²`` (:func:`product_penalty`).

    Args:
        B: ``[..., d_out, r]``; A: ``[..., r, d_in]``.

    Returns:
        A Fraction (exact operands) or a tensor ``[...]``.

    Source: seed 003 §0x08E (base 10, ``c = 2``: 85/4).
    """
    mode("factor_penalty", B=B, A=A)
    chain("factor_penalty", B, A)
    return fro_sq(A) + fro_sq(B)


def product_penalty(B: Operand, A: Operand, scale: object = 1) -> Fraction | torch.Tensor:
    """The product penalty ``‖s B A‖_F²``, invariant under every gauge.

    Source: seed 003 §0x08E (the contrast with :func:`factor_penalty`).
    """
    exact = mode("product_penalty", B=B, A=A)
    chain("product_penalty", B, A)
    s = scalar(scale, exact, "product_penalty", "scale")
    return fro_sq((B @ A) * s)


def balancing_gauge(B: Operand, A: Operand) -> tuple[Fraction | torch.Tensor, float | torch.Tensor]:
    """The scalar gauge that minimises the factor penalty over ``c``: ``c⁴ = ‖A‖_F²/‖B‖_F²``.

    Args:
        B: ``[..., d_out, r]``; A: ``[..., r, d_in]``, both nonzero.

    Returns:
        ``(c⁴, c)``: ``c⁴`` exact for exact operands (``c`` itself is in general irrational,
        a float); tensors ``[...]`` otherwise. At ``c`` the penalty is ``2‖A‖_F‖B‖_F``.

    Raises:
        ValueError: a zero factor (no balancing gauge exists).

    Source: seed 003 §0x08E.
    """
    mode("balancing_gauge", B=B, A=A)
    chain("balancing_gauge", B, A)
    nb, na = fro_sq(B), fro_sq(A)
    if isinstance(nb, Fraction):
        if nb == 0 or na == 0:
            raise ValueError("balancing_gauge: a factor is zero; allowed: nonzero B and A")
        c4 = na / nb
        return c4, float(c4) ** 0.25
    if bool((nb == 0).any()) or bool((na == 0).any()):
        raise ValueError("balancing_gauge: a factor is zero; allowed: nonzero B and A")
    c4 = na / nb
    return c4, c4.pow(0.25)


@dataclass(frozen=True)
class Representability:
    """Whether a gauged factor pair ``(c B, A/c)`` is storable in a dtype.

    Attributes:
        dtype: the dtype's name; largest_finite, smallest_subnormal: its range (exact).
        overflow: factor name → some entry has ``|x| >`` largest finite.
        underflow: factor name → some nonzero entry has ``|x| <`` smallest positive subnormal.
        cast_nonfinite, cast_flushed: factor name → after rounding to the dtype some entry is
            inf, or some nonzero entry became 0 (what the cast actually does).
        representable: no overflow and no underflow in either factor.
    """

    dtype: str
    largest_finite: Fraction
    smallest_subnormal: Fraction
    overflow: dict[str, bool]
    underflow: dict[str, bool]
    cast_nonfinite: dict[str, bool]
    cast_flushed: dict[str, bool]
    representable: bool


def _entries(x: Operand) -> list[Fraction]:
    if isinstance(x, Matrix):
        return list(x.flatten())
    return [Fraction(v) for v in x.detach().to(torch.float64).reshape(-1).tolist()]


def _cast(v: Fraction, dtype: torch.dtype) -> float:
    try:
        f = float(v)
    except OverflowError:
        return math.inf
    return torch.tensor(f, dtype=torch.float64).to(dtype).item()


def gauge_is_representable(
    B: Operand, A: Operand, c: object, dtype: torch.dtype
) -> Representability:
    """Whether ``(c B, A/c)`` can be stored in ``dtype`` — exact arithmetic keeps the product,
    but the factor representation must fit the dtype's range.

    The gauged entries are formed exactly (Fractions; tensors at their exact binary values),
    then compared with the dtype's largest finite value and smallest positive subnormal
    (``finfo.smallest_normal · finfo.eps``), and also cast (via float64) to report what
    rounding does. A coordinate witness; it says nothing about whether a run stores master
    factors or optimizer state in that dtype.

    Args:
        B: ``[d_out, r]``; A: ``[r, d_in]`` (exact or tensors); c: a nonzero real (an int or
            Fraction keeps it exact, e.g. ``Fraction(1, 2**25)``); dtype: a floating dtype.

    Returns:
        :class:`Representability` (factor names ``"B"``, ``"A"``).

    Raises:
        ValueError: ``c = 0``; a non-floating dtype.

    Source: seed 003 §0x08I (binary16: 65504, ``2⁻²⁴``; ``c = 2¹⁶`` and ``c = 2⁻²⁵``).
    """
    mode("gauge_is_representable", B=B, A=A)
    chain("gauge_is_representable", B, A)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"gauge_is_representable: dtype={dtype!r}; allowed: a floating torch.dtype"
        )
    k = scalar(c, True, "gauge_is_representable", "c", nonzero=True)
    info = torch.finfo(dtype)
    top, tiny = Fraction(info.max), Fraction(info.smallest_normal) * Fraction(info.eps)
    factors = {"B": [v * k for v in _entries(B)], "A": [v / k for v in _entries(A)]}
    over = {n: any(abs(v) > top for v in vs) for n, vs in factors.items()}
    under = {n: any(0 < abs(v) < tiny for v in vs) for n, vs in factors.items()}
    casts = {n: [(_cast(v, dtype), v) for v in vs] for n, vs in factors.items()}
    nonfinite = {n: any(math.isinf(f) for f, _ in cs) for n, cs in casts.items()}
    flushed = {n: any(f == 0 and v != 0 for f, v in cs) for n, cs in casts.items()}
    ok = not any(over.values()) and not any(under.values())
    return Representability(
        str(dtype).removeprefix("torch."), top, tiny, over, under, nonfinite, flushed, ok
    )
