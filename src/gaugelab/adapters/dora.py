"""DoRA's effective weight update, from the adapter's factors and magnitudes and the base weight.

DoRA (weight-decomposed low-rank adaptation) writes the adapted weight as a magnitude times a
direction: ``W' = m ⊙ (W₀ + s·B A) / ‖W₀ + s·B A‖_c``, where ``‖·‖_c`` is the norm of each
output unit's weights (for ``W [d_out, d_in]``: the norm of each row, over ``d_in``; the paper's
"column" of ``W ∈ ℝ^{d×k}`` with ``W x`` read as ``xᵀ W``) and ``m [d_out]`` is trained. The
effective update ``ΔW = W' − W₀`` is dense in general: ``diag(m/‖·‖_c − 1) W₀`` plus a scaled
rank-``r`` term.

This is the rule PEFT merges (``DoraLinearLayer.get_weight_norm``: ``‖W₀ + s·B A‖`` over
``dim=1`` of the ``[d_out, d_in]`` weight, the base transposed first for ``fan_in_fan_out``;
``merge`` forms ``(m / norm)[:, None] ⊙ (W₀ + s·B A)``), so ``dora_delta`` equals PEFT's merged
weight minus the base to round-off. Source: liu2024dora (Eq. 5); PEFT 0.21 ``tuners/lora/dora.py``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gaugelab.adapters.adapter import Adapter
from gaugelab.adapters.checkpoint import BaseCheckpoint

__all__ = ["DoraUpdate", "dora_delta", "dora_rtol", "dora_updates"]


class DoraUpdate(NamedTuple):
    """One module's effective DoRA update and the relative rank tolerance of its round-off."""

    delta: torch.Tensor
    rtol: float


def dora_delta(
    base: torch.Tensor,
    B: torch.Tensor,
    A: torch.Tensor,
    scale: float,
    magnitude: torch.Tensor,
    *,
    fan_in_fan_out: bool = False,
) -> torch.Tensor:
    """``ΔW = m ⊙ (W₀ + s·B A)/‖W₀ + s·B A‖_c − W₀`` in float64, ``[d_out, d_in]``.

    Args:
        base: ``W₀`` as stored, ``[d_out, d_in]`` (``[d_in, d_out]`` when ``fan_in_fan_out``,
            GPT-2's ``Conv1D``); any floating dtype.
        B: ``[d_out, r]``; A: ``[r, d_in]``; scale: ``s``.
        magnitude: ``m [d_out]``.
        fan_in_fan_out: ``base`` is stored ``[d_in, d_out]``.

    Returns:
        The effective update, float64 ``[d_out, d_in]`` (transpose it for a ``Conv1D``
        layout); every input is upcast first, so the only round-off is float64's.

    Raises:
        ValueError: shapes that disagree (naming each), or an output unit whose adapted
            weights ``W₀ + s·B A`` are all zero (its direction is undefined).

    Source: liu2024dora (Eq. 5); PEFT 0.21 ``DoraLinearLayer`` (the norm over ``d_in``).
    """
    f64 = torch.float64
    W0 = (base.T if fan_in_fan_out else base).to(f64)
    d_out, d_in = B.shape[0], A.shape[1]
    if tuple(W0.shape) != (d_out, d_in) or tuple(magnitude.shape) != (d_out,) or (
        A.shape[0] != B.shape[1]
    ):
        raise ValueError(
            f"dora_delta: base {list(base.shape)} (fan_in_fan_out={fan_in_fan_out}), B "
            f"{list(B.shape)}, A {list(A.shape)}, magnitude {list(magnitude.shape)}; allowed: "
            "base [d_out, d_in] ([d_in, d_out] with fan_in_fan_out), B [d_out, r], A [r, d_in], "
            "magnitude [d_out]"
        )
    adapted = W0 + scale * (B.to(f64) @ A.to(f64))
    norm = torch.linalg.vector_norm(adapted, dim=1)
    if bool((norm == 0).any()):
        unit = int(torch.nonzero(norm == 0)[0, 0])
        raise ValueError(f"dora_delta: output unit {unit} has W₀ + s·B A = 0; DoRA's direction "
                         "is undefined there")  # fmt: skip
    return (magnitude.to(f64) / norm)[:, None] * adapted - W0


def dora_rtol(
    base: torch.Tensor, delta: torch.Tensor, magnitude_dtype: torch.dtype = torch.float64
) -> float:
    """The numerical-rank tolerance of a computed DoRA update, relative to its ``σ₁``.

    ``ΔW = W' − W₀`` is a difference of two matrices of ``W₀``'s size, so what is round-off in
    it is of ``W'``'s size, not ``ΔW``'s. Two sources: float64's own, each entry at most a few
    ``eps·(|W₀ᵢⱼ| + |ΔWᵢⱼ|)`` (Higham, *Accuracy and Stability*, §2–3), summed as
    ``max(m, n)·eps(float64)``; and the stored magnitude, which PEFT computes and keeps in its
    own dtype, so each output unit's factor ``m_i/‖·‖_i`` is known to ``eps(dtype of m)`` only
    (``‖diag(δ) W'‖₂ ≤ max|δ|·‖W'‖_F``). The tolerance is
    ``(max(m, n)·eps(float64) + eps(dtype of m))·(‖W₀‖_F + ‖ΔW‖_F)``, divided by a lower
    bound of ``σ₁``: the larger of ``‖ΔW‖_F/√min(m, n)`` and a few power-iteration steps'
    ``‖ΔW v‖/‖v‖`` (never below the true ratio). An untrained DoRA module
    (``m = ‖W₀ + s·B A‖_c``) then has numerical rank ``r``, where ``max(m, n)·eps`` alone
    counts that round-off as rank; a trained magnitude moves by far more than its dtype's eps.

    Args:
        base: ``W₀`` (either layout); delta: ``ΔW`` float64 ``[d_out, d_in]``.
        magnitude_dtype: the dtype the magnitude ``m`` was stored in.

    Returns:
        ``rtol ≥ 0`` (``inf`` for ``ΔW = 0``: no singular value is above round-off).
    """
    m, n = delta.shape
    size = torch.linalg.matrix_norm(delta).item()
    if size == 0.0:
        return float("inf")
    eps = max(m, n) * torch.finfo(torch.float64).eps + torch.finfo(magnitude_dtype).eps
    noise = eps * (torch.linalg.matrix_norm(base.to(torch.float64)).item() + size)
    sigma1 = size / min(m, n) ** 0.5
    v = delta.abs().sum(dim=0)  # any v: ‖ΔW v‖/‖v‖ ≤ σ₁
    for _ in range(8):
        w = delta @ v
        sigma1 = max(sigma1, (w.norm() / v.norm()).item())
        v = delta.T @ w
        if v.norm() == 0:
            break
    return noise / sigma1


def dora_updates(adapter: Adapter, base: BaseCheckpoint) -> dict[str, DoraUpdate]:
    """Every module's effective DoRA update (:func:`dora_delta`), float64 ``[d_out, d_in]``,
    and its rank tolerance (:func:`dora_rtol`); each base weight is read on its own
    (memory-mapped) and dropped after use.

    Raises:
        ValueError: ``adapter`` has no DoRA magnitudes; a module the checkpoint lacks or of
            another shape (:meth:`BaseCheckpoint.check`).
    """
    if not adapter.magnitudes:
        raise ValueError("dora_updates: the adapter has no DoRA magnitudes (use_dora false)")
    base.check(adapter, "the DoRA adapter", "dora_updates")
    flip = adapter.config.fan_in_fan_out
    out = {}
    for path, m in adapter.modules.items():
        W0 = base.weight(path)
        delta = dora_delta(W0, m.B, m.A, m.scale, adapter.magnitudes[path], fan_in_fan_out=flip)
        out[path] = DoraUpdate(delta, dora_rtol(W0, delta, adapter.magnitudes[path].dtype))
    return out
