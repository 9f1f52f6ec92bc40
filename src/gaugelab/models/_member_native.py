"""The member-native forward of an ensemble of :class:`~gaugelab.models.Transformer` members.

Private; :class:`gaugelab.models.Ensemble` uses it. Every weight carries a leading member
dimension E (or none, when it is a shared frozen weight): a linear layer is one batched matmul
over the members (``torch.bmm`` / ``torch.baddbmm`` of ``[E, N, d_in]`` by ``[E, d_in, d_out]``),
or, for a shared weight, one matmul over every member's tokens; normalizations and the MLP act
on ``[E, B, T, d]``; attention runs on ``[E, B, H, T, D]``, through
``F.scaled_dot_product_attention`` with the member dimension folded into the batch (the same
function per member) or through the same computation in plain ops. Nothing is copied per member
and nothing is stacked at call time, unlike ``vmap(functional_call)``.

The forward is the same function as the E separate models, to round-off (~1e-16 relative in
float64): the kernels differ, a pre-norm RMSNorm's gain is folded into the weights of the
products that read it, and the residual and LoRA adds run inside ``baddbmm``. Members with
equal weights compute bitwise equal outputs and gradients (every member runs the same kernel
on its own slice), which is what the twin protocol's identity twin needs.

Known modules (anything else is left to the ``vmap`` path): ``Transformer`` and its ``Block``,
``Attention``, ``MLP``, ``RMSNorm``, ``nn.LayerNorm``, ``nn.Embedding`` (no ``max_norm``,
``padding_idx``, ``scale_grad_by_freq`` or ``sparse``), ``nn.Identity``, ``Rotary``,
``nn.Linear`` and ``LoRALinear`` without adapter dropout; buffers equal in every member (the
ALiBi slopes; the sinusoidal table may differ). Not known: ``MixtureOfExperts`` (data-dependent
routing), dropout, subclasses of the known modules (their ``forward`` may differ).

Source: the ensemble layout of the twin protocol (singh2026lossbasis, §6); the Transformer of
:mod:`gaugelab.models.transformer` (phuong2022formal §6, vaswani2017attention §3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gaugelab.models._lora_layer import LoRALinear
from gaugelab.models.transformer import (
    MLP,
    Attention,
    Block,
    RMSNorm,
    Rotary,
    Transformer,
    alibi_bias,
    attention_weights,
)

KNOWN = (Transformer, Block, Attention, MLP, RMSNorm, nn.LayerNorm, nn.Embedding, nn.Identity,
         nn.ModuleList, Rotary, nn.Linear, LoRALinear)  # fmt: skip
ATTENTION = ("sdpa", "matmul", "broadcast")
"""How attention is computed: torch's fused kernel (members folded into the batch), the plain
ops with batched matmuls, or the plain ops as broadcast products and sums (no matmul over tiny
``[T, T]`` matrices: the twin protocol's ``T = 3``; under ``torch.compile`` these fuse)."""


BROADCAST_MAX_T = 8
"""Under ``torch.compile``, windows up to this length run attention as broadcast products (they
fuse into one loop; at ``T = 3`` a kernel call per sequence and head costs more than the
arithmetic), longer ones through the fused kernel (measured at ``T = 64``, batch 32: the step
1.4× faster than with the broadcast form, which materializes ``[…, T, T, D]``)."""


def compiled_attention(tokens: torch.Tensor) -> str:
    """The attention mode of a compiled forward on ``tokens`` ``[..., T]`` (see
    :data:`BROADCAST_MAX_T`)."""
    return "broadcast" if tokens.shape[-1] <= BROADCAST_MAX_T else "sdpa"


def unsupported(model: nn.Module) -> str | None:
    """Why ``model`` cannot run member-natively (a sentence), or ``None`` when it can."""
    if type(model) is not Transformer:
        return f"{type(model).__name__} is not a gaugelab Transformer"
    for name, m in model.named_modules():
        if type(m) not in KNOWN:
            return f"submodule {name!r} is a {type(m).__name__}"
        if isinstance(m, LoRALinear) and not isinstance(m.lora_dropout, nn.Identity):
            return f"submodule {name!r} has adapter dropout"
        if isinstance(m, nn.Embedding) and (
            m.max_norm is not None or m.padding_idx is not None or m.scale_grad_by_freq
            or m.sparse
        ):  # fmt: skip
            return f"embedding {name!r} uses max_norm, padding_idx, scale_grad_by_freq or sparse"
    return None


@dataclass
class Weights:
    """An ensemble's tensors by parameter or buffer name: ``stacked`` ``[E, *shape]`` and
    ``shared`` ``[*shape]`` (one tensor for every member)."""

    stacked: Mapping[str, torch.Tensor]
    shared: Mapping[str, torch.Tensor]

    def get(self, name: str) -> tuple[torch.Tensor | None, bool]:
        """``(tensor, has a member dimension)``; ``(None, False)`` for a missing name."""
        if name in self.stacked:
            return self.stacked[name], True
        return self.shared.get(name), False


def _member(t: torch.Tensor, stacked: bool, ndim: int) -> torch.Tensor:
    """A per-member vector/matrix ``t`` shaped to broadcast against ``[E, *, ...]`` of ``ndim``
    dims (its own dims last); a shared one as is."""
    if not stacked:
        return t
    return t.view(t.shape[0], *([1] * (ndim - t.dim())), *t.shape[1:])


def _matmul_t(x: torch.Tensor, w: torch.Tensor, stacked: bool) -> torch.Tensor:
    """``x wᵀ`` for ``x`` ``[E, N, d_in]`` and ``w`` ``[E, d_out, d_in]`` (or shared
    ``[d_out, d_in]``: one matmul over every member's rows)."""
    return torch.bmm(x, w.mT) if stacked else F.linear(x, w)


def _fold(w: torch.Tensor, stacked: bool, gain) -> tuple[torch.Tensor, bool]:
    """``w`` ``[(E,) d_out, d_in]`` with its columns scaled by ``gain = (g, stacked)``
    (``[(E,) d_in]``): ``(x ⊙ g) wᵀ = x (w diag g)ᵀ``, the gain applied to the small weight
    instead of the ``[E, N, d_in]`` activations."""
    if gain is None:
        return w, stacked
    g, g_stacked = gain
    return w * g.unsqueeze(-2), stacked or g_stacked


def linear(
    W: Weights,
    prefix: str,
    x: torch.Tensor,
    lora: LoRALinear | None,
    *,
    gain: tuple[torch.Tensor, bool] | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """``residual + (x ⊙ gain) Wᵀ + b`` for the ``nn.Linear`` (or ``LoRALinear``) at ``prefix``
    on ``x`` ``[E, B, T, d_in]``; ``gain`` (a normalization's, ``[(E,) d_in]``) and
    ``residual`` (``[E, B, T, d_out]``) are optional."""
    E, B, T, _ = x.shape
    flat = x.reshape(E, B * T, x.shape[-1])
    base = f"{prefix}.base_layer" if lora is not None else prefix
    w, w_stacked = _fold(*W.get(f"{base}.weight"), gain)
    b, b_stacked = W.get(f"{base}.bias")
    if w_stacked and residual is not None:  # the residual add inside the product
        y = torch.baddbmm(residual.reshape(E, B * T, -1), flat, w.mT)
    elif w_stacked and b is not None and b_stacked:
        y, b = torch.baddbmm(b.unsqueeze(1), flat, w.mT), None
    else:
        y = _matmul_t(flat, w, w_stacked)
        if residual is not None:
            y = y + residual.reshape(E, B * T, -1)
    if b is not None:
        y = y + _member(b, b_stacked, 3)
    if lora is not None and not lora.merged:
        a, a_stacked = _fold(*W.get(f"{prefix}.lora_A"), gain)
        up, up_stacked = W.get(f"{prefix}.lora_B")
        h = _matmul_t(flat, a, a_stacked)
        if up_stacked and a_stacked:  # y + s·h Bᵀ in one product
            y = torch.baddbmm(y, h, up.mT, alpha=lora.scale)
        else:
            y = y + _matmul_t(h, up, up_stacked) * lora.scale
    return y.view(E, B, T, -1)


def split_norm(W: Weights, prefix: str, module: nn.Module, x: torch.Tensor):
    """``(normalized x, gain)``: an RMSNorm's normalization without its gain, and the gain
    ``(g, stacked)`` for the next products to fold in (:func:`linear`); any other norm applied
    whole, gain ``None``."""
    if isinstance(module, RMSNorm):
        return F.rms_norm(x, (x.shape[-1],), None, module.eps), W.get(f"{prefix}.weight")
    return norm(W, prefix, module, x), None


def norm(W: Weights, prefix: str, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The normalization ``module`` (RMSNorm, LayerNorm or Identity) at ``prefix`` on
    ``[E, ..., d]``."""
    if isinstance(module, nn.Identity):
        return x
    d = (x.shape[-1],)
    g, g_stacked = W.get(f"{prefix}.weight")
    if isinstance(module, RMSNorm):
        if not g_stacked:
            return F.rms_norm(x, d, g, module.eps)
        return F.rms_norm(x, d, None, module.eps) * _member(g, True, x.dim())
    b, b_stacked = W.get(f"{prefix}.bias")
    if not (g_stacked or b_stacked):
        return F.layer_norm(x, d, g, b, module.eps)
    y = F.layer_norm(x, d, None, None, module.eps)
    y = y if g is None else y * _member(g, g_stacked, x.dim())
    return y if b is None else y + _member(b, b_stacked, x.dim())


def _head_gain(W: Weights, name: str, x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-head RMSNorm of ``x`` ``[E, B, n, T, D]`` with gains ``[E, n, D]`` (or ``[n, D]``)."""
    g, stacked = W.get(name)
    gain = g.unsqueeze(-2)  # [(E,) n, 1, D]
    gain = gain.unsqueeze(1) if stacked else gain  # [E, 1, n, 1, D]
    return F.rms_norm(x, (x.shape[-1],), None, eps) * gain


class NativeTransformer:
    """The member-native forward of ensembles of one :class:`Transformer` layout.

    Args:
        template: a member (any device, ``meta`` included): its configuration, module types and
            LoRA layers (their ``scale`` and ``merged`` state are read at every call).
        alibi_slopes: the members' common ALiBi slopes ``[H]`` (float64), when positional is
            ``alibi``.
    """

    def __init__(self, template: Transformer, alibi_slopes: torch.Tensor | None = None) -> None:
        reason = unsupported(template)
        if reason is not None:
            known = ", ".join(t.__name__ for t in KNOWN)
            raise ValueError(f"NativeTransformer: {reason}; allowed: a Transformer of {known}")
        self.config = template.config
        self.template = template
        self.loras = {n: m for n, m in template.named_modules() if isinstance(m, LoRALinear)}
        self.alibi_slopes = alibi_slopes

    def _attention(self, W: Weights, i: int, x, mode: str, gain=None, residual=None):
        """``residual + attention(x ⊙ gain)`` of block ``i`` on ``x`` ``[E, B, T, d]``."""
        c, p = self.config, f"blocks.{i}.attn"
        E, B, T, _ = x.shape
        H, G, D = c.n_heads, c.kv_heads, c.d_head

        def heads(name: str, n: int) -> torch.Tensor:  # [E, B, n, T, D]
            y = linear(W, f"{p}.{name}", x, self.loras.get(f"{p}.{name}"), gain=gain)
            return y.view(E, B, T, n, D).transpose(2, 3)

        q, k, v = heads("q_proj", H), heads("k_proj", G), heads("v_proj", G)
        if c.qk_norm:
            q = _head_gain(W, f"{p}.q_norm", q, c.norm_eps)
            k = _head_gain(W, f"{p}.k_norm", k, c.norm_eps)
        rotary = self.template.blocks[i].attn.rotary
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        if c.group_size > 1:
            k = k.repeat_interleave(c.group_size, dim=2)  # [E, B, H, T, D]
            v = v.repeat_interleave(c.group_size, dim=2)
        bias = None
        if c.positional == "alibi":
            bias = alibi_bias(self.alibi_slopes.to(device=x.device, dtype=x.dtype), T, c.causal)
        causal = c.causal and bias is None
        if mode == "sdpa":  # members folded into the batch: [E·B, H, T, D], a view
            z = F.scaled_dot_product_attention(
                q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), attn_mask=bias,
                is_causal=causal, scale=D**-0.5,
            ).view(E, B, H, T, D)  # fmt: skip
        else:
            broadcast = mode == "broadcast"
            w = attention_weights(q, k, causal=causal, bias=bias, broadcast=broadcast)
            z = (w.unsqueeze(-1) * v.unsqueeze(-3)).sum(-2) if broadcast else w @ v
        z = z.transpose(2, 3).reshape(E, B, T, H * D)
        return linear(W, f"{p}.o_proj", z, self.loras.get(f"{p}.o_proj"), residual=residual)

    def _mlp(self, W: Weights, i: int, x, gain=None, residual=None):
        """``residual + MLP(x ⊙ gain)`` of block ``i`` on ``x`` ``[E, B, T, d]``."""
        p = f"blocks.{i}.mlp"

        def lin(name: str, h: torch.Tensor, **kwargs) -> torch.Tensor:
            return linear(W, f"{p}.{name}", h, self.loras.get(f"{p}.{name}"), **kwargs)

        act = self.config.act_fn
        h = lin("fc_in", x, gain=gain)
        if act == "swiglu":
            h = F.silu(lin("fc_gate", x, gain=gain)) * h
        else:
            h = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[act](h)
        return lin("fc_out", h, residual=residual)

    def forward(
        self, W: Weights, tokens: torch.Tensor, n_members: int, attention: str
    ) -> torch.Tensor:
        """Logits ``[E, B, T, d_vocab_out]`` of every member.

        Args:
            W: the ensemble's parameters and buffers.
            tokens: ``[B, T]`` (every member's) or ``[E, B, T]`` (one batch per member), long;
                validated by the caller.
            n_members: E.
            attention: one of :data:`ATTENTION`.
        """
        c, E = self.config, n_members
        emb, emb_stacked = W.get("embed.weight")
        if emb_stacked:  # member e reads rows e·V … e·V + V − 1 of the stacked table
            V = emb.shape[1]
            offset = torch.arange(E, device=tokens.device).view(E, 1, 1)
            x = F.embedding(tokens + offset * V, emb.reshape(E * V, -1))  # [E, B, T, d]
        else:
            x = F.embedding(tokens, emb)
        if tokens.dim() == 2:  # one batch for every member
            x = x.expand(E, *tokens.shape, c.d_model) if not emb_stacked else x
        T = tokens.shape[-1]
        if c.positional in ("learned", "sinusoidal"):
            pos, pos_stacked = W.get("W_pos")
            pos = pos[:, :T] if pos_stacked else pos[:T]
            x = x + _member(pos.to(x.dtype), pos_stacked, 4)
        for i, block in enumerate(self.template.blocks):
            if block.pre:  # the RMSNorm gains fold into the products that read them
                if x.stride(0) == 0:  # the residual must own its storage per member
                    x = x.contiguous()
                h, gain = split_norm(W, f"blocks.{i}.ln1", block.ln1, x)
                x = self._attention(W, i, h, attention, gain=gain, residual=x)
                h, gain = split_norm(W, f"blocks.{i}.ln2", block.ln2, x)
                x = self._mlp(W, i, h, gain=gain, residual=x)
            else:
                x = norm(W, f"blocks.{i}.ln1", block.ln1, x + self._attention(W, i, x, attention))
                x = norm(W, f"blocks.{i}.ln2", block.ln2, x + self._mlp(W, i, x))
        gain = None
        if self.template.ln_final is not None:
            x, gain = split_norm(W, "ln_final", self.template.ln_final, x)
        B = x.shape[1]
        flat = x.reshape(E, B * T, c.d_model)
        if c.tie_embeddings:
            logits = _matmul_t(flat, *_fold(emb, emb_stacked, gain))
        else:  # x W_U = x (W_Uᵀ)ᵀ: the gain scales the columns of W_Uᵀ [(E,) V, d]
            u, u_stacked = W.get("W_U")
            logits = _matmul_t(flat, *_fold(u.mT, u_stacked, gain))
        bias, bias_stacked = W.get("b_U")
        if bias is not None:
            logits = logits + _member(bias, bias_stacked, 3)
        return logits.view(E, B, T, -1)
