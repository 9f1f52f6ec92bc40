"""The twin triplet of a Hugging Face causal LM: the same twins as gaugelab's own Transformer
(:mod:`gaugelab.equivariance.twins`), built on the module's own weights.

The gauge twin moves every head's ``(W_Q, W_K)`` by an element of the orthogonal part of the
architecture's derived QK gauge (:func:`gaugelab.models.hf_symmetry.hf_head_gauge` with
``orthogonal=True``: ``O(d_head)`` without RoPE, drawn as the reference scripts draw it; the
rotary torus with RoPE, in ``rotate_half``'s pairing; torus ⊕ ``O`` with partial rotary); the
identity twin applies the identity element (bit for bit the base); the noise twin adds
``scale · randn`` to the query rows and then the key rows of every layer. The members are
:class:`gaugelab.models.hf.CausalLMLogits` modules, and the QK/OV invariants the engine
measures are read from their stacked parameters (:func:`hf_invariants`).

Source: singh2026lossbasis, §6 (twin protocol); docs/protocols.md §5.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch

from gaugelab.equivariance.twins import (
    GaugeDraw,
    Invariants,
    TwinKind,
    _check_draw,
    gauge_elements,
)
from gaugelab.models.heads import ov_product, qk_product
from gaugelab.models.hf import CausalLMLogits
from gaugelab.models.hf_symmetry import (
    HFAttention,
    apply_hf_gauge,
    hf_head_gauge,
    hf_head_weights,
)
from gaugelab.models.symmetry import GaugeElements

__all__ = ["hf_invariants", "make_hf_twins", "perturb_hf_qk"]

_PREFIX = "model."  # CausalLMLogits holds the transformers module as .model


def hf_invariants(layout: HFAttention) -> Invariants:
    """``params → (qk, ov)``: every head's ``W_Q[h] W_K[kv(h)]ᵀ`` and ``W_V[kv(h)] W_O[h]``,
    ``[*, L, H, d_model, d_model]``, from :class:`CausalLMLogits` parameters by name.

    Source: singh2026lossbasis, §6 (the QK and OV invariants of a head).
    """

    def invariants(params: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        W = hf_head_weights(params, layout, prefix=_PREFIX)
        s = layout.group_size
        return qk_product(W.W_Q, W.W_K, s), ov_product(W.W_V, W.W_O, s)

    return invariants


def perturb_hf_qk(
    model: CausalLMLogits,
    layout: HFAttention,
    *,
    seed: int,
    scale: float,
    draw: GaugeDraw = "reference",
) -> None:
    """The noise twin's perturbation, in place: ``W_Q, W_K += scale · randn``, layer by layer.

    One generator seeded ``seed`` draws, layer by layer, the query rows' noise
    ``[n_heads·d_head, d_model]`` and then the key rows' ``[n_kv_heads·d_head, d_model]`` (head
    by head in the ``[out, in]`` layout, as :func:`gaugelab.equivariance.twins.perturb_qk`
    draws for ``q_proj`` and ``k_proj``); ``draw="reference"`` draws in float32, ``"haar"`` in
    float64.

    Raises:
        ValueError: an unknown ``draw``.

    Source: singh2026lossbasis, §6 (the noise twin).
    """
    _check_draw(draw)
    noise_dtype = torch.float32 if draw == "reference" else torch.float64
    generator = torch.Generator().manual_seed(seed)
    D = layout.d_head
    with torch.no_grad():
        for path in layout.paths:
            attn = model.model.get_submodule(path)
            for role, n in (("W_Q", layout.n_heads), ("W_K", layout.kv_heads)):
                name, conv1d, start = layout.projection(role)
                weight = attn.get_submodule(name).weight
                W = weight.mT if conv1d else weight  # [out, in]
                shape = (n * D, W.shape[1])
                noise = torch.randn(shape, generator=generator, dtype=noise_dtype)
                noise = scale * noise.to(W.dtype)
                for h in range(n):
                    W[start(h) : start(h) + D] += noise[h * D : (h + 1) * D]


def make_hf_twins(
    base: CausalLMLogits,
    layout: HFAttention,
    kinds: Sequence[TwinKind],
    *,
    gauge_seed: int,
    noise_seed: int,
    noise_scale: float,
    gauge_draw: GaugeDraw = "reference",
) -> tuple[list[CausalLMLogits], list[str]]:
    """The base model and its twins, base first, and their names (as
    :func:`gaugelab.equivariance.twins.make_twins`).

    Args:
        base: the model; its parameters' dtype is the twins'.
        layout: its :class:`~gaugelab.models.hf_symmetry.HFAttention`.
        kinds: the twins to build, e.g. ``("gauge", "identity", "noise")``.
        gauge_seed: seeds the gauge draw (one element per layer and key/value group).
        noise_seed, noise_scale: the noise twin (:func:`perturb_hf_qk`).
        gauge_draw: ``"reference"`` or ``"haar"``
            (:func:`gaugelab.equivariance.twins.gauge_elements`).

    Raises:
        ValueError: an unknown ``gauge_draw``.

    Source: singh2026lossbasis, §6; docs/protocols.md §5.
    """
    _check_draw(gauge_draw)
    dtype = next(base.parameters()).dtype
    gauge = hf_head_gauge(layout, orthogonal=True)
    members, names = [base], ["base"]
    for kind in kinds:
        twin = copy.deepcopy(base)
        if kind == "gauge":
            A = gauge_elements(layout, seed=gauge_seed, dtype=dtype, draw=gauge_draw, gauge=gauge)
            apply_hf_gauge(twin.model, layout, GaugeElements(qk=A), inplace=True)
        elif kind == "identity":
            identity = GaugeElements(qk=gauge.identity(dtype))
            apply_hf_gauge(twin.model, layout, identity, inplace=True)
        else:
            perturb_hf_qk(twin, layout, seed=noise_seed, scale=noise_scale, draw=gauge_draw)
        members.append(twin)
        names.append(kind)
    return members, names
