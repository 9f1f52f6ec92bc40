"""Per-step factor diagnostics of LoRA training, and factor rebalancing with its state policy.

:class:`FactorDiagnostics` is seed 003's *minimum diagnostic record* (§0x08L) of one adapted
module at one step, with the §0x07H trace: step and tokens, the loss and how it was measured,
the factor norms ``‖A‖_F``, ``‖B‖_F`` and the update norm ``‖s B A‖_F``, the gradient norms,
the product step ``‖Δ_{t+1} − Δ_t‖_F``, the Gram operators ``AᵀA`` and ``B Bᵀ`` and the latent
balance ``BᵀB/η_B − A Aᵀ/η_A``, the singular values and numerical rank of ``Δ``, the
factor-specific learning rates and factor step norms, summaries of the optimizer moments, and
the overflow / clipping / skipped-step counters. Every state quantity is that of the factors
the step's gradients were taken at (§0x07H: both gradients and both optimizer steps read the
same old state), never of the factors after the step. :func:`factor_diagnostics` builds it
from those factors, their gradients and the factors after the step;
:meth:`FactorDiagnostics.metrics` flattens its scalars for a run store's log and
:meth:`FactorDiagnostics.seed_diagnostics` gives the §0x07H dictionary under the seed's names.

:func:`rebalance_factors` re-expresses ``(B, A)`` as ``(B G, G⁻¹ A)`` (the product is
preserved at transform time, §0x08J) and either moves the optimizer's state with
:func:`gaugelab.gauge.transform_state` or resets it, and says which in a :class:`Rebalance`
record: optimizer moments must be transformed or reset (§0x08J), and a rebalance is part of the
factor history a reproducible checkpoint keeps (§0x08K).

Layout: PEFT, ``A [r, d_in]``, ``B [d_out, r]``, ``Δ = s·B A`` (DESIGN.md).

Source: seed 003 §0x07H (the tensor and optimizer trace, its diagnostics), §0x08J (periodic
rebalancing: moments transformed or reset), §0x08K (the rebalance history), §0x08L (the minimum
diagnostic record; post-transform finite checks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import torch

from gaugelab.lowrank.dynamics.rebalance import (
    FOREIGN_STATE_POLICIES,
    STATE_POLICIES,
    Rebalance,
    rebalance_factors,
)
from gaugelab.lowrank.spectra.ranks import numerical_rank, spectrum

__all__ = [
    "FOREIGN_STATE_POLICIES",
    "STATE_POLICIES",
    "FactorDiagnostics",
    "Rebalance",
    "factor_diagnostics",
    "rebalance_factors",
]


@dataclass(frozen=True)
class FactorDiagnostics:
    """The minimum diagnostic record of one LoRA module at one step (seed 003 §0x08L).

    ``A``, ``B`` below are the factors the step's gradients were taken at (the state before
    the step), ``A⁺``, ``B⁺`` the factors after it, ``Δ = s B A`` (seed 003 §0x07H).

    Attributes:
        step: the record's step in the run's log: update ``step`` (1-based) read its
            gradients at ``A``, ``B`` and produced ``A⁺``, ``B⁺``; for a snapshot without
            gradients or a step, the updates applied to ``A``, ``B`` so far.
        tokens: tokens processed so far (``step × batch × block`` for a fixed batch).
        loss: the loss at ``A``, ``B`` (nats); eval_protocol: how it was measured.
        norm_A, norm_B: ``‖A‖_F``, ``‖B‖_F``; norm_update: ``‖s B A‖_F`` (the seed's
            ``norm_A``, ``norm_B``, ``norm_product``).
        grad_norm_A, grad_norm_B: ``‖∇_A‖_F``, ``‖∇_B‖_F`` of the gradients the step used
            (the seed's ``norm_grad_A``, ``norm_grad_B``; ``None`` when not given).
        update_change: ``‖s B⁺ A⁺ − s B A‖_F``, the product step (the seed's
            ``norm_product_step``; ``None`` without the factors after the step).
        right_gram: ``AᵀA``, ``[d_in, d_in]`` as nested tuples of floats (rows).
        left_gram: ``B Bᵀ``, ``[d_out, d_out]``.
        latent_balance: ``BᵀB/η_B − A Aᵀ/η_A`` with ``η_B = lr_B``, ``η_A = lr_A``, ``[r, r]``;
            ``None`` when a rate is not positive. Conserved by the continuous plain flow only
            (§0x07E): a diagnostic under that comparison, not a claim that the run's
            optimizer conserves it.
        singular_values: the ``min(d_out, d_in, r)`` singular values of ``Δ``, non-increasing.
        numerical_rank: ``#{σ_i > rtol·σ_1}`` with ``rank_rtol`` (default ``max(d_out, d_in)
            · eps`` of the factors' dtype, :func:`gaugelab.lowrank.numerical_rank`).
        rank_rtol: that relative tolerance.
        lr_A, lr_B: the factor-specific learning rates of the step.
        step_norm_A, step_norm_B: ``‖A⁺ − A‖_F``, ``‖B⁺ − B‖_F`` (``None`` without the
            factors after the step).
        moments: optimizer-state summaries, ``"<A|B>/<state key>"`` → the entry's Frobenius
            norm (float tensors only: moments, accumulators; step counters are left out).
        overflow, clipped, skipped: the step's overflow, clipping and skipped-step counters.

    Every float is a Python float computed in float64 from the stored factors.
    """

    step: int
    tokens: int
    loss: float
    eval_protocol: str
    norm_A: float
    norm_B: float
    norm_update: float
    grad_norm_A: float | None
    grad_norm_B: float | None
    update_change: float | None
    right_gram: tuple[tuple[float, ...], ...]
    left_gram: tuple[tuple[float, ...], ...]
    latent_balance: tuple[tuple[float, ...], ...] | None
    singular_values: tuple[float, ...]
    numerical_rank: int
    rank_rtol: float
    lr_A: float
    lr_B: float
    step_norm_A: float | None
    step_norm_B: float | None
    moments: dict[str, float] = field(default_factory=dict)
    overflow: int = 0
    clipped: int = 0
    skipped: int = 0

    def to_dict(self) -> dict:
        """Every field, JSON-serialisable."""
        return asdict(self)

    def seed_diagnostics(self) -> dict[str, object]:
        """The §0x07H ``diagnostics`` dictionary under the seed's names: ``norm_A``,
        ``norm_B``, ``norm_grad_A``, ``norm_grad_B``, ``norm_product``, ``norm_product_step``
        (floats, ``None`` where the record lacks them), ``right_gram``, ``left_gram``,
        ``latent_balance`` (nested tuples of floats, rows first)."""
        return {
            "norm_A": self.norm_A,
            "norm_B": self.norm_B,
            "norm_grad_A": self.grad_norm_A,
            "norm_grad_B": self.grad_norm_B,
            "norm_product": self.norm_update,
            "norm_product_step": self.update_change,
            "right_gram": self.right_gram,
            "left_gram": self.left_gram,
            "latent_balance": self.latent_balance,
        }

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """The record's scalars as flat ``name → float`` metrics for a run store's log
        (``None`` fields are left out; singular values as ``sigma/<i>``, moments as
        ``moment/<key>``; the Gram and balance matrices stay on the record).

        Args:
            prefix: prepended to every name, e.g. ``"diag/blocks.0.attn.q_proj/seed=0/"``.
        """
        out: dict[str, float] = {}
        scalars = (
            "tokens",
            "loss",
            "norm_A",
            "norm_B",
            "norm_update",
            "grad_norm_A",
            "grad_norm_B",
            "update_change",
            "numerical_rank",
            "lr_A",
            "lr_B",
            "step_norm_A",
            "step_norm_B",
            "overflow",
            "clipped",
            "skipped",
        )
        for name in scalars:
            value = getattr(self, name)
            if value is not None:
                out[prefix + name] = float(value)
        for i, s in enumerate(self.singular_values):
            out[f"{prefix}sigma/{i}"] = s
        for key, value in self.moments.items():
            out[f"{prefix}moment/{key}"] = value
        return out


def _fro(x: torch.Tensor | None) -> float | None:
    return None if x is None else float(torch.linalg.vector_norm(x.detach().double()))


def _rows(x: torch.Tensor) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(row) for row in x.tolist())


def _check_factors(A: object, B: object, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor)):
        raise TypeError(
            f"{where}: A and B must be tensors; got {type(A).__name__}, {type(B).__name__}"
        )
    if A.dim() != 2 or B.dim() != 2 or B.shape[1] != A.shape[0]:
        raise ValueError(
            f"{where}: A {tuple(A.shape)} and B {tuple(B.shape)}; allowed: A [r, d_in], "
            f"B [d_out, r] with the same r (PEFT layout)"
        )
    for name, t in (("A", A), ("B", B)):
        if not t.is_floating_point() or not bool(torch.isfinite(t).all()):
            raise ValueError(f"{where}: {name} must be finite floating point")
    return A.detach(), B.detach()


def factor_diagnostics(
    *,
    A: torch.Tensor,
    B: torch.Tensor,
    scale: float,
    step: int,
    tokens: int,
    loss: float,
    lr_A: float,
    lr_B: float,
    grad_A: torch.Tensor | None = None,
    grad_B: torch.Tensor | None = None,
    after: tuple[torch.Tensor, torch.Tensor] | None = None,
    state_A: Mapping[str, object] | None = None,
    state_B: Mapping[str, object] | None = None,
    overflow: int = 0,
    clipped: int = 0,
    skipped: int = 0,
    eval_protocol: str = "training minibatch, mean cross-entropy",
    rank_rtol: float | None = None,
) -> FactorDiagnostics:
    """The §0x08L record of one module at one step, read at the state the gradients were
    taken at (§0x07H).

    The seed's trace: ``grad_B, grad_A = factor_gradients(B, A, G, s)`` at the old factors,
    then both optimizer steps read that same old state and give ``(A⁺, B⁺)``. Every state
    quantity of the record (norms, Gram operators, latent balance, spectrum) is of ``A``,
    ``B``; ``after`` only enters the product step and the factor step norms.

    Args:
        A: ``[r, d_in]`` down factor; B: ``[d_out, r]`` up factor, both as they were when
            the step's gradients were taken (before the step).
        scale: the LoRA scale ``s`` (``α/r`` or ``α/√r``).
        step, tokens: the record's step (:class:`FactorDiagnostics`) and tokens processed so
            far (integers ≥ 0).
        loss: the loss at ``A``, ``B`` (finite); lr_A, lr_B: the step's factor learning
            rates (``η_A``, ``η_B`` of the latent balance).
        grad_A, grad_B: the gradients the step used (shapes of ``A``, ``B``), or ``None``.
        after: ``(A⁺, B⁺)`` after the step (shapes of ``A``, ``B``), or ``None`` for a
            snapshot.
        state_A, state_B: the optimizer's state of each factor (``optimizer.state[p]``, as
            the step left it); every floating tensor entry is summarised by its Frobenius
            norm.
        overflow, clipped, skipped: counters of the step (integers ≥ 0).
        eval_protocol: how ``loss`` was measured, in words.
        rank_rtol: relative tolerance of the numerical rank (default ``max(d_out, d_in) ·
            eps(A.dtype)``).

    Returns:
        The :class:`FactorDiagnostics` (floats computed in float64).

    Raises:
        TypeError: a factor is not a tensor.
        ValueError: factors not in the PEFT layout or not finite, a gradient or factor after
            the step of another shape, a non-finite loss, negative step/tokens/counters.

    Source: seed 003 §0x07H (the trace and its diagnostics), §0x08L (the minimum diagnostic
    record).
    """
    where = "factor_diagnostics"
    A, B = _check_factors(A, B, where)
    for name, value in (
        ("step", step),
        ("tokens", tokens),
        ("overflow", overflow),
        ("clipped", clipped),
        ("skipped", skipped),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: {name}={value!r}; allowed: an integer >= 0")
    if not torch.isfinite(torch.tensor(float(loss))):
        raise ValueError(f"{where}: loss={loss!r}; allowed: a finite number")
    for name, g, like in (("grad_A", grad_A, A), ("grad_B", grad_B, B)):
        if g is not None and tuple(g.shape) != tuple(like.shape):
            raise ValueError(
                f"{where}: {name} has shape {tuple(g.shape)}; allowed: {tuple(like.shape)}"
            )
    A64, B64 = A.double(), B.double()
    delta = float(scale) * (B64 @ A64)  # [d_out, d_in], at the gradients' state
    update_change = step_A = step_B = None
    if after is not None:
        A1, B1 = _check_factors(*after, f"{where} (after)")
        if A1.shape != A.shape or B1.shape != B.shape:
            raise ValueError(
                f"{where}: factors after the step {tuple(A1.shape)}, {tuple(B1.shape)}; "
                f"allowed: {tuple(A.shape)}, {tuple(B.shape)}"
            )
        A1, B1 = A1.double(), B1.double()
        update_change = _fro(float(scale) * (B1 @ A1) - delta)  # ‖Δ⁺ − Δ‖_F
        step_A, step_B = _fro(A1 - A64), _fro(B1 - B64)
    balance = None
    if float(lr_A) > 0 and float(lr_B) > 0:  # [r, r]: BᵀB/η_B − A Aᵀ/η_A (§0x07E, §0x07H)
        balance = _rows(B64.mT @ B64 / float(lr_B) - A64 @ A64.mT / float(lr_A))
    sp = spectrum((B64, A64, float(scale)), matrix_id="delta", computed_in=A.dtype)
    if rank_rtol is None:  # the record's documented rule: the factors' dtype, relative to σ₁
        rank_rtol = max(sp.shape) * torch.finfo(A.dtype).eps  # type: ignore[arg-type]
    rank = numerical_rank(sp, rtol=rank_rtol)
    moments: dict[str, float] = {}
    for factor, state in (("A", state_A), ("B", state_B)):
        for key, value in (state or {}).items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim():
                moments[f"{factor}/{key}"] = float(_fro(value))
    return FactorDiagnostics(
        step=step,
        tokens=tokens,
        loss=float(loss),
        eval_protocol=eval_protocol,
        norm_A=_fro(A64),
        norm_B=_fro(B64),
        norm_update=_fro(delta),
        grad_norm_A=_fro(grad_A),
        grad_norm_B=_fro(grad_B),
        update_change=update_change,
        right_gram=_rows(A64.mT @ A64),  # [d_in, d_in]
        left_gram=_rows(B64 @ B64.mT),  # [d_out, d_out]
        latent_balance=balance,
        singular_values=tuple(float(s) for s in sp.sigma),
        numerical_rank=int(rank.value),
        rank_rtol=float(rank.parameters["rtol"]),
        lr_A=float(lr_A),
        lr_B=float(lr_B),
        step_norm_A=step_A,
        step_norm_B=step_B,
        moments=moments,
        overflow=overflow,
        clipped=clipped,
        skipped=skipped,
    )
