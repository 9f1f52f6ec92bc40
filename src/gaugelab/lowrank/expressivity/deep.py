"""Deep-factorization ledgers of :mod:`gaugelab.lowrank.expressivity.ledgers` (seed 003
§0x0AQ–0x0AT):
the complement recurrence, the compression residual and bound, the Deep LoRA parameter count.
Private; re-exported there."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import torch

from gaugelab.linalg.operands import Operand, mode
from gaugelab.linalg.rational import Matrix, to_fraction


def _int(where: str, name: str, v: object, low: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{where}: {name}={v!r}; allowed: an integer >= {low}")
    return v


def _chain_product(mats: Sequence[Operand], shape: int, exact: bool, dtype) -> Operand:
    out = Matrix.identity(shape) if exact else torch.eye(shape, dtype=dtype)
    for W in mats:  # mats in application order W_1, W_2, …: out = W_k ⋯ W_1
        out = W @ out
    return out


def complement_recurrence(
    rhos: Sequence[object], eta: object, lam: object, steps: int
) -> list[tuple]:
    """The complement scalars of deep matrix factorization under GD:
    ``ρ_ℓ(t) = ρ_ℓ(t−1) (1 − η λ − η Π_{k≠ℓ} ρ_k(t−1)²)``.

    Args:
        rhos: ``ρ_ℓ(0)`` per layer (the init scales ``ε_ℓ``); eta: step size ``> 0``;
            lam: weight decay ``≥ 0``; steps: ``≥ 0``. Ints / Fractions stay exact.

    Returns:
        ``steps + 1`` tuples ``(ρ_1(t), …, ρ_L(t))``, ``t = 0 … steps``.

    Scope: Yaras et al.'s deep square factorization ``W_L⋯W_1`` with squared recovery loss,
    ``rank Φ ≤ r``, ``d − 2r > 0``, scaled-orthogonal init, GD with decay: the complement of
    width ``d − 2r`` (not ``r``) is one repeated scalar. Does not prove: that LoRA with AdamW,
    cross entropy or standard init follows the same invariant coordinates.

    Source: seed 003 §0x0AQ; yaras2024compressible.
    """
    _int("complement_recurrence", "steps", steps)
    exact = not any(isinstance(x, float) for x in (*rhos, eta, lam))
    conv = (lambda x: to_fraction(x, "complement_recurrence")) if exact else float
    state = tuple(conv(x) for x in rhos)
    e, lm = conv(eta), conv(lam)
    if not e > 0 or lm < 0 or not state:
        raise ValueError(
            f"complement_recurrence: eta={eta!r}, lam={lam!r}, {len(state)} layers; "
            "allowed: eta > 0, lam >= 0, >= 1 layer"
        )
    out = [state]
    for _ in range(steps):
        new = []
        for i, rho in enumerate(state):
            others = math.prod((x * x for k, x in enumerate(state) if k != i), start=conv(1))
            new.append(rho * (1 - e * lm - e * others))
        state = tuple(new)
        out.append(state)
    return out


def compression_residual(Ws: Sequence[Operand], r: int) -> Fraction | float:
    """``‖f − f_C‖_F²``: what compressing ``f = W_L⋯W_1`` to its active ``2r × 2r`` block drops.

    Args:
        Ws: ``[W_1, …, W_L]``, square ``[d, d]``, already in the theorem's block basis: each
            is block-diagonal with an active leading ``2r × 2r`` block and a complement
            ``ρ_ℓ I_{d−2r}``.
        r: the target rank, ``d − 2r > 0``.

    Raises:
        ValueError: ``d − 2r ≤ 0`` or a factor not of that block form.

    Scope: one exact block calculation. Does not prove: the source dynamics theorem.

    Source: seed 003 §0x0AR (``d = 4, r = 1``: ``1/18``); yaras2024compressible.
    """
    exact = mode("compression_residual", **{f"Ws[{i}]": W for i, W in enumerate(Ws)})
    d, a = next(iter(Ws[0].shape)), 2 * _int("compression_residual", "r", r, 1)
    if d - a <= 0:
        raise ValueError(f"compression_residual: d - 2r = {d - a}; allowed: d - 2r > 0")
    for i, W in enumerate(Ws):
        rho = W[a, a]
        for p in range(d):
            for q in range(d):
                inside = p < a and q < a
                expect = W[p, q] if inside else (rho if p == q else 0)
                if W[p, q] != expect:
                    raise ValueError(
                        f"compression_residual: Ws[{i}] is not block-diagonal [active {a}×{a}, ρ I]"
                    )
    f = _chain_product(Ws, d, exact, None if exact else Ws[0].dtype)
    total = Fraction(0) if exact else 0.0
    for p in range(d):
        for q in range(d):
            if not (p < a and q < a):
                total += f[p, q] * f[p, q] if exact else float(f[p, q]) ** 2
    return total


def compression_error_bound(m: int, eps: Sequence[object]) -> Fraction | float:
    """The source bound ``‖f(Θ(t)) − f_C‖_F² ≤ m Π_ℓ ε_ℓ²``, ``m = d − 2r``.

    Scope / does not prove: as :func:`complement_recurrence`; the BERT observation of §0x0AS
    is empirical evidence, not an instance of this bound.

    Source: seed 003 §0x0AR (``2 (1/2)² (1/3)² = 1/18``); yaras2024compressible.
    """
    _int("compression_error_bound", "m", m, 1)
    exact = not any(isinstance(x, float) for x in eps)
    conv = (lambda x: to_fraction(x, "compression_error_bound")) if exact else float
    return m * math.prod((conv(e) ** 2 for e in eps), start=conv(1))


@dataclass(frozen=True)
class DeepLoraParameters:
    """The Deep LoRA parameter ledger of one adapted matrix.

    Attributes:
        vanilla: ``r(d_out + d_in)``; outer: the same two outer factors ``L_out``, ``R_in``;
        inner: ``L r²`` (the ``C_ℓ``); total: ``outer + inner``; active_compressed:
        ``L (2r)² = 4 L r²`` of the compressed trajectory; dense_deep: ``L d²`` (``d = d_out``
        when square, else ``None``).
    """

    vanilla: int
    outer: int
    inner: int
    total: int
    active_compressed: int
    dense_deep: int | None


def deep_lora_parameters(d_out: int, d_in: int, r: int, depth: int = 3) -> DeepLoraParameters:
    """``P_Deep = r(d_out + d_in) + L r²`` for ``ΔW = L_out (C_L⋯C_1) R_inᵀ``.

    Scope: a parameter count. Does not prove: state equivalence — the deeper graph carries
    more activations, gradients and optimizer tensors than vanilla LoRA.

    Source: seed 003 §0x0AT (``d = 8, r = 2``: 32 vs 44), §0x0AR (``4Lr²`` vs ``Ld²``);
    yaras2024compressible.
    """
    d_out = _int("deep_lora_parameters", "d_out", d_out, 1)
    d_in = _int("deep_lora_parameters", "d_in", d_in, 1)
    r = _int("deep_lora_parameters", "r", r, 1)
    L = _int("deep_lora_parameters", "depth", depth, 1)
    outer = r * (d_out + d_in)
    return DeepLoraParameters(
        outer,
        outer,
        L * r * r,
        outer + L * r * r,
        4 * L * r * r,
        L * d_out * d_out if d_out == d_in else None,
    )
