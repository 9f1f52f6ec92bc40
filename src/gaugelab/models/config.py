"""``TransformerConfig``: the architecture of a decoder-only Transformer, validated on construction.

Field names follow the TransformerLens vocabulary so interpretability users feel at home.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TransformerConfig(BaseModel):
    """Architecture of a decoder-only Transformer (immutable; bad combinations raise ValueError).

    Defaults are the docs/protocols.md §5 twin model (2 pre-norm RMSNorm blocks, 4 heads of
    width 16, d_model 64, a SiLU MLP of width 256, learned positions, bias-free) except that the
    causal mask is on, as a decoder-only language model has it; the twin protocol turns it off.

    Source: the decoder-only Transformer of phuong2022formal §6 and vaswani2017attention §3, with
    the positional mechanisms of press2021train (ALiBi) and su2021roformer (RoPE), grouped-query
    attention (ainslie2023gqa) and sparse MoE routing (shazeer2017outrageously).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_layers: int = Field(2, ge=1, description="Number of decoder blocks L.")
    d_model: int = Field(64, ge=1, description="Residual-stream width d.")
    n_heads: int = Field(4, ge=1, description="Query heads per layer H.")
    d_head: int = Field(16, ge=1, description="Query/key/value width of one head d_h.")
    n_key_value_heads: int | None = Field(
        None, ge=1, description="Key/value heads (grouped-query attention); None = n_heads."
    )
    d_mlp: int = Field(256, ge=1, description="Hidden width of the feed-forward sublayer.")
    d_vocab: int = Field(48, ge=1, description="Input vocabulary size.")
    d_vocab_out: int | None = Field(None, ge=1, description="Output classes; None = d_vocab.")
    n_ctx: int = Field(3, ge=1, description="Maximum sequence length T.")
    act_fn: Literal["relu", "gelu", "silu", "swiglu"] = Field(
        "silu", description="MLP nonlinearity; swiglu = silu(x W_gate) ⊙ (x W_in)."
    )
    normalization: Literal["none", "layernorm", "rmsnorm"] = Field(
        "rmsnorm", description="Normalization operator of the blocks and the final norm."
    )
    norm_eps: float = Field(1e-6, ge=0, description="Stabiliser inside the square root.")
    norm_placement: Literal["pre", "post"] = Field(
        "pre", description="pre: x + F(N(x)) and a final norm; post: N(x + F(x))."
    )
    positional: Literal["none", "learned", "sinusoidal", "rope", "alibi"] = Field(
        "learned", description="Positional mechanism."
    )
    rope_pairing: Literal["halves", "adjacent"] = Field(
        "halves", description="RoPE planes: (i, i + d_head/2) or (2i, 2i + 1)."
    )
    rope_base: float = Field(10000.0, gt=1, description="RoPE frequency base.")
    causal: bool = Field(True, description="Apply the causal mask (Definition 8).")
    attn_bias: bool = Field(False, description="Biases on the Q/K/V/O projections.")
    mlp_bias: bool = Field(False, description="Biases on the MLP projections.")
    qk_norm: bool = Field(
        False, description="RMSNorm on each head's queries and keys, with per-head gains."
    )
    tie_embeddings: bool = Field(False, description="Unembedding = token embedding transposed.")
    unembed_bias: bool = Field(False, description="Bias b_U on the output logits.")
    num_experts: int = Field(0, ge=0, description="Routed experts per MoE layer; 0 = dense MLP.")
    experts_per_token: int = Field(1, ge=1, description="Top-k experts evaluated per token.")
    shared_expert: bool = Field(False, description="An always-on expert beside the routed ones.")
    init_std: float | None = Field(
        0.02,
        gt=0,
        description="Std of the normal init of every weight (biases 0, gains 1); None = "
        "torch's default layer init.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TransformerConfig:
        problems = []
        if self.n_heads % self.kv_heads != 0:
            problems.append(
                f"n_heads={self.n_heads} is not a multiple of n_key_value_heads={self.kv_heads}"
            )
        if self.positional == "rope" and self.d_head % 2:
            problems.append(f"positional='rope' needs an even d_head; got d_head={self.d_head}")
        if self.tie_embeddings and self.vocab_out != self.d_vocab:
            problems.append(
                f"tie_embeddings=True needs d_vocab_out == d_vocab; got {self.vocab_out} "
                f"and {self.d_vocab}"
            )
        if self.num_experts and self.experts_per_token > self.num_experts:
            problems.append(
                f"experts_per_token={self.experts_per_token} exceeds num_experts={self.num_experts}"
            )
        if self.shared_expert and not self.num_experts:
            problems.append("shared_expert=True needs num_experts >= 1")
        if self.normalization == "none" and self.norm_placement == "post":
            problems.append("norm_placement='post' needs a normalization (got 'none')")
        if problems:
            raise ValueError("TransformerConfig: " + "; ".join(problems))
        return self

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (``n_key_value_heads`` or ``n_heads``)."""
        return self.n_key_value_heads or self.n_heads

    @property
    def vocab_out(self) -> int:
        """Number of output classes (``d_vocab_out`` or ``d_vocab``)."""
        return self.d_vocab_out or self.d_vocab

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.kv_heads

    def rope_planes(self) -> tuple[tuple[int, int], ...]:
        """The coordinate planes RoPE rotates within one head, in frequency order."""
        half = self.d_head // 2
        if self.rope_pairing == "halves":
            return tuple((i, i + half) for i in range(half))
        return tuple((2 * i, 2 * i + 1) for i in range(half))
