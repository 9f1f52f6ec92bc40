"""Merging twins: align a twin to its base head by head, then average the parameters.

Alignment solves, per layer and key/value group, an orthogonal Procrustes problem on the
stacked head columns: QK on ``[W_Q[h] for the group's query heads; W_K[g]]`` and OV on
``[W_V[g]; W_O[h]ᵀ for the group's heads]``. Procrustes is scipy's
``scipy.linalg.orthogonal_procrustes``. Alignment can undo a change of basis; it cannot undo a
difference in the gauge-invariant products, which is what basis-dependent training creates.

Source: singh2026lossbasis, §6 ("A consequence for model merging"); ainsworth2023git
(re-basin by permutation, whose rotational analogue this is).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from gaugelab.lazy import LazyModule
from gaugelab.models import Transformer
from gaugelab.models.symmetry import GaugeElements, apply_gauge

_scipy_linalg = LazyModule("scipy.linalg")


def _procrustes(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Orthogonal ``R`` minimising ``‖source R − target‖_F`` (both ``[m, D]``)."""

    R, _ = _scipy_linalg.orthogonal_procrustes(
        source.detach().double().numpy(), target.detach().double().numpy()
    )
    return torch.from_numpy(np.ascontiguousarray(R))


def align_heads(base: Transformer, twin: Transformer) -> GaugeElements:
    """Per-head orthogonal elements that bring ``twin``'s heads closest to ``base``'s.

    Args:
        base, twin: Transformers of one configuration.

    Returns:
        :class:`GaugeElements` with ``qk`` and ``ov`` of shape
        ``[n_layers, n_key_value_heads, d_head, d_head]`` (float64); ``apply_gauge(twin, ·)``
        is the aligned twin.

    Raises:
        ValueError: the configurations differ.

    Source: orthogonal Procrustes (schonemann1966procrustes) per head.
    """
    c = base.config
    if twin.config != c:
        raise ValueError("align_heads: base and twin have different configurations")
    s = c.group_size
    Wq_b, Wk_b, Wv_b, Wo_b = base.W_Q, base.W_K, base.W_V, base.W_O
    Wq_t, Wk_t, Wv_t, Wo_t = twin.W_Q, twin.W_K, twin.W_V, twin.W_O
    qk = torch.empty(c.n_layers, c.kv_heads, c.d_head, c.d_head, dtype=torch.float64)
    ov = torch.empty_like(qk)
    for layer in range(c.n_layers):
        for g in range(c.kv_heads):
            heads = range(g * s, (g + 1) * s)

            def stack_qk(Wq, Wk, layer=layer, g=g, heads=heads):
                return torch.cat([*(Wq[layer, h] for h in heads), Wk[layer, g]])  # [(s+1)d, D]

            def stack_ov(Wv, Wo, layer=layer, g=g, heads=heads):
                return torch.cat([Wv[layer, g], *(Wo[layer, h].T for h in heads)])

            qk[layer, g] = _procrustes(stack_qk(Wq_t, Wk_t), stack_qk(Wq_b, Wk_b))
            ov[layer, g] = _procrustes(stack_ov(Wv_t, Wo_t), stack_ov(Wv_b, Wo_b))
    return GaugeElements(qk=qk, ov=ov)


def average_models(a: Transformer, b: Transformer, weight: float = 0.5) -> Transformer:
    """``(1 − weight)·a + weight·b`` parameter by parameter (a new model).

    Raises:
        ValueError: the configurations differ or ``weight`` is outside [0, 1].
    """
    if a.config != b.config:
        raise ValueError("average_models: the models have different configurations")
    if not 0 <= weight <= 1:
        raise ValueError(f"average_models: weight={weight}; allowed: [0, 1]")
    merged = copy.deepcopy(a)
    with torch.no_grad():
        for p, q in zip(merged.parameters(), b.parameters(), strict=True):
            p.mul_(1 - weight).add_(q, alpha=weight)
    return merged


@dataclass(frozen=True)
class MergeResult:
    """Validation loss and accuracy of the parents and of the two merges.

    Attributes:
        metrics: ``"{base,twin,aligned,unaligned}/{val_loss,val_accuracy}"`` → value, plus
            ``"aligned/qk_residual"``: the mean relative distance between the aligned twin's
            and the base's per-head ``W_Q`` columns after alignment (0 for a pure gauge twin).
    """

    metrics: dict[str, float]


def merge_twin(
    base: Transformer,
    twin: Transformer,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    last_position: bool = True,
) -> MergeResult:
    """Align ``twin`` to ``base``, average both ways, and evaluate all four models.

    Args:
        base, twin: trained Transformers of one configuration.
        inputs: ``[N, T]`` validation tokens; labels: ``[N]`` (``last_position``) or ``[N, T]``.
        last_position: the label is read at the last position (the modular task).

    Returns:
        A :class:`MergeResult`.

    Source: singh2026lossbasis, §6 (merging consequence), measured rather than assumed.
    """
    aligned_twin = apply_gauge(twin, align_heads(base, twin))
    models = {
        "base": base,
        "twin": twin,
        "aligned": average_models(base, aligned_twin),
        "unaligned": average_models(base, twin),
    }
    metrics = {}
    with torch.no_grad():
        for name, model in models.items():
            logits = model(inputs)
            logits = logits[:, -1] if last_position else logits.flatten(0, 1)
            y = labels if last_position else labels.flatten()
            metrics[f"{name}/val_loss"] = float(F.cross_entropy(logits, y))
            metrics[f"{name}/val_accuracy"] = float((logits.argmax(-1) == y).double().mean())
        diff = (aligned_twin.W_Q - base.W_Q).norm(dim=(-2, -1)) / base.W_Q.norm(dim=(-2, -1))
        metrics["aligned/qk_residual"] = float(diff.mean())
    return MergeResult(metrics)
