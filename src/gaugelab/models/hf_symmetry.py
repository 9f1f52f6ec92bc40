"""The gauge a Hugging Face attention architecture really has, acting on the module's own weights.

The families and their layouts (``transformers`` 5, read from its modeling code):

* **GPT-2** (``gpt2``): one fused ``Conv1D`` ``c_attn`` (weight ``[d, 3d]``, ``y = x W + b``;
  the queries, keys and values are its column blocks ``[0, d)``, ``[d, 2d)``, ``[2d, 3d)``, head
  ``h`` the columns ``h·D … h·D + D − 1`` of each) and ``c_proj`` (``Conv1D``, head ``h`` its
  rows ``h·D …``); learned positions, so the QK gauge is ``GL(d_head)``.
* **GPT-NeoX** (``gpt_neox``): one fused ``nn.Linear`` ``query_key_value`` whose output is viewed
  as ``[n_heads, 3·D]``: head ``h`` owns rows ``3hD … 3hD + 3D − 1``, queries first, then keys,
  then values; ``dense`` holds ``W_O`` (head ``h`` its columns ``h·D …``). The rotary embedding
  rotates the first ``rotary_ndims = int(D · partial_rotary_factor)`` coordinates of a head with
  ``rotate_half`` (coordinate ``i`` paired with ``i + rotary_ndims/2``); the rest pass through.
* **Llama, Mistral, Qwen2** (``llama``, ``mistral``, ``qwen2``): ``q_proj``, ``k_proj``,
  ``v_proj``, ``o_proj`` (``nn.Linear``; Qwen2 has q/k/v biases), full RoPE with ``rotate_half``
  (pairs ``(i, i + D/2)``), grouped-query attention: query head ``h`` reads key/value head
  ``h // (n_heads / n_key_value_heads)`` (``repeat_kv``).

QK element ``A`` of key/value group ``g``: ``W_Q[h] ↦ W_Q[h] A`` for its query heads and
``W_K[g] ↦ W_K[g] A⁻ᵀ``, biases alike (``b ↦ b A``, ``b ↦ b A⁻ᵀ``). Without RoPE ``A`` is any
element of ``GL(D)``; with RoPE it must commute with every position's rotation, which keeps the
torus of rotations in the rotary planes (a reflection in a plane would invert its rotation), and
on non-rotary coordinates ``GL``, with nothing mixing the two (:class:`gaugelab.gauge.DirectSum`).
OV element ``A``: ``W_V[g] ↦ W_V[g] A`` (bias alike), ``W_O[h] ↦ A⁻¹ W_O[h]``: ``GL(D)``.

Source: singh2026lossbasis, §6 (the attention-head gauge); su2021roformer (the RoPE commutant);
ainslie2023gqa (grouped-query attention).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from gaugelab.gauge import DirectSum, GeneralLinear, Orthogonal, Torus, contragredient
from gaugelab.models.heads import HeadWeights
from gaugelab.models.symmetry import GaugeElements, HeadGauge

__all__ = [
    "HF_FAMILIES",
    "HFAttention",
    "apply_hf_gauge",
    "hf_attention",
    "hf_head_gauge",
    "hf_head_weights",
    "hf_ov_gauge",
]

Family = Literal["gpt2", "gpt_neox", "llama"]
Role = Literal["W_Q", "W_K", "W_V", "W_O"]
HF_FAMILIES: dict[str, Family] = {
    "gpt2": "gpt2", "gpt_neox": "gpt_neox", "llama": "llama", "mistral": "llama", "qwen2": "llama",
}  # fmt: skip
"""``model_type`` → the attention layout it shares."""

_MARKER = {"gpt2": "c_attn", "gpt_neox": "query_key_value", "llama": "q_proj"}


@dataclass(frozen=True)
class HFAttention:
    """The attention geometry of a Hugging Face model, and where its weights live.

    Attributes:
        family: ``"gpt2"``, ``"gpt_neox"`` or ``"llama"`` (Llama, Mistral, Qwen2).
        model_type: the config's ``model_type``.
        n_layers, n_heads, n_key_value_heads, d_head, d_model: the attention's sizes.
        rotary_dims: coordinates of a head that RoPE rotates (0: no RoPE; ``d_head``: all).
        paths: the module path of each layer's attention module, in layer order.
    """

    family: Family
    model_type: str
    n_layers: int
    n_heads: int
    n_key_value_heads: int
    d_head: int
    d_model: int
    rotary_dims: int
    paths: tuple[str, ...]

    @property
    def kv_heads(self) -> int:
        """Key/value heads per layer."""
        return self.n_key_value_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_key_value_heads

    def rope_planes(self) -> tuple[tuple[int, int], ...]:
        """The planes ``rotate_half`` rotates: ``(i, i + rotary_dims/2)``, in frequency order."""
        half = self.rotary_dims // 2
        return tuple((i, i + half) for i in range(half))

    def projection(self, role: Role) -> tuple[str, bool, Callable[[int], int]]:
        """Where a role's weight lives in a layer's attention module.

        Returns:
            ``(name, conv1d, start)``: the parameter's module name (``c_attn``, ``q_proj`` …),
            whether it is a ``Conv1D`` (weight ``[in, out]``; else ``nn.Linear``'s
            ``[out, in]``), and ``start(head)``: the first output row of the head in the
            ``[out, in]`` layout (for ``W_O``, the first input column).
        """
        D, d = self.d_head, self.d_model
        offset = {"W_Q": 0, "W_K": 1, "W_V": 2, "W_O": 0}[role]
        if self.family == "gpt2":
            name = "c_proj" if role == "W_O" else "c_attn"
            return name, True, lambda h: offset * d + h * D
        if self.family == "gpt_neox":
            if role == "W_O":
                return "dense", False, lambda h: h * D
            return "query_key_value", False, lambda h: 3 * h * D + offset * D
        name = {"W_Q": "q_proj", "W_K": "k_proj", "W_V": "v_proj", "W_O": "o_proj"}[role]
        return name, False, lambda h: h * D


def _rope_parameters(config: Any) -> dict:
    params = getattr(config, "rope_parameters", None) or {}
    return params if isinstance(params, dict) else {}


def hf_attention(model: nn.Module) -> HFAttention:
    """The attention layout of a ``transformers`` model (a causal LM or its backbone).

    Args:
        model: a ``transformers`` module with a ``config`` of a supported ``model_type``.

    Returns:
        The :class:`HFAttention`.

    Raises:
        ValueError: an unsupported ``model_type``, qk-norm, or a module whose attention
            layers cannot be found (one per ``num_hidden_layers``).
    """
    config = model.config
    model_type = getattr(config, "model_type", None)
    family = HF_FAMILIES.get(model_type)
    if family is None:
        raise ValueError(
            f"model: model_type={model_type!r} has no derived gauge; allowed: "
            f"{', '.join(sorted(HF_FAMILIES))}"
        )
    if family == "gpt2":
        n_heads, d_model = config.n_head, config.n_embd
        kv, D, rotary = n_heads, d_model // n_heads, 0
    else:
        n_heads, d_model = config.num_attention_heads, config.hidden_size
        kv = getattr(config, "num_key_value_heads", None) or n_heads
        D = getattr(config, "head_dim", None) or d_model // n_heads
        factor = _rope_parameters(config).get("partial_rotary_factor", 1.0)
        rotary = int(D * factor) if family == "gpt_neox" else D
    marker = _MARKER[family]
    paths = tuple(name for name, m in model.named_modules() if hasattr(m, marker))
    if len(paths) != config.num_hidden_layers:
        raise ValueError(
            f"model: found {len(paths)} attention modules with {marker!r} in a "
            f"{model_type} model of {config.num_hidden_layers} layers; allowed: one per layer"
        )
    return HFAttention(family, model_type, len(paths), n_heads, kv, D, d_model, rotary, paths)


def hf_head_gauge(layout: HFAttention, *, orthogonal: bool = False) -> HeadGauge:
    """The QK gauge per layer and key/value group.

    ``GL(D)`` without RoPE; the torus on the rotary planes with full RoPE; the torus on the
    rotary coordinates ⊕ ``GL`` on the rest with partial RoPE. ``orthogonal=True`` gives the
    orthogonal subgroup (``O`` in place of ``GL``), which the twin protocol draws from.

    Source: singh2026lossbasis, §6; su2021roformer (rotations commuting with RoPE).
    """
    D, r = layout.d_head, layout.rotary_dims
    free = Orthogonal if orthogonal else GeneralLinear
    if r == 0:
        G = free(D)
    elif r == D:
        G = Torus(D, layout.rope_planes())
    else:
        torus = Torus(r, layout.rope_planes())
        G = DirectSum(D, ((tuple(range(r)), torus), (tuple(range(r, D)), free(D - r))))
    return HeadGauge(layout, tuple((G,) * layout.kv_heads for _ in range(layout.n_layers)))


def hf_ov_gauge(layout: HFAttention, *, orthogonal: bool = False) -> HeadGauge:
    """The (W_V, W_O) gauge: ``GL(D)`` (``O(D)`` when ``orthogonal``) per layer and group.

    Source: singh2026lossbasis, §6 (the OV circuit is ``W_V[h] W_O[h]``).
    """
    G = Orthogonal(layout.d_head) if orthogonal else GeneralLinear(layout.d_head)
    return HeadGauge(layout, tuple((G,) * layout.kv_heads for _ in range(layout.n_layers)))


def _linear(weight: torch.Tensor, conv1d: bool) -> torch.Tensor:
    """The weight in ``[*, out, in]`` layout (a view: writes reach the parameter)."""
    return weight.mT if conv1d else weight


def hf_head_weights(
    params: Mapping[str, torch.Tensor], layout: HFAttention, prefix: str = ""
) -> HeadWeights:
    """The per-head weights in the right-multiplied layout, from a model's parameters by name.

    Args:
        params: name → tensor (``dict(model.named_parameters())`` or an ensemble's stacked
            parameters ``[E, *shape]``), with any leading dims ``*`` shared by all.
        layout: the model's :class:`HFAttention`.
        prefix: prepended to the layout's module paths (a wrapper's attribute, e.g.
            ``"model."``).

    Returns:
        :class:`~gaugelab.models.heads.HeadWeights`: ``W_Q [*, L, H, d, D]``,
        ``W_K``/``W_V [*, L, G, d, D]``, ``W_O [*, L, H, D, d]``.

    Raises:
        KeyError: a parameter of the layout is missing from ``params``.
    """
    D = layout.d_head
    out = []
    for role in ("W_Q", "W_K", "W_V", "W_O"):
        name, conv1d, start = layout.projection(role)
        n = layout.kv_heads if role in ("W_K", "W_V") else layout.n_heads
        layers = []
        for path in layout.paths:
            W = _linear(params[f"{prefix}{path}.{name}.weight"], conv1d)  # [*, out, in]
            if role == "W_O":
                heads = [W[..., :, start(h) : start(h) + D].mT for h in range(n)]  # [*, D, d]
            else:
                heads = [W[..., start(h) : start(h) + D, :].mT for h in range(n)]  # [*, d, D]
            layers.append(torch.stack(heads, dim=-3))
        out.append(torch.stack(layers, dim=-4))
    return HeadWeights(*out)


def _right(weight: torch.Tensor, bias: torch.Tensor | None, rows: slice, A: torch.Tensor) -> None:
    """Rows ``rows`` of ``weight`` (``[out, in]``) hold ``Wᵀ`` of a right factor: ``W ↦ W A``."""
    A = A.to(weight.dtype)
    weight[rows] = A.mT @ weight[rows]
    if bias is not None:
        bias[rows] = bias[rows] @ A


def apply_hf_gauge(
    model: nn.Module, layout: HFAttention, elements: GaugeElements, *, inplace: bool = False
) -> nn.Module:
    """Apply QK and OV gauge elements to a ``transformers`` model's attention weights.

    Args:
        model: the model ``layout`` was read from (or a copy of it).
        layout: its :class:`HFAttention`.
        elements: ``qk`` and/or ``ov``, each ``[n_layers, n_key_value_heads, D, D]``
            (:class:`~gaugelab.models.symmetry.GaugeElements`; ``mlp`` must be None).
        inplace: modify ``model`` instead of a deep copy.

    Returns:
        The transformed model: the same function as ``model`` (to round-off) when the
        elements lie in :func:`hf_head_gauge` and :func:`hf_ov_gauge`.

    Raises:
        ValueError: an element of the wrong shape, or MLP elements.

    Source: singh2026lossbasis, §6.
    """
    D, s = layout.d_head, layout.group_size
    elements.check_heads(layout, "apply_hf_gauge")
    if elements.mlp is not None:
        raise ValueError("apply_hf_gauge: elements.mlp is set; allowed: qk and ov elements only")
    target = model if inplace else copy.deepcopy(model)

    def tensors(attn: nn.Module, role: Role):
        name, conv1d, start = layout.projection(role)
        module = attn.get_submodule(name)
        return _linear(module.weight, conv1d), getattr(module, "bias", None), start

    with torch.no_grad():
        for layer, path in enumerate(layout.paths):
            attn = target.get_submodule(path)
            for g in range(layout.kv_heads):
                heads = range(g * s, (g + 1) * s)
                if elements.qk is not None:
                    A = elements.qk[layer, g]
                    W, b, start = tensors(attn, "W_K")
                    _right(W, b, slice(start(g), start(g) + D), contragredient(A))
                    W, b, start = tensors(attn, "W_Q")
                    for h in heads:
                        _right(W, b, slice(start(h), start(h) + D), A)
                if elements.ov is not None:
                    A = elements.ov[layer, g]
                    W, b, start = tensors(attn, "W_V")
                    _right(W, b, slice(start(g), start(g) + D), A)
                    W, _, start = tensors(attn, "W_O")
                    inverse_t = contragredient(A.to(W.dtype))
                    for h in heads:
                        cols = slice(start(h), start(h) + D)
                        W[:, cols] = W[:, cols] @ inverse_t
    return target
