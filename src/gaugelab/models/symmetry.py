"""The gauge an architecture really has, derived from its configuration, and its action.

Three families of function-preserving changes of basis:

* **QK** (``head_gauge``): per layer and key/value group, ``W_Q[h] ↦ W_Q[h] A`` for every query
  head of the group and ``W_K[g] ↦ W_K[g] A⁻ᵀ`` (biases alike). The group is ``O(d_head)`` with
  additive or ALiBi positions; RoPE keeps only rotations commuting with every position's
  rotation (a torus on the RoPE planes); qk-norm keeps only elements that can move the norm
  gains (signed permutations, which permute them).
* **OV** (``ov_gauge``): ``W_V[g] ↦ W_V[g] A``, ``W_O[h] ↦ A⁻¹ W_O[h]``: ``GL(d_head)``.
* **MLP** (``mlp_gauge``): hidden-unit permutations, with positive rescalings for ReLU.

Source: singh2026lossbasis, §6 and its Example on the attention-head gauge; seed conventions
in DESIGN.md (per-head layout).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gaugelab.gauge import (
    GeneralLinear,
    Group,
    Orthogonal,
    Permutation,
    PositiveMonomial,
    SignedPermutation,
    Torus,
    contragredient,
)
from gaugelab.models.config import TransformerConfig
from gaugelab.models.transformer import MLP, MixtureOfExperts, Transformer


@dataclass(frozen=True)
class HeadGauge:
    """A gauge acting per layer and per key/value group of heads.

    Attributes:
        config: the architecture: a :class:`TransformerConfig`, or any layout with its
            ``n_layers``, ``kv_heads``, ``d_head`` and ``group_size`` (a Hugging Face model's
            :class:`gaugelab.models.hf_symmetry.HFAttention`).
        groups: ``groups[layer][g]``: the group acting on key/value group ``g`` of ``layer``
            (query heads ``g·s … g·s + s − 1`` with ``s = n_heads / n_key_value_heads``).
    """

    config: TransformerConfig
    groups: tuple[tuple[Group, ...], ...]

    def query_heads(self, g: int) -> range:
        """The query heads that share key/value head ``g``."""
        s = self.config.group_size
        return range(g * s, (g + 1) * s)

    def sample(
        self, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64
    ) -> torch.Tensor:
        """One element per layer and group: ``[n_layers, n_key_value_heads, d_head, d_head]``."""
        return torch.stack(
            [torch.stack([G.sample(generator, dtype) for G in row]) for row in self.groups]
        )

    def identity(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The identity element, shaped like :meth:`sample`."""
        c = self.config
        return torch.eye(c.d_head, dtype=dtype).expand(c.n_layers, c.kv_heads, -1, -1).clone()

    def contains(self, elements: torch.Tensor, atol: float = 1e-10) -> bool:
        """Whether every ``elements[layer, g]`` lies in ``groups[layer][g]``."""
        return all(
            G.contains(elements[layer, g], atol)
            for layer, row in enumerate(self.groups)
            for g, G in enumerate(row)
        )


@dataclass(frozen=True)
class MLPGauge:
    """Hidden-unit gauge of every feed-forward map.

    Attributes:
        groups: ``groups[layer]``: one group per feed-forward map of the layer (the dense MLP,
            or each routed expert followed by the shared expert).
    """

    groups: tuple[tuple[Group, ...], ...]

    def sample(
        self, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64
    ) -> list[list[torch.Tensor]]:
        """One ``[d_mlp, d_mlp]`` element per feed-forward map: ``[layer][map]``."""
        return [[G.sample(generator, dtype) for G in row] for row in self.groups]


@dataclass
class GaugeElements:
    """Group elements to apply to a model (any field may be None = identity).

    Attributes:
        qk: ``[n_layers, n_key_value_heads, d_head, d_head]`` (from ``head_gauge``).
        ov: ``[n_layers, n_key_value_heads, d_head, d_head]`` (from ``ov_gauge``).
        mlp: ``[layer][map]`` of ``[d_mlp, d_mlp]`` (from ``mlp_gauge``).
    """

    qk: torch.Tensor | None = None
    ov: torch.Tensor | None = None
    mlp: list[list[torch.Tensor]] | None = None

    def check_heads(self, layout: Any, where: str) -> None:
        """Raise unless ``qk`` and ``ov`` (when set) fit ``layout``'s heads.

        Args:
            layout: anything with ``n_layers``, ``kv_heads`` and ``d_head`` (a
                :class:`TransformerConfig`, a Hugging Face model's ``HFAttention``).
            where: the caller's name, for the message.

        Raises:
            ValueError: an element whose shape is not
                ``[n_layers, n_key_value_heads, d_head, d_head]``.
        """
        D = layout.d_head
        expected = (layout.n_layers, layout.kv_heads, D, D)
        for name in ("qk", "ov"):
            A = getattr(self, name)
            if A is not None and tuple(A.shape) != expected:
                raise ValueError(
                    f"{where}: elements.{name} has shape {tuple(A.shape)}; allowed: {expected} "
                    f"[n_layers, n_key_value_heads, d_head, d_head]"
                )


def _qk_group(config: TransformerConfig) -> Group:
    D = config.d_head
    if config.positional == "rope":
        return Torus(D, config.rope_planes(), quarter_turns=config.qk_norm)
    if config.qk_norm:
        return SignedPermutation(D)
    return Orthogonal(D)


def head_gauge(config: TransformerConfig) -> HeadGauge:
    """The group acting on the (W_Q, W_K) columns of each key/value group of heads.

    ``O(d_head)`` with no, learned, sinusoidal or ALiBi positions (scores see only
    ``W_Q[h] W_K[h]ᵀ``); with RoPE the rotations commuting with every position's RoPE rotation,
    ``Torus(d_head, rope planes)`` (the frequencies are distinct, so nothing mixes planes and a
    reflection inside a plane inverts its rotation); with qk-norm the element must also move the
    per-head norm gains, which only a signed permutation does (the gains are permuted), so the
    group is ``SignedPermutation(d_head)``, or the quarter-turn torus with RoPE as well. Under
    GQA one element acts on the key head and all its query heads.

    Args:
        config: the architecture.

    Returns:
        A :class:`HeadGauge` with one group per layer and key/value group.

    Source: singh2026lossbasis, §6 (attention-head gauge); su2021roformer (RoPE commutant).
    """
    G = _qk_group(config)
    return HeadGauge(config, tuple((G,) * config.kv_heads for _ in range(config.n_layers)))


def ov_gauge(config: TransformerConfig, *, orthogonal: bool = False) -> HeadGauge:
    """The (W_V, W_O) gauge: ``GL(d_head)`` per layer and key/value group.

    Args:
        config: the architecture.
        orthogonal: return the orthogonal subgroup ``O(d_head)`` instead.

    Source: singh2026lossbasis, §6 (the OV circuit is ``W_V[h] W_O[h]``).
    """
    G = Orthogonal(config.d_head) if orthogonal else GeneralLinear(config.d_head)
    return HeadGauge(config, tuple((G,) * config.kv_heads for _ in range(config.n_layers)))


def mlp_gauge(config: TransformerConfig) -> MLPGauge:
    """Hidden-unit permutations of every feed-forward map (times positive scalings for ReLU).

    ``relu(x W P D) = relu(x W) P D`` for a permutation ``P`` and positive diagonal ``D``;
    GELU, SiLU and SwiGLU commute only with permutations.
    """
    G = PositiveMonomial(config.d_mlp) if config.act_fn == "relu" else Permutation(config.d_mlp)
    maps = config.num_experts + int(config.shared_expert) if config.num_experts else 1
    return MLPGauge(tuple((G,) * maps for _ in range(config.n_layers)))


def _right(linear: nn.Linear, rows: slice, A: torch.Tensor) -> None:
    """Output rows ``rows`` of ``linear`` hold ``Wᵀ`` of a right factor: ``W ↦ W A``."""
    A = A.to(linear.weight.dtype)
    linear.weight[rows] = A.mT @ linear.weight[rows]
    if linear.bias is not None:
        linear.bias[rows] = linear.bias[rows] @ A


def _left_inverse(linear: nn.Linear, cols: slice, A: torch.Tensor) -> None:
    """Input columns ``cols`` of ``linear`` hold ``Wᵀ`` of a left factor: ``W ↦ A⁻¹ W``."""
    linear.weight[:, cols] = linear.weight[:, cols] @ contragredient(A.to(linear.weight.dtype))


def _apply_mlp(mlp: MLP, A: torch.Tensor) -> None:
    rows = slice(None)
    _right(mlp.fc_in, rows, A)
    if hasattr(mlp, "fc_gate"):
        _right(mlp.fc_gate, rows, A)
    _left_inverse(mlp.fc_out, rows, A)


def apply_gauge(
    model: Transformer, elements: GaugeElements, *, inplace: bool = False
) -> Transformer:
    """Apply gauge elements to a Transformer, rotating every tensor the action touches.

    QK element ``A`` of key/value group ``g``: ``W_Q[h] ↦ W_Q[h] A`` for its query heads and
    ``W_K[g] ↦ W_K[g] A⁻ᵀ`` (``A`` when orthogonal), biases alike, qk-norm gains ``↦ gain·|A|``
    (valid for signed permutations). OV element: ``W_V[g] ↦ W_V[g] A``,
    ``W_O[h] ↦ A⁻¹ W_O[h]``. MLP element: ``W_in ↦ W_in A`` (and ``W_gate``),
    ``W_out ↦ A⁻¹ W_out``.

    Args:
        model: the Transformer.
        elements: :class:`GaugeElements` (shapes as documented there).
        inplace: modify ``model`` itself instead of a deep copy.

    Returns:
        The transformed model (``model`` itself when ``inplace``).

    Raises:
        ValueError: an element has the wrong shape.

    Source: singh2026lossbasis, §6.
    """
    c = model.config
    D = c.d_head
    elements.check_heads(c, "apply_gauge")
    target = model if inplace else copy.deepcopy(model)
    s = c.group_size
    with torch.no_grad():
        for layer, block in enumerate(target.blocks):
            attn = block.attn
            for g in range(c.kv_heads):
                kv = slice(g * D, (g + 1) * D)
                heads = range(g * s, (g + 1) * s)
                if elements.qk is not None:
                    A = elements.qk[layer, g]
                    _right(attn.k_proj, kv, contragredient(A))
                    for h in heads:
                        _right(attn.q_proj, slice(h * D, (h + 1) * D), A)
                    if c.qk_norm:
                        P = A.abs().to(attn.q_norm.dtype)
                        attn.k_norm[g] = attn.k_norm[g] @ P
                        for h in heads:
                            attn.q_norm[h] = attn.q_norm[h] @ P
                if elements.ov is not None:
                    A = elements.ov[layer, g]
                    _right(attn.v_proj, kv, A)
                    for h in heads:
                        _left_inverse(attn.o_proj, slice(h * D, (h + 1) * D), A)
            if elements.mlp is not None:
                maps = _mlp_maps(block.mlp)
                if len(elements.mlp[layer]) != len(maps):
                    raise ValueError(
                        f"apply_gauge: elements.mlp[{layer}] has {len(elements.mlp[layer])} "
                        f"elements; layer {layer} has {len(maps)} feed-forward maps"
                    )
                for mlp, A in zip(maps, elements.mlp[layer], strict=True):
                    _apply_mlp(mlp, A)
    return target


def _mlp_maps(module: nn.Module) -> list[MLP]:
    if isinstance(module, MixtureOfExperts):
        return list(module.experts) + ([module.shared] if module.shared is not None else [])
    return [module]
