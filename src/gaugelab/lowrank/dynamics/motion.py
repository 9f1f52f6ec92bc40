"""Factor dynamics of one LoRA update ``Δ = s·B A``: gradients, product motion, the scalar gauge.

The seed's Loop 7 (seed 003 §0x07–0x08): once two factors represent one update, what motion
does the optimizer induce in the represented matrix? Every function here is a local algebra
oracle under a frozen dense gradient ``G = ∂L/∂W_eff`` (or a callable ``G(Δ)`` where a step
needs the gradient at a new product); none is a training loop. Each accepts exact
:class:`~gaugelab.linalg.rational.Matrix` operands (``fractions.Fraction`` entries, exact
arithmetic — how the seed's fixtures are tested) or floating tensors ``[..., d_out, r]``,
``[..., r, d_in]``, ``[..., d_out, d_in]`` with leading batch dims, never both at once.

Orientation (PEFT's and the seed's): ``A ∈ ℝ^{r×d_in}`` (down), ``B ∈ ℝ^{d_out×r}`` (up),
``Δ = s·B A``. The scalar-gauge, Adam, decay and dtype ledgers live in ``dynamics.gauge``, the
rank-scaling ledger in ``dynamics.rank_scaling``; both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gaugelab.linalg.operands import Operand, chain, is_zero, mode, scalar
from gaugelab.linalg.rational import Matrix
from gaugelab.lowrank.dynamics.gauge import (
    AdamStep,
    Representability,
    adam_first_step,
    balancing_gauge,
    compensated_rates,
    factor_penalty,
    gauge_is_representable,
    product_penalty,
    scalar_gauge,
)
from gaugelab.lowrank.dynamics.rank_scaling import (
    RankLedgerRow,
    initial_velocity_coefficient,
    rank_ledger,
    rank_scaling_exponent,
    rank_stable_scale_exponent,
)

__all__ = [
    "MECHANISMS",
    "AdamStep",
    "Matrix",
    "RankLedgerRow",
    "Representability",
    "SgdStep",
    "ZeroProductStart",
    "adam_first_step",
    "balancing_gauge",
    "classify_zero_product",
    "compensated_rates",
    "factor_gradients",
    "factor_penalty",
    "finite_step_cross_term",
    "gauge_is_representable",
    "initial_velocity_coefficient",
    "latent_balance",
    "product_penalty",
    "product_velocity",
    "product_velocity_terms",
    "rank_ledger",
    "rank_scaling_exponent",
    "rank_stable_scale_exponent",
    "scalar_gauge",
    "sgd_step",
]

Gradient = Operand | Callable[[Operand], Operand]


def factor_gradients(
    B: Operand, A: Operand, G: Operand, scale: object = 1
) -> tuple[Operand, Operand]:
    """The factor gradients of ``L(W + s·B A)`` from the dense gradient ``G``.

    ``∇_B L = s G Aᵀ`` and ``∇_A L = s Bᵀ G``: each factor's gradient is read through the other
    factor's current scale and orientation.

    Args:
        B: ``[..., d_out, r]`` up factor; A: ``[..., r, d_in]`` down factor.
        G: ``[..., d_out, d_in]`` gradient with respect to the effective weight.
        scale: the adapter scale ``s`` (a real number).

    Returns:
        ``(grad_B [..., d_out, r], grad_A [..., r, d_in])`` in the operands' mode (exact
        Fractions, or the tensors' dtype).

    Raises:
        TypeError: a non-matrix operand, or exact and tensor operands mixed.
        ValueError: shapes that do not chain, non-finite entries, a non-finite scale.

    Source: seed 003 §0x07A (one differential ``dΔ = s(dB A + B dA)``), §0x07H.
    """
    exact = mode("factor_gradients", B=B, A=A, G=G)
    chain("factor_gradients", B, A, G)
    s = scalar(scale, exact, "factor_gradients", "scale")
    return (G @ A.mT) * s, (B.mT @ G) * s


def product_velocity_terms(
    B: Operand, A: Operand, G: Operand, scale: object = 1, eta_B: object = 1, eta_A: object = 1
) -> tuple[Operand, Operand]:
    """The two product-space contributions of plain gradient flow, ``(−η_B s² G AᵀA,
    −η_A s² B Bᵀ G)``: right preconditioning by the row geometry of ``A`` and left
    preconditioning by the column geometry of ``B``.

    Args:
        B, A, G, scale: as :func:`factor_gradients`.
        eta_B, eta_A: the factor-specific learning rates (real, > 0).

    Returns:
        ``(right [..., d_out, d_in], left [..., d_out, d_in])``.

    Raises:
        As :func:`factor_gradients`; ``ValueError`` for a rate ``≤ 0``.

    Source: seed 003 §0x07B (the table of the two operators), §0x07C (the exact trace).
    """
    exact = mode("product_velocity", B=B, A=A, G=G)
    chain("product_velocity", B, A, G)
    s = scalar(scale, exact, "product_velocity", "scale")
    eb = scalar(eta_B, exact, "product_velocity", "eta_B", positive=True)
    ea = scalar(eta_A, exact, "product_velocity", "eta_A", positive=True)
    return (G @ A.mT @ A) * (-eb * s * s), (B @ B.mT @ G) * (-ea * s * s)


def product_velocity(
    B: Operand, A: Operand, G: Operand, scale: object = 1, eta_B: object = 1, eta_A: object = 1
) -> Operand:
    """The product velocity ``Δ̇ = −s²(η_B G AᵀA + η_A B Bᵀ G)`` under continuous plain
    gradient flow ``Ḃ = −η_B ∇_B L``, ``Ȧ = −η_A ∇_A L``. It is not dense gradient descent
    ``−η G`` on ``Δ``: the factorization inserts two state-dependent preconditioners.

    Args / Raises: as :func:`product_velocity_terms`.

    Returns:
        ``Δ̇ [..., d_out, d_in]``.

    Source: seed 003 §0x07B (boxed), §0x07C (``[[−3/5, −3/10], [0, −9/10]]``).
    """
    right, left = product_velocity_terms(B, A, G, scale, eta_B, eta_A)
    return right + left


def finite_step_cross_term(
    B: Operand, A: Operand, G: Operand, scale: object = 1, eta_B: object = 1, eta_A: object = 1
) -> Operand:
    """The multiplicative term ``η_A η_B s³ G Aᵀ Bᵀ G`` that one simultaneous finite SGD step
    adds to the Euler step of the flow: ``Δ⁺ − Δ = Δ̇ + η_A η_B s³ G Aᵀ Bᵀ G``.

    Args / Raises: as :func:`product_velocity_terms`; the product is
    ``(G Aᵀ)(Bᵀ G)``, ``[d_out, r] @ [r, d_in]``, for any shapes.

    Returns:
        ``[..., d_out, d_in]``.

    Source: seed 003 §0x07D (``[[1/25, 2/25], [0, 1/25]]`` in the exact trace).
    """
    exact = mode("finite_step_cross_term", B=B, A=A, G=G)
    chain("finite_step_cross_term", B, A, G)
    s = scalar(scale, exact, "finite_step_cross_term", "scale")
    eb = scalar(eta_B, exact, "finite_step_cross_term", "eta_B", positive=True)
    ea = scalar(eta_A, exact, "finite_step_cross_term", "eta_A", positive=True)
    return (G @ A.mT @ B.mT @ G) * (ea * eb * s * s * s)


@dataclass(frozen=True)
class SgdStep:
    """One plain-SGD step of the factors and its product step.

    Attributes:
        B, A: the new factors ``B⁺ [d_out, r]``, ``A⁺ [r, d_in]``.
        grad_B, grad_A: the gradients the step used (``grad_A`` read at ``B⁺`` when sequential).
        product_step: ``s(B⁺A⁺ − B A)``.
        order: ``"simultaneous"`` or ``"sequential"``.
    """

    B: Operand
    A: Operand
    grad_B: Operand
    grad_A: Operand
    product_step: Operand
    order: str


def _gradient_at(G: Gradient, delta: Operand, where: str) -> Operand:
    g = G(delta) if callable(G) else G
    mode(where, G=g)
    return g


def sgd_step(
    B: Operand,
    A: Operand,
    G: Gradient,
    scale: object = 1,
    eta_B: object = 1,
    eta_A: object = 1,
    *,
    order: Literal["simultaneous", "sequential"] = "simultaneous",
) -> SgdStep:
    """One plain-SGD step of both factors.

    ``simultaneous`` reads both gradients at the same old state (``B⁺ = B − η_B s G Aᵀ``,
    ``A⁺ = A − η_A s Bᵀ G``); ``sequential`` updates ``B`` first, then reads ``∇_A`` at
    ``(B⁺, A)`` — a different algorithm with a different finite-step map.

    Args:
        B, A, scale, eta_B, eta_A: as :func:`product_velocity_terms`.
        G: the dense gradient ``[d_out, d_in]``, frozen; or a callable ``Δ ↦ G(Δ)`` giving the
            gradient at the effective update ``Δ = s·B A`` (a loss of the product only), so
            ``sequential`` re-reads it at ``s·B⁺A``.
        order: ``"simultaneous"`` (the seed's fixture) or ``"sequential"``.

    Returns:
        :class:`SgdStep`.

    Raises:
        ValueError: an unknown ``order``; as :func:`factor_gradients`.

    Source: seed 003 §0x07D, §0x07H ("both gradients read the same old factor state").
    """
    if order not in ("simultaneous", "sequential"):
        raise ValueError(f"sgd_step: order={order!r}; allowed: 'simultaneous', 'sequential'")
    exact = mode("sgd_step", B=B, A=A)
    s = scalar(scale, exact, "sgd_step", "scale")
    eb = scalar(eta_B, exact, "sgd_step", "eta_B", positive=True)
    ea = scalar(eta_A, exact, "sgd_step", "eta_A", positive=True)
    delta = (B @ A) * s
    g = _gradient_at(G, delta, "sgd_step")
    grad_B, grad_A = factor_gradients(B, A, g, s)
    B_next = B - grad_B * eb
    if order == "sequential":
        g = _gradient_at(G, (B_next @ A) * s, "sgd_step")
        grad_A = factor_gradients(B_next, A, g, s)[1]
    A_next = A - grad_A * ea
    return SgdStep(B_next, A_next, grad_B, grad_A, (B_next @ A_next) * s - delta, order)


def latent_balance(B: Operand, A: Operand, eta_B: object = 1, eta_A: object = 1) -> Operand:
    """The weighted Gram ``BᵀB/η_B − A Aᵀ/η_A`` (``[..., r, r]``), conserved by continuous
    plain gradient flow with a frozen ``G``.

    Its scope is that flow only: finite steps, sequential updates, clipping, factor decay,
    adaptive moments, stochastic rounding and mixed precision do not conserve it (it is a
    diagnostic under a named plain-flow comparison, not an assertion about an optimizer).

    Args:
        B: ``[..., d_out, r]``; A: ``[..., r, d_in]``; eta_B, eta_A: rates ``> 0``.

    Returns:
        ``[..., r, r]``.

    Raises:
        As :func:`product_velocity_terms`.

    Source: seed 003 §0x07E (``[[−10, 0], [0, 35]]``); du2018algorithmic (balancedness).
    """
    exact = mode("latent_balance", B=B, A=A)
    chain("latent_balance", B, A)
    eb = scalar(eta_B, exact, "latent_balance", "eta_B", positive=True)
    ea = scalar(eta_A, exact, "latent_balance", "eta_A", positive=True)
    return (B.mT @ B) * (1 / eb) - (A @ A.mT) * (1 / ea)


MECHANISMS = ("standard", "reversed", "both-zero", "cancelling")
"""The four zero-product starts of seed 003 §0x07F, in its order."""


@dataclass(frozen=True)
class ZeroProductStart:
    """A zero-product start classified by its derivative state.

    Attributes:
        mechanism: one of :data:`MECHANISMS` — ``standard`` (``B₀ = 0``, ``A₀ ≠ 0``),
            ``reversed`` (``A₀ = 0``, ``B₀ ≠ 0``), ``both-zero`` (a dead first-order point),
            ``cancelling`` (both nonzero, ``B₀A₀ = 0``).
        grad_B, grad_A: the first factor gradients under ``G``.
        moves_B, moves_A: whether that factor's gradient is nonzero (which factor receives
            gradient at step one).
        velocity: the first product velocity (``η_B = η_A = 1``).
    """

    mechanism: str
    grad_B: Operand
    grad_A: Operand
    moves_B: bool
    moves_A: bool
    velocity: Operand


def classify_zero_product(
    B0: Operand, A0: Operand, G: Operand, scale: object = 1
) -> ZeroProductStart:
    """Classify a zero-product start ``B₀A₀ = 0`` by which factors are zero, and report which
    factor receives the first gradient.

    A zero function perturbation, a zero factor and a dead first-order state are three
    different claims: the standard start moves only ``B`` (right-preconditioned,
    ``Δ̇₀ = −η_B s² G A₀ᵀA₀``), the reversed start only ``A`` (left-preconditioned), both-zero
    neither, and cancelling factors can move both at once.

    Args:
        B0: ``[d_out, r]``; A0: ``[r, d_in]``; G: ``[d_out, d_in]``; scale: ``s``.

    Returns:
        :class:`ZeroProductStart`.

    Raises:
        ValueError: ``B0 A0 ≠ 0`` (not a zero-product start); as :func:`factor_gradients`.

    Source: seed 003 §0x07F (the cancelling fixture ``∇_B = [[0,1],[0,1]]``,
    ``∇_A = [[1,1],[0,0]]``); hu2021lora (the standard start).
    """
    mode("classify_zero_product", B0=B0, A0=A0, G=G)
    chain("classify_zero_product", B0, A0, G)
    if not is_zero(B0 @ A0):
        raise ValueError(
            "classify_zero_product: B0 @ A0 is not exactly zero; allowed: a zero-product start"
        )
    zero_B, zero_A = is_zero(B0), is_zero(A0)
    mechanism = {
        (True, False): "standard",
        (False, True): "reversed",
        (True, True): "both-zero",
        (False, False): "cancelling",
    }[(zero_B, zero_A)]
    grad_B, grad_A = factor_gradients(B0, A0, G, scale)
    velocity = product_velocity(B0, A0, G, scale)
    return ZeroProductStart(
        mechanism, grad_B, grad_A, not is_zero(grad_B), not is_zero(grad_A), velocity
    )
