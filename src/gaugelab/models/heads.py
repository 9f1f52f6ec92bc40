"""Per-head factored views of a Transformer's attention, from its parameters by name.

TransformerLens layout: per-head weights multiply on the right (``q = x W_Q[h]``), so
``W_Q[h], W_K[g], W_V[g] ∈ ℝ^{d_model×d_head}`` and ``W_O[h] ∈ ℝ^{d_head×d_model}``; inside an
``nn.Linear`` (weight ``[out, in]``) head ``h`` is rows ``h·D:(h+1)·D`` (columns of
``o_proj``). Query head ``h`` reads key/value head ``h // group_size``. The functions take any
mapping name → tensor that uses :class:`~gaugelab.models.Transformer`'s parameter names
(``blocks.{l}.attn.q_proj.weight``, …), with optional leading dimensions ``*`` — one model's
``dict(model.named_parameters())``, or an ensemble's ``stacked_parameters()`` (``[E, out, in]``).
Shape comments use L layers, H query heads, G key/value heads, D d_head, d d_model. A model with
LoRA adapters holds its projections as ``….q_proj.base_layer.weight`` plus factors: read it
through :func:`effective_weights` (``W + s·B A`` per adapted layer), which the views then accept.

Source: singh2026lossbasis, §6 (the QK and OV invariants of a head).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

import torch
from torch import nn

from gaugelab.models.config import TransformerConfig

Role = Literal["W_Q", "W_K", "W_V", "W_O"]
_PROJ = {"W_Q": "q_proj", "W_K": "k_proj", "W_V": "v_proj", "W_O": "o_proj"}


class HeadWeights(NamedTuple):
    """The per-head attention weights of every layer (``*`` = the parameters' leading dims).

    Attributes:
        W_Q: ``[*, L, n_heads, d_model, d_head]``.
        W_K: ``[*, L, n_key_value_heads, d_model, d_head]``.
        W_V: ``[*, L, n_key_value_heads, d_model, d_head]``.
        W_O: ``[*, L, n_heads, d_head, d_model]``.
    """

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor


def effective_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """``dict(model.named_parameters())`` with every LoRA-adapted layer read as one ``nn.Linear``.

    A layer adapted by :func:`gaugelab.models.lora.inject_lora` holds its frozen weight as
    ``<path>.base_layer.weight`` and its factors as ``<path>.lora_A`` / ``<path>.lora_B``; the
    function it computes is the *effective* weight ``W + s·B A`` (``W`` alone once merged,
    since merging adds ``s·B A`` into it). Here each such layer contributes ``<path>.weight``
    (the effective weight, ``[d_out, d_in]``) and ``<path>.bias`` (the base bias, if any)
    instead, so the per-head views of this module (:func:`head_weight`, :func:`qk_invariants`,
    …) read the model that runs: ``qk_invariants(effective_weights(model), model.config)``.

    Args:
        model: any module (a :class:`~gaugelab.models.Transformer` with or without adapters).

    Returns:
        name → tensor in the parameters' dtype; the effective weights are computed (autograd
        connects them to ``W``, ``A`` and ``B``), every other entry is the parameter itself.

    Source: hu2021lora, §4.1 (``W + ΔW``, ``ΔW = s·B A``); seed 003 §0x08K (merge).
    """
    params = dict(model.named_parameters())
    for path, module in model.named_modules():
        base = getattr(module, "base_layer", None)
        if not isinstance(base, nn.Linear) or not callable(getattr(module, "delta_weight", None)):
            continue
        prefix = f"{path}." if path else ""
        for leaf in ("base_layer.weight", "base_layer.bias", "lora_A", "lora_B"):
            params.pop(prefix + leaf, None)
        merged = bool(getattr(module, "merged", False))
        params[prefix + "weight"] = base.weight if merged else base.weight + module.delta_weight()
        if base.bias is not None:
            params[prefix + "bias"] = base.bias
    return params


def _weight(params: Mapping[str, torch.Tensor], name: str, shape: tuple[int, int]) -> torch.Tensor:
    adapted = name.removesuffix("weight") + "base_layer.weight"
    if name not in params and adapted in params:
        layer = name.removesuffix(".weight")
        raise ValueError(
            f"head_weight: {layer} is LoRA-adapted: the mapping holds its frozen {adapted} and "
            "its factors, not the weight the layer computes with (W + s·B A; the scale s is "
            "not a parameter); allowed: the effective weights, "
            "gaugelab.models.heads.effective_weights(model) (e.g. qk_invariants("
            "effective_weights(model), model.config))"
        )
    if name not in params:
        raise ValueError(
            f"head_weight: no parameter {name!r}; allowed: a mapping with Transformer's "
            f"parameter names (dict(model.named_parameters()) or Ensemble.stacked_parameters())"
        )
    w = params[name]
    if w.dim() < 2 or tuple(w.shape[-2:]) != shape:
        raise ValueError(
            f"head_weight: {name} has shape {tuple(w.shape)}; allowed: [*, {shape[0]}, "
            f"{shape[1]}] for this config"
        )
    return w


def head_weight(
    params: Mapping[str, torch.Tensor], config: TransformerConfig, role: Role
) -> torch.Tensor:
    """One per-head weight of every layer, stacked: ``W_Q``, ``W_K``, ``W_V`` or ``W_O``.

    Args:
        params: name → tensor with Transformer's parameter names; the attention weights are
            ``[*, n·d_head, d_model]`` (``o_proj``: ``[*, d_model, n_heads·d_head]``), any
            leading dims ``*`` shared by all of them; any dtype.
        config: the architecture the parameters belong to.
        role: ``"W_Q"``, ``"W_K"``, ``"W_V"`` or ``"W_O"``.

    Returns:
        ``W_Q`` ``[*, L, n_heads, d_model, d_head]``, ``W_K``/``W_V``
        ``[*, L, n_key_value_heads, d_model, d_head]`` or ``W_O``
        ``[*, L, n_heads, d_head, d_model]``, in the parameters' dtype (a stacked copy, which
        autograd connects to the parameters).

    Raises:
        ValueError: unknown ``role``, a missing parameter, or one whose trailing shape does
            not match ``config``; a LoRA-adapted projection (its ``base_layer.weight`` in
            ``params``: pass :func:`effective_weights` of the model instead).

    Source: singh2026lossbasis, §6; the TransformerLens ``W_Q``/``W_O`` layout.
    """
    if role not in _PROJ:
        raise ValueError(f"head_weight: role={role!r}; allowed: {', '.join(_PROJ)}")
    c = config
    D, d = c.d_head, c.d_model
    n = c.kv_heads if role in ("W_K", "W_V") else c.n_heads
    mats = []
    for layer in range(c.n_layers):
        name = f"blocks.{layer}.attn.{_PROJ[role]}.weight"
        if role == "W_O":
            w = _weight(params, name, (d, n * D))  # [*, d, H·D]
            mats.append(w.unflatten(-1, (n, D)).movedim(-3, -1))  # [*, H, D, d]
        else:
            w = _weight(params, name, (n * D, d))  # [*, n·D, d]
            mats.append(w.unflatten(-2, (n, D)).mT)  # [*, n, d, D]
    return torch.stack(mats, dim=-4)  # [*, L, n, ·, ·]


def head_weights(params: Mapping[str, torch.Tensor], config: TransformerConfig) -> HeadWeights:
    """All four per-head weights (see :func:`head_weight` for arguments, shapes, errors)."""
    return HeadWeights(*(head_weight(params, config, role) for role in _PROJ))


def qk_product(W_Q: torch.Tensor, W_K: torch.Tensor, group_size: int) -> torch.Tensor:
    """``W_Q[h] W_K[h // group_size]ᵀ`` for every query head.

    Args:
        W_Q: ``[*, n_heads, d_model, d_head]``.
        W_K: ``[*, n_key_value_heads, d_model, d_head]``, ``n_heads = group_size ·
            n_key_value_heads``; leading dims ``*`` as ``W_Q``'s.
        group_size: query heads per key/value head, ≥ 1.

    Returns:
        ``[*, n_heads, d_model, d_model]``.

    Source: singh2026lossbasis, §6 (QK invariant).
    """
    return W_Q @ W_K.repeat_interleave(group_size, dim=-3).mT  # [*, H, d, D] @ [*, H, D, d]


def ov_product(W_V: torch.Tensor, W_O: torch.Tensor, group_size: int) -> torch.Tensor:
    """``W_V[h // group_size] W_O[h]`` for every query head.

    Args:
        W_V: ``[*, n_key_value_heads, d_model, d_head]``.
        W_O: ``[*, n_heads, d_head, d_model]``, ``n_heads = group_size · n_key_value_heads``.
        group_size: query heads per key/value head, ≥ 1.

    Returns:
        ``[*, n_heads, d_model, d_model]``.

    Source: singh2026lossbasis, §6 (OV invariant).
    """
    return W_V.repeat_interleave(group_size, dim=-3) @ W_O  # [*, H, d, D] @ [*, H, D, d]


def qk_invariants(params: Mapping[str, torch.Tensor], config: TransformerConfig) -> torch.Tensor:
    """Every head's QK invariant ``W_Q[h] W_K[kv(h)]ᵀ``: ``[*, L, n_heads, d_model, d_model]``.

    Unchanged by the head gauge ``W_Q[h] ↦ W_Q[h] A``, ``W_K[kv(h)] ↦ W_K[kv(h)] A⁻ᵀ``.
    Arguments and errors as :func:`head_weight`.

    Source: singh2026lossbasis, §6 (attention-head gauge).
    """
    W_Q, W_K = (head_weight(params, config, role) for role in ("W_Q", "W_K"))
    return qk_product(W_Q, W_K, config.group_size)


def ov_invariants(params: Mapping[str, torch.Tensor], config: TransformerConfig) -> torch.Tensor:
    """Every head's OV invariant ``W_V[kv(h)] W_O[h]``: ``[*, L, n_heads, d_model, d_model]``.

    Unchanged by the OV gauge ``W_V[g] ↦ W_V[g] A``, ``W_O[h] ↦ A⁻¹ W_O[h]``. Arguments and
    errors as :func:`head_weight`.

    Source: singh2026lossbasis, §6.
    """
    W_V, W_O = (head_weight(params, config, role) for role in ("W_V", "W_O"))
    return ov_product(W_V, W_O, config.group_size)


__all__ = [
    "HeadWeights",
    "effective_weights",
    "head_weight",
    "head_weights",
    "ov_invariants",
    "ov_product",
    "qk_invariants",
    "qk_product",
]
