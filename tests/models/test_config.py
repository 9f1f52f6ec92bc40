"""Tests for gaugelab.models.config: TransformerConfig validates, is frozen, and has the
PROTOCOLS §5 twin-model defaults."""

import pydantic
import pytest

from gaugelab.models import TransformerConfig

SMALL = dict(n_layers=2, d_model=16, d_head=4, n_heads=4, d_mlp=8, n_ctx=5, d_vocab=11)


def test_defaults_are_the_protocols_twin_model_with_the_causal_mask_on():
    c = TransformerConfig()
    # PROTOCOLS §5: 2 pre-norm RMSNorm blocks, 4 heads × 16, d_model 64, SiLU MLP 256,
    # vocabulary 48 (47 residues + '='), 3 positions [a, b, =], learned positions, bias-free
    assert (c.n_layers, c.d_model, c.n_heads, c.d_head, c.d_mlp) == (2, 64, 4, 16, 256)
    assert (c.d_vocab, c.n_ctx) == (48, 3)
    assert (c.act_fn, c.normalization, c.norm_placement, c.positional) == (
        "silu",
        "rmsnorm",
        "pre",
        "learned",
    )
    assert not (c.attn_bias or c.mlp_bias or c.qk_norm or c.tie_embeddings or c.unembed_bias)
    assert (c.num_experts, c.shared_expert, c.n_key_value_heads) == (0, False, None)
    assert c.causal is True


def test_derived_sizes_fall_back_to_their_plain_counterparts():
    c = TransformerConfig(**SMALL)
    assert (c.kv_heads, c.group_size, c.vocab_out) == (4, 1, 11)
    g = TransformerConfig(**SMALL, n_key_value_heads=2, d_vocab_out=7)
    # 4 query heads over 2 key/value heads: groups of 2
    assert (g.kv_heads, g.group_size, g.vocab_out) == (2, 2, 7)


@pytest.mark.parametrize(
    ("pairing", "planes"),
    [
        ("halves", ((0, 4), (1, 5), (2, 6), (3, 7))),  # (i, i + d_head/2), d_head = 8
        ("adjacent", ((0, 1), (2, 3), (4, 5), (6, 7))),  # (2i, 2i + 1)
    ],
)
def test_rope_planes_list_each_pairing_in_frequency_order(pairing, planes):
    c = TransformerConfig(**{**SMALL, "d_head": 8}, positional="rope", rope_pairing=pairing)
    assert c.rope_planes() == planes


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"n_heads": 4, "n_key_value_heads": 3}, ["n_heads", "n_key_value_heads"]),
        ({"positional": "rope", "d_head": 3}, ["positional", "d_head"]),
        ({"tie_embeddings": True, "d_vocab_out": 7}, ["tie_embeddings", "d_vocab_out", "d_vocab"]),
        ({"num_experts": 2, "experts_per_token": 3}, ["experts_per_token", "num_experts"]),
        ({"shared_expert": True}, ["shared_expert", "num_experts"]),
        ({"normalization": "none", "norm_placement": "post"}, ["norm_placement", "normalization"]),
        ({"n_layers": 0}, ["n_layers"]),
        ({"d_model": 0}, ["d_model"]),
        ({"n_key_value_heads": 0}, ["n_key_value_heads"]),
        ({"act_fn": "tanh"}, ["act_fn"]),
        ({"normalization": "batchnorm"}, ["normalization"]),
        ({"positional": "t5"}, ["positional"]),
        ({"rope_pairing": "interleaved"}, ["rope_pairing"]),
        ({"init_std": 0.0}, ["init_std"]),
        ({"norm_eps": -1e-6}, ["norm_eps"]),
        ({"n_head": 4}, ["n_head"]),  # a typo: extra="forbid"
    ],
)
def test_bad_config_raises_value_error_naming_the_fields(overrides, named):
    with pytest.raises(ValueError) as info:
        TransformerConfig(**{**SMALL, **overrides})
    for field in named:
        assert field in str(info.value)


def test_every_conflict_is_reported_at_once():
    with pytest.raises(ValueError) as info:
        TransformerConfig(**SMALL, shared_expert=True, n_key_value_heads=3)
    assert "shared_expert" in str(info.value)
    assert "n_key_value_heads" in str(info.value)


@pytest.mark.parametrize(
    "overrides",
    [
        {"n_key_value_heads": 1},  # multi-query attention
        {"n_key_value_heads": 4},  # = n_heads: plain multi-head attention
        {"num_experts": 3, "experts_per_token": 3, "shared_expert": True},  # k = J
        {"positional": "rope", "d_head": 2},
        {"tie_embeddings": True, "d_vocab_out": 11},  # = d_vocab
        {"normalization": "none", "norm_placement": "pre"},
        {"d_model": 10},  # d_model need not equal n_heads · d_head
        {"init_std": None},
    ],
)
def test_boundary_configs_are_accepted(overrides):
    TransformerConfig(**{**SMALL, **overrides})


def test_config_is_frozen():
    c = TransformerConfig(**SMALL)
    with pytest.raises(pydantic.ValidationError):
        c.n_layers = 3
    assert c.n_layers == 2


def test_equal_configs_are_equal_and_hash_equal():
    assert TransformerConfig(**SMALL) == TransformerConfig(**SMALL)
    assert hash(TransformerConfig(**SMALL)) == hash(TransformerConfig(**SMALL))
    assert TransformerConfig(**SMALL) != TransformerConfig(**SMALL, causal=False)
