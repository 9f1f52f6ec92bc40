"""A configurable decoder-only Transformer, one component per definition, top to bottom.

Layout conventions (TransformerLens): per-head weights multiply on the right (``q = x W_Q[h]``);
inside an ``nn.Linear`` (weight ``[out, in]``) head ``h`` is rows ``h·d_head:(h+1)·d_head``.
Shape comments use B batch, T positions, H query heads, G key/value heads, D d_head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gaugelab.models.config import TransformerConfig
from gaugelab.models.heads import Role, head_weight, ov_product, qk_product
from gaugelab.models.positions import Rotary, alibi_bias, alibi_slopes, sinusoidal_positions

# --- Normalization (Definitions 17 and 19) -------------------------------------------------


class RMSNorm(nn.Module):
    """``γ ⊙ z / √(mean(z²) + ε)`` over the last dim. Source: zhang2019root, eq. (4)."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def make_norm(config: TransformerConfig, d: int) -> nn.Module:
    """The configured normalization operator on width ``d`` (LayerNorm is ``nn.LayerNorm``)."""
    if config.normalization == "layernorm":
        return nn.LayerNorm(d, eps=config.norm_eps)
    if config.normalization == "rmsnorm":
        return RMSNorm(d, config.norm_eps)
    return nn.Identity()


# --- Positions (Definition 3, Remark 4) -----------------------------------------------------


# --- Attention (Definitions 5, 6, 8, 10; Remark 11) ----------------------------------------


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    causal: bool,
    bias: torch.Tensor | None = None,
    broadcast: bool = False,
) -> torch.Tensor:
    """``softmax(q kᵀ/√D + M + bias)`` for ``q`` ``[..., Tq, D]``, ``k`` ``[..., Tk, D]``.

    Returns ``[..., Tq, Tk]``; with ``causal`` the future keys get weight exactly 0. With
    ``broadcast`` the scores are a broadcast product summed over D instead of a batched matmul
    (the same values up to summation order; see :attr:`Attention.broadcast_scores`).
    Source: vaswani2017attention, eq. (1) and §3.2.3.
    """
    if broadcast:
        scores = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) / math.sqrt(q.shape[-1])
    else:
        scores = q @ k.mT / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    if causal:
        Tq, Tk = scores.shape[-2:]
        future = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1)


class Attention(nn.Module):
    """Multi-head (or grouped-query) self-attention with W_O.

    Projections ``q_proj [H·D, d]``, ``k_proj``/``v_proj`` ``[G·D, d]``, ``o_proj [d, H·D]``;
    query head ``h`` reads key/value head ``h // (H/G)``. Optional per-head qk-norm gains
    ``q_norm [H, D]``, ``k_norm [G, D]`` (RMSNorm over each head's vector).
    """

    use_sdpa = True
    # Plain-ops path only: products and sums instead of [B·H, T, T] batched matmuls. Under
    # torch.compile these fuse into one loop, while a batched matmul over many tiny matrices
    # (T = 3 in the twin protocol) is dominated by per-matrix overhead.
    broadcast_scores = False

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        H, G, D = c.n_heads, c.kv_heads, c.d_head
        self.q_proj = nn.Linear(c.d_model, H * D, bias=c.attn_bias)
        self.k_proj = nn.Linear(c.d_model, G * D, bias=c.attn_bias)
        self.v_proj = nn.Linear(c.d_model, G * D, bias=c.attn_bias)
        self.o_proj = nn.Linear(H * D, c.d_model, bias=c.attn_bias)
        if c.qk_norm:
            self.q_norm = nn.Parameter(torch.ones(H, D))
            self.k_norm = nn.Parameter(torch.ones(G, D))
        self.rotary = Rotary(c) if c.positional == "rope" else None
        if c.positional == "alibi":
            self.register_buffer("slopes", alibi_slopes(H), persistent=False)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.config.d_head).transpose(1, 2)  # [B, n, T, D]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        B, T, _ = x.shape
        q = self._heads(self.q_proj(x), c.n_heads)  # [B, H, T, D]
        k = self._heads(self.k_proj(x), c.kv_heads)  # [B, G, T, D]
        v = self._heads(self.v_proj(x), c.kv_heads)  # [B, G, T, D]
        if c.qk_norm:
            q = F.rms_norm(q, (c.d_head,), None, c.norm_eps) * self.q_norm.unsqueeze(1)
            k = F.rms_norm(k, (c.d_head,), None, c.norm_eps) * self.k_norm.unsqueeze(1)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        if c.group_size > 1:
            k = k.repeat_interleave(c.group_size, dim=1)  # [B, H, T, D]
            v = v.repeat_interleave(c.group_size, dim=1)
        bias = alibi_bias(self.slopes.to(x.dtype), T, c.causal) if c.positional == "alibi" else None
        if self.use_sdpa:
            z = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, is_causal=c.causal and bias is None, scale=c.d_head**-0.5
            )  # [B, H, T, D]
        else:  # the same computation in plain ops, which vmap batches (SDPA has no batching rule)
            w = attention_weights(q, k, causal=c.causal and bias is None, bias=bias,
                                  broadcast=self.broadcast_scores)  # fmt: skip
            if self.broadcast_scores:
                z = (w.unsqueeze(-1) * v.unsqueeze(-3)).sum(-2)
            else:
                z = w @ v
        return self.o_proj(z.transpose(1, 2).reshape(B, T, c.n_heads * c.d_head))


# --- Feed-forward and mixture of experts (Definitions 12, 13) ------------------------------


class MLP(nn.Module):
    """``φ(x W_in + b_in) W_out + b_out``; swiglu: ``(silu(x W_gate) ⊙ x W_in) W_out``."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config
        self.act_fn = c.act_fn
        self.fc_in = nn.Linear(c.d_model, c.d_mlp, bias=c.mlp_bias)
        if c.act_fn == "swiglu":
            self.fc_gate = nn.Linear(c.d_model, c.d_mlp, bias=c.mlp_bias)
        self.fc_out = nn.Linear(c.d_mlp, c.d_model, bias=c.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc_in(x)
        if self.act_fn == "swiglu":
            h = F.silu(self.fc_gate(x)) * h
        else:
            h = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[self.act_fn](h)
        return self.fc_out(h)


def top_k_experts(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices ``[N, k]`` of the ``k`` largest scores per row, ties broken by lower index."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]


class MixtureOfExperts(nn.Module):
    """Sparse top-k MoE: ``Σ_{j ∈ S_k(z)} softmax_{S_k}(g(z))_j F_j(z)`` (+ a shared expert).

    Only the selected experts run on each token. Source: Definition 13 (shazeer2017outrageously).
    """

    vmap_compatible = False  # routing is data-dependent: ensembles loop over members

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.k = config.experts_per_token
        self.router = nn.Linear(config.d_model, config.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(config) for _ in range(config.num_experts))
        self.shared = MLP(config) if config.shared_expert else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # [N, d]
        scores = self.router(flat)  # [N, J]
        chosen = top_k_experts(scores, self.k)  # [N, k]
        alpha = torch.softmax(scores.gather(-1, chosen), dim=-1)  # [N, k]
        out = torch.zeros_like(flat)
        for j, expert in enumerate(self.experts):
            rows, slot = (chosen == j).nonzero(as_tuple=True)
            if rows.numel():
                out = out.index_add(0, rows, alpha[rows, slot, None] * expert(flat[rows]))
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view_as(x)


# --- Blocks and the model (Definitions 16, 18, 21) -----------------------------------------


class Block(nn.Module):
    """One decoder layer: attention and MLP sublayers with residuals, pre- or post-norm."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.pre = config.norm_placement == "pre"
        self.ln1 = make_norm(config, config.d_model)
        self.attn = Attention(config)
        self.ln2 = make_norm(config, config.d_model)
        self.mlp = MixtureOfExperts(config) if config.num_experts else MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class Transformer(nn.Module):
    """Decoder-only Transformer: tokens ``[B, T]`` (long) → logits ``[B, T, d_vocab_out]``.

    Args:
        config: the architecture.
        seed: seeds the initialisation (through a private RNG; global state is untouched).
        dtype: parameter dtype (float32 or float64).

    Raises:
        ValueError: (from ``forward``) tokens outside the vocabulary or longer than ``n_ctx``.

    Source: phuong2022formal, §6 (decoder-only Transformer); vaswani2017attention, §3.
    """

    def __init__(
        self, config: TransformerConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        c = self.config = config
        self.check_inputs = True  # an ensemble validates once, outside vmap
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(c.d_vocab, c.d_model)
            if c.positional == "learned":
                self.W_pos = nn.Parameter(0.02 * torch.randn(c.n_ctx, c.d_model))
            elif c.positional == "sinusoidal":
                self.register_buffer("W_pos", sinusoidal_positions(c.n_ctx, c.d_model))
            self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
            self.ln_final = make_norm(c, c.d_model) if c.norm_placement == "pre" else None
            if not c.tie_embeddings:
                # drawn as nn.Linear(d_model, vocab_out) draws its [out, in] weight, then stored
                # transposed: the same seed gives the same head as a plain nn.Linear model
                bound = 1 / math.sqrt(c.d_model)
                drawn = torch.empty(c.vocab_out, c.d_model).uniform_(-bound, bound)
                self.W_U = nn.Parameter(drawn.T.contiguous())
            self.b_U = nn.Parameter(torch.zeros(c.vocab_out)) if c.unembed_bias else None
        if c.init_std is not None:
            self._init_normal(c.init_std, seed)
        self.to(dtype)

    def _init_normal(self, std: float, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                if leaf in ("bias", "b_U"):
                    p.zero_()
                elif p.dim() == 1 or leaf in ("q_norm", "k_norm"):  # normalization gains
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    @property
    def W_E(self) -> torch.Tensor:
        """Token embedding ``[d_vocab, d_model]``."""
        return self.embed.weight

    def unembed_matrix(self) -> torch.Tensor:
        """``[d_model, d_vocab_out]`` (the embedding transposed when tied)."""
        return self.embed.weight.T if self.config.tie_embeddings else self.W_U

    def validate_inputs(self, tokens: torch.Tensor, *, leading: int = 0) -> None:
        """Check ``tokens`` ``[*leading, batch, pos]`` against the vocabulary and ``n_ctx``.

        Raises:
            ValueError: wrong rank, ``pos > n_ctx``, or an id outside ``[0, d_vocab)``.
        """
        c = self.config
        if tokens.dim() != 2 + leading or tokens.shape[-1] > c.n_ctx:
            raise ValueError(
                f"Transformer: tokens shape {tuple(tokens.shape)}; allowed: [batch, pos] with "
                f"pos <= n_ctx={c.n_ctx}"
            )
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= c.d_vocab):
            bad = int(tokens.min()) if int(tokens.min()) < 0 else int(tokens.max())
            raise ValueError(
                f"Transformer: token id {bad} is outside the vocabulary; allowed: ids in "
                f"[0, {c.d_vocab}) (d_vocab={c.d_vocab})"
            )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        c = self.config
        if self.check_inputs:
            self.validate_inputs(tokens)
        x = self.embed(tokens)  # [B, T, d]
        if c.positional in ("learned", "sinusoidal"):
            x = x + self.W_pos[: tokens.shape[1]].to(x.dtype)
        for block in self.blocks:
            x = block(x)
        if self.ln_final is not None:
            x = self.ln_final(x)
        logits = x @ self.unembed_matrix()  # [B, T, V]
        return logits if self.b_U is None else logits + self.b_U

    # --- per-head views (TransformerLens layout; gaugelab.models.heads) ---

    def _head(self, role: Role) -> torch.Tensor:
        return head_weight(dict(self.named_parameters()), self.config, role)

    @property
    def W_Q(self) -> torch.Tensor:
        """``[n_layers, n_heads, d_model, d_head]``."""
        return self._head("W_Q")

    @property
    def W_K(self) -> torch.Tensor:
        """``[n_layers, n_key_value_heads, d_model, d_head]``."""
        return self._head("W_K")

    @property
    def W_V(self) -> torch.Tensor:
        """``[n_layers, n_key_value_heads, d_model, d_head]``."""
        return self._head("W_V")

    @property
    def W_O(self) -> torch.Tensor:
        """``[n_layers, n_heads, d_head, d_model]``."""
        return self._head("W_O")

    def kv_head(self, h: int) -> int:
        """The key/value head read by query head ``h``."""
        return h // self.config.group_size

    def qk_invariant(self, layer: int) -> torch.Tensor:
        """``W_Q[h] W_K[kv(h)]ᵀ`` for every head of ``layer``: ``[n_heads, d_model, d_model]``.

        All layers at once, or an ensemble's: :func:`gaugelab.models.heads.qk_invariants`.
        """
        return qk_product(self.W_Q[layer], self.W_K[layer], self.config.group_size)

    def ov_invariant(self, layer: int) -> torch.Tensor:
        """``W_V[kv(h)] W_O[h]`` for every head of ``layer``: ``[n_heads, d_model, d_model]``.

        All layers at once, or an ensemble's: :func:`gaugelab.models.heads.ov_invariants`.
        """
        return ov_product(self.W_V[layer], self.W_O[layer], self.config.group_size)
