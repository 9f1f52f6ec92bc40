"""Tests for gaugelab.models.transformer: every component against its definition computed by hand
(Definitions 2–21 of the decoder-only Transformer seed), the worked Examples 7 and 9, the per-head
views, and shapes for every configuration option."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.transformer import (
    MLP,
    Attention,
    Block,
    MixtureOfExperts,
    RMSNorm,
    Rotary,
    alibi_bias,
    alibi_slopes,
    attention_weights,
    make_norm,
    sinusoidal_positions,
    top_k_experts,
)

F64 = torch.float64
TOL = dict(rtol=1e-12, atol=1e-12)
SMALL = dict(n_layers=2, d_model=16, d_head=4, n_heads=4, d_mlp=8, n_ctx=5, d_vocab=11)


@pytest.fixture(autouse=True, scope="module")
def _one_intra_op_thread():
    """The tensors here are tiny: extra intra-op threads only add contention (restored after)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def config(**overrides) -> TransformerConfig:
    return TransformerConfig(**{**SMALL, **overrides})


def randomize(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter (gains and biases included) drawn at random: nothing is accidentally 0/1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype) + (p.dim() == 1))
    return module


def model64(seed: int = 0, **overrides) -> Transformer:
    return randomize(Transformer(config(**overrides), seed=seed, dtype=F64), seed + 100)


def tokens_for(c: TransformerConfig, batch: int = 3, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, c.d_vocab, (batch, c.n_ctx), generator=gen)


# --- hand computations, straight from the definitions ----------------------------------------


def rms_by_hand(z, gain, eps):
    # Definition 19: γ ⊙ z / √(d⁻¹ Σ z_i² + ε)
    return gain * z / torch.sqrt((z**2).mean(-1, keepdim=True) + eps)


def layernorm_by_hand(z, gain, shift, eps):
    # Definition 17: γ ⊙ (z − μ) / √(σ² + ε) + β with the biased variance σ² = d⁻¹ Σ (z_i − μ)²
    mu = z.mean(-1, keepdim=True)
    var = ((z - mu) ** 2).mean(-1, keepdim=True)
    return gain * (z - mu) / torch.sqrt(var + eps) + shift


def norm_by_hand(norm, z):
    if isinstance(norm, RMSNorm):
        return rms_by_hand(z, norm.weight, norm.eps)
    if isinstance(norm, nn.LayerNorm):
        return layernorm_by_hand(z, norm.weight, norm.bias, norm.eps)
    assert isinstance(norm, nn.Identity)
    return z


def head_rows(linear: nn.Linear, h: int, D: int):
    """Head h of an nn.Linear as (W [in, D], b [D] or 0): rows h·D:(h+1)·D of the weight."""
    W = linear.weight[h * D : (h + 1) * D].T
    b = 0.0 if linear.bias is None else linear.bias[h * D : (h + 1) * D]
    return W, b


def attention_by_hand(attn: Attention, x):
    """Definitions 5, 6, 8, 10 head by head; query head h reads key/value head h // group."""
    c = attn.config
    D, T = c.d_head, x.shape[-2]
    out = 0.0 if attn.o_proj.bias is None else attn.o_proj.bias
    for h in range(c.n_heads):
        g = h // c.group_size
        Wq, bq = head_rows(attn.q_proj, h, D)
        Wk, bk = head_rows(attn.k_proj, g, D)
        Wv, bv = head_rows(attn.v_proj, g, D)
        q, k, v = x @ Wq + bq, x @ Wk + bk, x @ Wv + bv  # [B, T, D]
        if c.qk_norm:
            q = rms_by_hand(q, attn.q_norm[h], c.norm_eps)
            k = rms_by_hand(k, attn.k_norm[g], c.norm_eps)
        if c.positional == "rope":
            q, k = attn.rotary(q), attn.rotary(k)
        bias = None
        if c.positional == "alibi":
            bias = alibi_bias(alibi_slopes(c.n_heads).to(x.dtype), T, c.causal)[h]
        z = attention_weights(q, k, causal=c.causal, bias=bias) @ v  # [B, T, D]
        out = out + z @ attn.o_proj.weight[:, h * D : (h + 1) * D].T  # Z_h W_O[h]
    return out


def activation_by_hand(name, a):
    if name == "relu":
        return torch.where(a > 0, a, torch.zeros_like(a))
    if name == "gelu":
        return 0.5 * a * (1 + torch.erf(a / math.sqrt(2)))
    return a / (1 + torch.exp(-a))  # silu


def dense_mlp_by_hand(mlp: MLP, z):
    # Definition 12: φ(z W₁ + b₁) W₂ + b₂
    # swiglu: (silu(z W_gate + b_gate) ⊙ (z W_in + b_in)) W₂ + b₂
    def affine(lin, u):
        return u @ lin.weight.T + (0.0 if lin.bias is None else lin.bias)

    if mlp.act_fn == "swiglu":
        hidden = activation_by_hand("silu", affine(mlp.fc_gate, z)) * affine(mlp.fc_in, z)
    else:
        hidden = activation_by_hand(mlp.act_fn, affine(mlp.fc_in, z))
    return affine(mlp.fc_out, hidden)


def moe_by_hand(moe: MixtureOfExperts, x):
    # Definition 13: Σ_{j ∈ S_k(z)} exp g_j / Σ_{i ∈ S_k} exp g_i · F_j(z), plus the shared expert
    flat = x.reshape(-1, x.shape[-1])
    rows = []
    for z in flat:
        g = (moe.router.weight @ z).tolist()
        chosen = sorted(range(len(g)), key=lambda j: (-g[j], j))[: moe.k]
        total = sum(math.exp(g[i]) for i in chosen)
        row = sum(math.exp(g[j]) / total * dense_mlp_by_hand(moe.experts[j], z) for j in chosen)
        if moe.shared is not None:
            row = row + dense_mlp_by_hand(moe.shared, z)
        rows.append(row)
    return torch.stack(rows).view_as(x)


def mlp_by_hand(mlp, z):
    return moe_by_hand(mlp, z) if isinstance(mlp, MixtureOfExperts) else dense_mlp_by_hand(mlp, z)


def logits_by_hand(model: Transformer, tokens):
    # Definition 21: embed (Def. 2) + positions (Def. 3), L blocks (Defs. 16, 18), final norm,
    # z_t = h_t W_U + b_U
    c = model.config
    x = model.W_E[tokens]
    if c.positional == "learned":
        x = x + model.W_pos[: tokens.shape[1]]
    elif c.positional == "sinusoidal":
        x = x + sinusoidal_positions(c.n_ctx, c.d_model)[: tokens.shape[1]]
    for block in model.blocks:
        if c.norm_placement == "pre":
            x = x + attention_by_hand(block.attn, norm_by_hand(block.ln1, x))
            x = x + mlp_by_hand(block.mlp, norm_by_hand(block.ln2, x))
        else:
            x = norm_by_hand(block.ln1, x + attention_by_hand(block.attn, x))
            x = norm_by_hand(block.ln2, x + mlp_by_hand(block.mlp, x))
    if c.norm_placement == "pre":
        x = norm_by_hand(model.ln_final, x)
    W_U = model.W_E.T if c.tie_embeddings else model.W_U
    return x @ W_U + (0.0 if model.b_U is None else model.b_U)


# --- Example 7: a two-token attention calculation --------------------------------------------


def test_example_7_attention_weights_are_one_quarter_three_quarters():
    q = torch.tensor([[1.0], [1.0]], dtype=F64)  # d_h = 1, so the scale 1/√d_h is 1
    k = torch.tensor([[0.0], [math.log(3)]], dtype=F64)  # scores at position 2: (0, log 3)
    w = attention_weights(q, k, causal=True)
    # row 1 sees only key 1; row 2: softmax(0, log 3) = (1, 3)/(1 + 3)
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.0], [0.25, 0.75]], dtype=F64), **TOL)
    assert w[0, 1] == 0.0


def test_example_7_attention_output_is_five_by_hand_and_through_sdpa():
    q = torch.tensor([[1.0], [1.0]], dtype=F64)
    k = torch.tensor([[0.0], [math.log(3)]], dtype=F64)
    v = torch.tensor([[2.0], [6.0]], dtype=F64)
    z = attention_weights(q, k, causal=True) @ v
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    # z_1 = v_1 = 2;  z_2 = ¼·2 + ¾·6 = 5
    expected = torch.tensor([[2.0], [5.0]], dtype=F64)
    torch.testing.assert_close(z, expected, **TOL)
    torch.testing.assert_close(sdpa, expected, **TOL)


def test_example_7_through_the_attention_module():
    c = config(d_model=1, n_heads=1, d_head=1, positional="none", attn_bias=True)
    attn = Attention(c).to(F64)
    with torch.no_grad():
        # inputs x = (0, 1): q = x, k = log 3 · x, v = 4x + 2, o = z, so at position 2 the
        # scores are (0, log 3) and the values (2, 6) of Example 7
        for lin, w, b in [(attn.q_proj, 1.0, 0.0), (attn.k_proj, math.log(3), 0.0)]:
            lin.weight.fill_(w), lin.bias.fill_(b)
        attn.v_proj.weight.fill_(4.0), attn.v_proj.bias.fill_(2.0)
        attn.o_proj.weight.fill_(1.0), attn.o_proj.bias.fill_(0.0)
    x = torch.tensor([[[0.0], [1.0]]], dtype=F64)
    # position 1: weight 1 on v_1 = 2; position 2: ¼·2 + ¾·6 = 5
    torch.testing.assert_close(attn(x), torch.tensor([[[2.0], [5.0]]], dtype=F64), **TOL)


# --- Example 9 and Definition 8: the causal mask ---------------------------------------------


def test_example_9_length_four_causal_weights_are_lower_triangular_stochastic():
    gen = torch.Generator().manual_seed(9)
    q, k = (
        torch.randn(2, 4, 3, generator=gen, dtype=F64),
        torch.randn(2, 4, 3, generator=gen, dtype=F64),
    )
    w = attention_weights(q, k, causal=True)
    assert torch.equal(w, w.tril())  # every future key s > t has weight exactly 0
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, dtype=F64), **TOL)
    assert (w[:, 2, 3] == 0).all()  # row three, fourth entry: −∞ before the softmax
    assert (w[:, 2, :3] > 0).all()  # the current and earlier keys stay available


def test_non_causal_attention_weights_are_the_plain_softmax():
    gen = torch.Generator().manual_seed(9)
    q, k = torch.randn(4, 3, generator=gen, dtype=F64), torch.randn(4, 3, generator=gen, dtype=F64)
    # Definition 6: softmax(q kᵀ / √d_h) with d_h = 3
    expected = torch.softmax(q @ k.T / math.sqrt(3), dim=-1)
    torch.testing.assert_close(attention_weights(q, k, causal=False), expected, **TOL)


CAUSAL_VARIANTS = [
    {"positional": p} for p in ("none", "learned", "sinusoidal", "rope", "alibi")
] + [
    {"n_key_value_heads": 2, "qk_norm": True, "attn_bias": True},
    {"norm_placement": "post", "normalization": "layernorm"},
    {"num_experts": 3, "experts_per_token": 2, "shared_expert": True},
]


# every variant through F.scaled_dot_product_attention; the positional ones also through the plain
# ops (Attention.use_sdpa = False) that vmap batches
CAUSAL_CASES = [(v, True) for v in CAUSAL_VARIANTS] + [(v, False) for v in CAUSAL_VARIANTS[:5]]


def use_sdpa_(model: Transformer, use_sdpa: bool) -> Transformer:
    for block in model.blocks:
        block.attn.use_sdpa = use_sdpa
    return model


@pytest.mark.parametrize(("overrides", "use_sdpa"), CAUSAL_CASES)
def test_causal_model_earlier_logits_never_see_later_tokens(overrides, use_sdpa):
    model = use_sdpa_(model64(**overrides), use_sdpa)
    tokens = tokens_for(model.config, batch=4)
    base = model(tokens)
    exact = not use_sdpa and "num_experts" not in overrides
    for t in (1, 3):
        changed = tokens.clone()
        changed[:, t:] = (changed[:, t:] + 1 + t) % model.config.d_vocab
        earlier = model(changed)[:, :t]
        if exact:  # plain ops: the earlier positions compute exactly what they computed before
            assert torch.equal(earlier, base[:, :t])
        else:  # a fused kernel or the experts' batch routing may reorder a reduction (~1e-16);
            # a leak of later tokens would move the logits by O(1)
            gap = (earlier - base[:, :t]).abs().max() / base[:, :t].abs().max()
            assert gap <= 1e-12, gap


@pytest.mark.parametrize(("overrides", "use_sdpa"), CAUSAL_CASES)
def test_non_causal_model_earlier_logits_do_see_later_tokens(overrides, use_sdpa):
    model = use_sdpa_(model64(causal=False, **overrides), use_sdpa)
    tokens = tokens_for(model.config, batch=4)
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % model.config.d_vocab
    assert (model(changed)[:, 0] != model(tokens)[:, 0]).any(-1).all()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("overrides", CAUSAL_VARIANTS[:5] + CAUSAL_VARIANTS[5:6])
def test_broadcast_attention_scores_equal_the_sdpa_logits(overrides, causal):
    # the plain-ops path with products and sums (the compiled ensemble's) is the same function
    model = model64(causal=causal, **overrides)
    tokens = tokens_for(model.config, batch=4)
    reference = model(tokens)
    for block in use_sdpa_(model, False).blocks:
        block.attn.broadcast_scores = True
    torch.testing.assert_close(model(tokens), reference, rtol=0, atol=1e-12)


# --- Definition 13: top-k routing ------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "k", "chosen"),
    [
        ([1.0, 3.0, 3.0, 0.0], 1, [1]),  # tie 1 vs 2: the lower index wins
        ([1.0, 3.0, 3.0, 0.0], 2, [1, 2]),
        ([1.0, 3.0, 3.0, 0.0], 3, [1, 2, 0]),
        ([2.0, 2.0, 2.0], 2, [0, 1]),
        ([2.0, 2.0, 2.0], 3, [0, 1, 2]),
        ([0.0, -1.0, 5.0, 5.0, 5.0], 2, [2, 3]),
    ],
)
def test_top_k_experts_takes_the_largest_and_breaks_ties_by_lower_index(scores, k, chosen):
    assert top_k_experts(torch.tensor([scores]), k).tolist() == [chosen]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(-2, 2), min_size=5, max_size=5), min_size=1, max_size=6),
    st.integers(1, 5),
)
def test_top_k_experts_matches_the_total_order_score_then_index(rows, k):
    got = top_k_experts(torch.tensor(rows, dtype=F64), k).tolist()
    expected = [sorted(range(5), key=lambda j, r=r: (-r[j], j))[:k] for r in rows]
    assert got == expected


@pytest.mark.parametrize(
    ("k", "shared", "act_fn", "bias"),
    [
        (1, False, "relu", False),
        (2, False, "gelu", True),
        (2, True, "swiglu", True),
        (3, True, "silu", False),
    ],
)
def test_moe_equals_the_softmax_over_selected_scores_weighted_sum(k, shared, act_fn, bias):
    c = config(
        num_experts=3, experts_per_token=k, shared_expert=shared, act_fn=act_fn, mlp_bias=bias
    )
    moe = randomize(MixtureOfExperts(c).to(F64), 13)
    x = torch.randn(2, 5, c.d_model, generator=torch.Generator().manual_seed(1), dtype=F64)
    torch.testing.assert_close(moe(x), moe_by_hand(moe, x), **TOL)


def record_expert_inputs(moe: MixtureOfExperts) -> list[list[torch.Tensor]]:
    calls: list[list[torch.Tensor]] = [[] for _ in moe.experts]
    for j, expert in enumerate(moe.experts):
        expert.register_forward_hook(lambda mod, args, out, j=j: calls[j].append(args[0].detach()))
    return calls


def test_moe_runs_each_expert_on_exactly_the_tokens_that_selected_it():
    c = config(num_experts=4, experts_per_token=2)
    moe = randomize(MixtureOfExperts(c).to(F64), 5)
    calls = record_expert_inputs(moe)
    flat = torch.randn(12, c.d_model, generator=torch.Generator().manual_seed(2), dtype=F64)
    moe(flat)
    g = flat @ moe.router.weight.T
    for j in range(4):
        selected = [
            n for n in range(12) if j in sorted(range(4), key=lambda i, n=n: (-g[n, i], i))[:2]
        ]
        seen = torch.cat(calls[j]) if calls[j] else flat[:0]
        assert torch.equal(seen, flat[selected])


def test_moe_never_calls_an_expert_that_no_token_selects():
    c = config(num_experts=3, experts_per_token=1)
    moe = MixtureOfExperts(c).to(F64)
    with torch.no_grad():
        # g = (s, s, −s) with s = Σ z > 0: experts 0 and 1 tie (0 wins), expert 2 is last
        moe.router.weight.copy_(
            torch.tensor([1.0, 1.0, -1.0], dtype=F64)[:, None].expand(3, c.d_model)
        )
    calls = record_expert_inputs(moe)
    x = torch.rand(2, 4, c.d_model, generator=torch.Generator().manual_seed(3), dtype=F64) + 0.1
    out = moe(x)
    assert [len(cs) for cs in calls] == [1, 0, 0]
    torch.testing.assert_close(out, dense_mlp_by_hand(moe.experts[0], x), **TOL)  # α = 1


# --- Remark 11: grouped-query attention ------------------------------------------------------


def repeat_heads(t: torch.Tensor, G: int, group: int) -> torch.Tensor:
    """[G·D, ...] or [G, D] → each head repeated for its group (query head h ← h // group)."""
    return t.reshape(G, -1, *t.shape[1:]).repeat_interleave(group, dim=0).reshape(-1, *t.shape[1:])


@pytest.mark.parametrize("n_kv", [1, 2])
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"positional": "rope", "qk_norm": True},
        {"positional": "alibi", "attn_bias": True},
        {"positional": "rope", "rope_pairing": "adjacent", "attn_bias": True, "causal": False},
    ],
)
def test_gqa_equals_mha_with_repeated_key_value_heads(n_kv, overrides):
    gqa = model64(n_key_value_heads=n_kv, **overrides)
    mha = Transformer(config(**overrides), dtype=F64)
    group = 4 // n_kv
    state = dict(gqa.state_dict())
    for name, t in gqa.state_dict().items():
        if any(part in name for part in ("k_proj", "v_proj")):
            state[name] = repeat_heads(t, n_kv, group)
        elif name.endswith("k_norm"):
            state[name] = t.repeat_interleave(group, dim=0)
    mha.load_state_dict(state)
    tokens = tokens_for(gqa.config)
    torch.testing.assert_close(mha(tokens), gqa(tokens), **TOL)
    for layer in range(2):
        torch.testing.assert_close(mha.qk_invariant(layer), gqa.qk_invariant(layer), **TOL)
        torch.testing.assert_close(mha.ov_invariant(layer), gqa.ov_invariant(layer), **TOL)


def test_gqa_query_head_reads_key_value_head_h_floor_group():
    model = model64(n_key_value_heads=2)
    assert [model.kv_head(h) for h in range(4)] == [0, 0, 1, 1]  # group size 4/2 = 2


# --- Remark 4: RoPE --------------------------------------------------------------------------

PAIRINGS = ["halves", "adjacent"]


def rotate_at(rotary: Rotary, vec: torch.Tensor, t: int, n_ctx: int) -> torch.Tensor:
    """The vector vec [D] rotated as if it sat at position t."""
    x = torch.zeros(n_ctx, vec.shape[0], dtype=vec.dtype)
    x[t] = vec
    return rotary(x)[t]


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_rope_scores_depend_only_on_the_offset(pairing):
    c = config(positional="rope", rope_pairing=pairing, d_head=8, n_ctx=9, rope_base=7.0)
    rotary = Rotary(c)
    gen = torch.Generator().manual_seed(4)
    q, k = torch.randn(8, generator=gen, dtype=F64), torch.randn(8, generator=gen, dtype=F64)

    def score(t, s):
        return rotate_at(rotary, q, t, 9) @ rotate_at(rotary, k, s, 9)

    at_two = [score(t, s) for t, s in [(3, 1), (5, 3), (7, 5), (2, 0), (8, 6)]]  # offset 2
    for value in at_two[1:]:
        torch.testing.assert_close(value, at_two[0], **TOL)
    for t, s in [(4, 1), (3, 3), (1, 3), (8, 1)]:  # offsets 3, 0, −2, 7
        assert abs(float(score(t, s) - at_two[0])) > 1e-6


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_rope_preserves_norms(pairing):
    c = config(positional="rope", rope_pairing=pairing, d_head=8, n_ctx=6)
    x = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(5), dtype=F64)
    torch.testing.assert_close(Rotary(c)(x).norm(dim=-1), x.norm(dim=-1), **TOL)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_rope_planes_are_the_planes_actually_rotated(pairing):
    c = config(positional="rope", rope_pairing=pairing, d_head=8, n_ctx=6, rope_base=50.0)
    rotary = Rotary(c)
    for p, (i, j) in enumerate(c.rope_planes()):
        e_i = torch.zeros(8, dtype=F64)
        e_i[i] = 1.0
        for t in range(6):
            # plane p turns by t·θ_p with θ_p = base^(−2p/d_head): e_i ↦ cos e_i + sin e_j
            angle = t * 50.0 ** (-2 * p / 8)
            expected = torch.zeros(8, dtype=F64)
            expected[i], expected[j] = math.cos(angle), math.sin(angle)
            torch.testing.assert_close(rotate_at(rotary, e_i, t, 6), expected, **TOL)


def test_rope_at_position_zero_is_the_identity():
    c = config(positional="rope", d_head=8)
    x = torch.randn(1, 8, generator=torch.Generator().manual_seed(6), dtype=F64)
    assert torch.equal(Rotary(c)(x), x)  # angle 0·θ: cos 1, sin 0


# --- Remark 4: ALiBi and sinusoidal positions ------------------------------------------------


def press_slopes(n: int) -> list[float]:
    """press2021train's reference construction (their get_slopes), transcribed."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + press_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize(
    ("n_heads", "exponents"),
    [
        (8, [1, 2, 3, 4, 5, 6, 7, 8]),  # 2^(−8/8 · h), h = 1..8
        (4, [2, 4, 6, 8]),  # 2^(−8/4 · h)
        (6, [2, 4, 6, 8, 1, 3]),  # the 4-head slopes, then indices 0, 2 of the 8-head list
        (1, [8]),  # 2^(−8/1)
        (2, [4, 8]),
        (3, [4, 8, 2]),  # the 2-head slopes, then index 0 of the 4-head list
    ],
)
def test_alibi_slopes_are_the_geometric_sequences_of_press(n_heads, exponents):
    expected = torch.tensor([2.0**-e for e in exponents], dtype=F64)
    torch.testing.assert_close(alibi_slopes(n_heads), expected, rtol=0, atol=0)


@pytest.mark.parametrize("n_heads", range(1, 17))
def test_alibi_slopes_match_press_reference_code(n_heads):
    expected = torch.tensor(press_slopes(n_heads), dtype=F64)
    torch.testing.assert_close(alibi_slopes(n_heads), expected, **TOL)


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias_is_minus_slope_times_distance_and_masks_the_future(causal):
    slopes = alibi_slopes(3)
    bias = alibi_bias(slopes, 4, causal)
    assert bias.shape == (3, 4, 4)
    for h in range(3):
        for t in range(4):
            for s in range(4):
                if s > t and causal:
                    assert bias[h, t, s] == float("-inf")
                else:  # −m_h (t − s) below the diagonal; −m_h |t − s| without the mask
                    assert bias[h, t, s] == -slopes[h] * abs(t - s)


@pytest.mark.parametrize("d", [6, 7])
def test_sinusoidal_positions_follow_vaswani(d):
    table = sinusoidal_positions(5, d)
    assert table.shape == (5, d) and table.dtype == F64
    for t in range(5):
        for i in range(d):
            # PE(t, 2i) = sin(t / 10000^(2i/d)), PE(t, 2i+1) = cos(t / 10000^(2i/d))
            angle = t / 10000 ** ((i - i % 2) / d)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert abs(float(table[t, i]) - expected) < 1e-12


# --- Definitions 17, 18, 19: normalization and its placement ---------------------------------


@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.5])
def test_rmsnorm_is_gain_times_z_over_root_mean_square(eps):
    norm = randomize(RMSNorm(7, eps).to(F64), 1)
    z = torch.randn(3, 7, generator=torch.Generator().manual_seed(8), dtype=F64)
    torch.testing.assert_close(norm(z), rms_by_hand(z, norm.weight, eps), **TOL)


@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.5])
def test_model_layernorm_uses_the_biased_variance(eps):
    norm = make_norm(config(normalization="layernorm", norm_eps=eps), 7)
    assert isinstance(norm, nn.LayerNorm)
    randomize(norm.to(F64), 2)
    z = torch.randn(3, 7, generator=torch.Generator().manual_seed(8), dtype=F64)
    torch.testing.assert_close(norm(z), layernorm_by_hand(z, norm.weight, norm.bias, eps), **TOL)


def test_make_norm_builds_the_configured_operator_with_its_eps():
    rms = make_norm(config(normalization="rmsnorm", norm_eps=0.25), 5)
    assert isinstance(rms, RMSNorm) and rms.eps == 0.25 and rms.weight.shape == (5,)
    assert isinstance(make_norm(config(normalization="none"), 5), nn.Identity)
    ln = make_norm(config(normalization="layernorm", norm_eps=0.25), 5)
    assert ln.eps == 0.25 and ln.normalized_shape == (5,)


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("normalization", ["layernorm", "rmsnorm"])
def test_block_composes_residuals_and_norms_as_placed(placement, normalization):
    c = config(norm_placement=placement, normalization=normalization, attn_bias=True, mlp_bias=True)
    block = randomize(Block(c).to(F64), 3)
    x = torch.randn(2, 5, c.d_model, generator=torch.Generator().manual_seed(4), dtype=F64)
    if placement == "pre":  # x + F(N(x)) twice
        y = x + attention_by_hand(block.attn, norm_by_hand(block.ln1, x))
        expected = y + dense_mlp_by_hand(block.mlp, norm_by_hand(block.ln2, y))
    else:  # N(x + F(x)) twice
        y = norm_by_hand(block.ln1, x + attention_by_hand(block.attn, x))
        expected = norm_by_hand(block.ln2, y + dense_mlp_by_hand(block.mlp, y))
    torch.testing.assert_close(block(x), expected, **TOL)


@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_post_rmsnorm_residual_stream_has_rms_equal_to_the_gain(gain):
    model = Transformer(config(norm_placement="post", n_layers=3, init_std=0.5), dtype=F64)
    with torch.no_grad():
        for block in model.blocks:
            block.ln2.weight.fill_(gain)
    streams = []
    for block in model.blocks:
        block.register_forward_hook(lambda mod, args, out: streams.append(out))
    model(tokens_for(model.config))
    assert len(streams) == 3
    for x in streams:
        # RMS of γ z / √(mean z² + ε) is γ √(mean z² / (mean z² + ε)) ≈ γ for ε = 1e-6
        rms = x.pow(2).mean(-1).sqrt()
        torch.testing.assert_close(rms, torch.full_like(rms, gain), rtol=1e-5, atol=0)


def test_post_norm_model_has_no_final_norm_and_pre_norm_model_has_one():
    assert Transformer(config(norm_placement="post")).ln_final is None
    assert isinstance(Transformer(config(norm_placement="pre")).ln_final, RMSNorm)


# --- Definitions 5, 10, 12: attention and MLP sublayers --------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"causal": False, "attn_bias": True},
        {"n_key_value_heads": 2, "qk_norm": True},
        {"n_key_value_heads": 1, "positional": "rope", "attn_bias": True},
        {"positional": "rope", "rope_pairing": "adjacent", "qk_norm": True, "causal": False},
        {"positional": "alibi", "n_key_value_heads": 2},
        {"positional": "alibi", "causal": False, "d_model": 10},
    ],
)
@pytest.mark.parametrize("use_sdpa", [True, False])
def test_attention_equals_the_per_head_definition(overrides, use_sdpa):
    c = config(**overrides)
    attn = randomize(Attention(c).to(F64), 6)
    attn.use_sdpa = use_sdpa  # F.scaled_dot_product_attention, or the plain ops vmap batches
    x = torch.randn(2, 5, c.d_model, generator=torch.Generator().manual_seed(7), dtype=F64)
    torch.testing.assert_close(attn(x), attention_by_hand(attn, x), **TOL)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("act_fn", ["relu", "gelu", "silu", "swiglu"])
def test_mlp_equals_the_positionwise_feed_forward_definition(act_fn, bias):
    c = config(act_fn=act_fn, mlp_bias=bias)
    mlp = randomize(MLP(c).to(F64), 8)
    x = torch.randn(2, 5, c.d_model, generator=torch.Generator().manual_seed(9), dtype=F64)
    torch.testing.assert_close(mlp(x), dense_mlp_by_hand(mlp, x), **TOL)


# --- Definition 21: the whole model ----------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"positional": "sinusoidal", "normalization": "layernorm", "unembed_bias": True},
        {"positional": "rope", "norm_placement": "post", "tie_embeddings": True},
        {"positional": "alibi", "normalization": "none", "causal": False, "act_fn": "swiglu"},
        {"num_experts": 3, "experts_per_token": 2, "shared_expert": True, "d_vocab_out": 7},
        {
            "n_key_value_heads": 2,
            "qk_norm": True,
            "attn_bias": True,
            "mlp_bias": True,
            "d_model": 10,
        },
    ],
)
def test_model_logits_equal_the_definitions_composed_by_hand(overrides):
    model = model64(**overrides)
    tokens = tokens_for(model.config)
    torch.testing.assert_close(model(tokens), logits_by_hand(model, tokens), **TOL)
    torch.testing.assert_close(model(tokens[:, :2]), logits_by_hand(model, tokens[:, :2]), **TOL)


def test_unembed_bias_adds_b_U_to_every_position():
    model = model64(unembed_bias=True)
    tokens = tokens_for(model.config)
    with torch.no_grad():
        model.b_U.zero_()
        plain = model(tokens)
        model.b_U.copy_(torch.arange(11, dtype=F64))
    torch.testing.assert_close(
        model(tokens) - plain, torch.arange(11, dtype=F64).expand(3, 5, 11), **TOL
    )


def test_tied_unembedding_is_the_embedding_transposed():
    model = model64(tie_embeddings=True)
    assert not hasattr(model, "W_U")
    assert torch.equal(model.unembed_matrix(), model.W_E.T)
    assert model.unembed_matrix().data_ptr() == model.embed.weight.data_ptr()  # shared, not copied
    hidden = []
    model.ln_final.register_forward_hook(lambda mod, args, out: hidden.append(out))
    tokens = tokens_for(model.config)
    torch.testing.assert_close(model(tokens), hidden[0] @ model.W_E.T, **TOL)


def test_d_vocab_out_sets_the_logit_width_and_the_unembedding_shape():
    model = model64(d_vocab_out=7, unembed_bias=True)
    assert model.W_U.shape == (16, 7) and model.b_U.shape == (7,)
    assert model(tokens_for(model.config)).shape == (3, 5, 7)


def test_d_model_need_not_equal_heads_times_head_width():
    model = model64(d_model=10)  # 4 heads × 4 = 16 ≠ 10
    assert model.blocks[0].attn.o_proj.weight.shape == (10, 16)  # W_O maps H·D → d_model
    assert model.W_O.shape == (2, 4, 4, 10) and model.W_Q.shape == (2, 4, 10, 4)
    assert model(tokens_for(model.config)).shape == (3, 5, 11)


# --- shapes and per-head views for every option ----------------------------------------------

OPTIONS = (
    [{"act_fn": a} for a in ("relu", "gelu", "silu", "swiglu")]
    + [
        {"normalization": n, "norm_placement": p}
        for n in ("none", "layernorm", "rmsnorm")
        for p in ("pre", "post")
    ]
    + [{"positional": p} for p in ("none", "learned", "sinusoidal", "rope", "alibi")]
    + [{"positional": "rope", "rope_pairing": "adjacent"}]
    + [{f: v} for f in ("causal", "attn_bias", "mlp_bias", "qk_norm") for v in (False, True)]
    + [{"tie_embeddings": True}, {"unembed_bias": True}, {"d_vocab_out": 7}]
    + [
        {"num_experts": 3, "experts_per_token": 2, "shared_expert": True},
        {"num_experts": 3, "experts_per_token": 1},
        {"n_key_value_heads": 2},
        {"n_key_value_heads": 1},
        {"n_key_value_heads": 2, "positional": "alibi", "qk_norm": True, "attn_bias": True},
    ]
)


def check_shapes_and_views(model: Transformer, tokens: torch.Tensor) -> None:
    c = model.config
    L, H, G, D, d = c.n_layers, c.n_heads, c.kv_heads, c.d_head, c.d_model
    assert model(tokens).shape == (*tokens.shape, c.vocab_out)
    W_Q, W_K, W_V, W_O = model.W_Q, model.W_K, model.W_V, model.W_O
    assert W_Q.shape == (L, H, d, D) and W_O.shape == (L, H, D, d)
    assert W_K.shape == (L, G, d, D) and W_V.shape == (L, G, d, D)
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        for h in range(H):  # head h is rows h·D:(h+1)·D of each nn.Linear (columns of o_proj)
            assert torch.equal(W_Q[layer, h], attn.q_proj.weight[h * D : (h + 1) * D].T)
            assert torch.equal(W_O[layer, h], attn.o_proj.weight[:, h * D : (h + 1) * D].T)
        for g in range(G):
            assert torch.equal(W_K[layer, g], attn.k_proj.weight[g * D : (g + 1) * D].T)
            assert torch.equal(W_V[layer, g], attn.v_proj.weight[g * D : (g + 1) * D].T)
        qk, ov = model.qk_invariant(layer), model.ov_invariant(layer)
        assert qk.shape == (H, d, d) and ov.shape == (H, d, d)
        kv = [h // c.group_size for h in range(H)]  # the key/value head of query head h
        torch.testing.assert_close(qk, W_Q[layer] @ W_K[layer, kv].mT, **TOL)
        torch.testing.assert_close(ov, W_V[layer, kv] @ W_O[layer], **TOL)


@pytest.mark.parametrize("overrides", OPTIONS)
def test_every_option_gives_the_documented_shapes(overrides):
    if overrides.get("normalization") == "none" and overrides.get("norm_placement") == "post":
        with pytest.raises(ValueError, match="norm_placement"):
            config(**overrides)
        return
    model = model64(**overrides)
    check_shapes_and_views(model, tokens_for(model.config))


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_random_option_combinations_give_the_documented_shapes(data):
    draw = data.draw
    normalization = draw(st.sampled_from(["none", "layernorm", "rmsnorm"]))
    n_kv = draw(st.sampled_from([None, 1, 2, 4]))
    experts = draw(st.sampled_from([0, 0, 3]))
    c = config(
        n_layers=draw(st.integers(1, 2)),
        d_model=draw(st.sampled_from([10, 16])),
        n_key_value_heads=n_kv,
        d_vocab_out=draw(st.sampled_from([None, 7])),
        act_fn=draw(st.sampled_from(["relu", "gelu", "silu", "swiglu"])),
        normalization=normalization,
        norm_placement="pre" if normalization == "none" else draw(st.sampled_from(["pre", "post"])),
        positional=draw(st.sampled_from(["none", "learned", "sinusoidal", "rope", "alibi"])),
        rope_pairing=draw(st.sampled_from(["halves", "adjacent"])),
        causal=draw(st.booleans()),
        attn_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()),
        qk_norm=draw(st.booleans()),
        unembed_bias=draw(st.booleans()),
        num_experts=experts,
        experts_per_token=draw(st.integers(1, 3)) if experts else 1,
        shared_expert=bool(experts) and draw(st.booleans()),
    )
    model = Transformer(c, dtype=F64)
    T = draw(st.integers(1, c.n_ctx))
    check_shapes_and_views(model, tokens_for(c, batch=2)[:, :T])


# --- determinism and dtypes ------------------------------------------------------------------


@pytest.mark.parametrize("init_std", [0.02, None])
def test_same_seed_gives_identical_parameters_and_a_different_seed_does_not(init_std):
    c = config(init_std=init_std, positional="learned")
    a, b, other = (Transformer(c, seed=s).state_dict() for s in (7, 7, 8))
    assert a.keys() == b.keys() == other.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embed.weight"], other["embed.weight"])
    assert not torch.equal(a["W_pos"], other["W_pos"])


@pytest.mark.parametrize("init_std", [0.02, None])
def test_building_a_model_leaves_the_global_rng_untouched(init_std):
    before = torch.get_rng_state()
    Transformer(config(init_std=init_std, num_experts=3, shared_expert=True))
    assert torch.equal(torch.get_rng_state(), before)


def test_normal_init_draws_weights_at_init_std_with_zero_biases_and_unit_gains():
    c = config(d_model=64, d_mlp=64, init_std=0.1, attn_bias=True, qk_norm=True, unembed_bias=True)
    model = Transformer(c, seed=3, dtype=F64)
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("bias", "b_U"):
            assert torch.equal(p, torch.zeros_like(p)), name
        elif p.dim() == 1 or leaf in ("q_norm", "k_norm"):
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert abs(float(p.detach().std()) - 0.1) < 0.02, name


@pytest.mark.parametrize("positional", ["none", "learned", "sinusoidal", "rope", "alibi"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_sets_every_parameter_and_the_logits(dtype, positional):
    model = Transformer(
        config(positional=positional, num_experts=2, unembed_bias=True), dtype=dtype
    )
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert model(tokens_for(model.config)).dtype == dtype


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "match"),
    [
        (torch.zeros(1, 6, dtype=torch.long), "n_ctx"),  # 6 > n_ctx = 5
        (torch.full((2, 3), 11), r"token id 11 .*d_vocab=11"),  # id 11 = d_vocab
        (torch.tensor([[0, -1, 2]]), r"token id -1 .*d_vocab=11"),
        (torch.zeros(4, dtype=torch.long), "batch, pos"),  # 1-D
        (torch.zeros(1, 2, 3, dtype=torch.long), "batch, pos"),  # 3-D
    ],
)
def test_bad_tokens_raise_value_error(tokens, match):
    with pytest.raises(ValueError, match=match):
        Transformer(config())(tokens)
