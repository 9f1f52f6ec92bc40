"""Tests for gaugelab.models.symmetry: the derived gauge leaves the function unchanged, and is
not larger than returned."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gaugelab.gauge import (
    GeneralLinear,
    Orthogonal,
    Permutation,
    PositiveMonomial,
    SignedPermutation,
    Torus,
)
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.symmetry import GaugeElements, apply_gauge, head_gauge, mlp_gauge, ov_gauge

F64 = torch.float64


def randomize(model: Transformer, seed: int) -> Transformer:
    """Every parameter (gains and biases included) drawn at random, so no symmetry is accidental."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype) + (p.dim() == 1))
    return model


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


@st.composite
def configs(draw):
    n_kv = draw(st.sampled_from([1, 2]))
    n_heads = n_kv * draw(st.sampled_from([1, 2]))
    experts = draw(st.sampled_from([0, 0, 3]))
    normalization = draw(st.sampled_from(["none", "layernorm", "rmsnorm"]))
    return TransformerConfig(
        n_layers=draw(st.integers(1, 2)),
        d_model=8,
        n_heads=n_heads,
        d_head=draw(st.sampled_from([2, 4])),
        n_key_value_heads=n_kv,
        d_mlp=6,
        d_vocab=7,
        d_vocab_out=draw(st.sampled_from([None, 5])),
        n_ctx=4,
        act_fn=draw(st.sampled_from(["relu", "gelu", "silu", "swiglu"])),
        normalization=normalization,
        norm_placement="pre" if normalization == "none" else draw(st.sampled_from(["pre", "post"])),
        positional=draw(st.sampled_from(["none", "learned", "sinusoidal", "rope", "alibi"])),
        rope_pairing=draw(st.sampled_from(["halves", "adjacent"])),
        causal=draw(st.booleans()),
        attn_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()),
        qk_norm=draw(st.booleans()),
        tie_embeddings=False,
        unembed_bias=draw(st.booleans()),
        num_experts=experts,
        experts_per_token=2 if experts else 1,
        shared_expert=bool(experts) and draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), seed=st.integers(0, 2**16))
def test_sampled_gauge_elements_leave_the_logits_unchanged(config, seed):
    model = randomize(Transformer(config, seed=seed, dtype=F64), seed)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.d_vocab, (3, config.n_ctx), generator=gen)
    elements = GaugeElements(
        qk=head_gauge(config).sample(gen),
        ov=ov_gauge(config).sample(gen),
        mlp=mlp_gauge(config).sample(gen),
    )
    twin = apply_gauge(model, elements)
    assert rel(twin(tokens), model(tokens)) <= 1e-12
    trivial = torch.equal(elements.qk, head_gauge(config).identity())  # small finite groups
    assert trivial or rel(twin.W_Q, model.W_Q) > 1e-3  # the twin really is in another basis


@settings(max_examples=30, deadline=None)
@given(
    pairing=st.sampled_from(["halves", "adjacent"]),
    qk_norm=st.booleans(),
    positional=st.sampled_from(["rope", "learned"]),
    seed=st.integers(0, 2**16),
)
def test_a_generic_orthogonal_element_changes_rope_and_qk_norm_logits(
    pairing, qk_norm, positional, seed
):
    if positional == "learned" and not qk_norm:
        qk_norm = True  # plain learned positions have the full O(d_head): nothing to refute
    config = TransformerConfig(
        n_layers=1, d_model=8, n_heads=2, d_head=4, d_mlp=6, d_vocab=7, n_ctx=4,
        positional=positional, rope_pairing=pairing, qk_norm=qk_norm,
    )  # fmt: skip
    model = randomize(Transformer(config, seed=seed, dtype=F64), seed)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.d_vocab, (3, config.n_ctx), generator=gen)
    Q = Orthogonal(4).sample(gen, batch=(1, 2))
    twin = apply_gauge(model, GaugeElements(qk=Q))
    assert rel(twin(tokens), model(tokens)) > 1e-6


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, Orthogonal(8)),
        ({"positional": "alibi"}, Orthogonal(8)),
        ({"positional": "sinusoidal"}, Orthogonal(8)),
        ({"positional": "rope"}, Torus(8, ((0, 4), (1, 5), (2, 6), (3, 7)))),
        (
            {"positional": "rope", "rope_pairing": "adjacent"},
            Torus(8, ((0, 1), (2, 3), (4, 5), (6, 7))),
        ),
        ({"qk_norm": True}, SignedPermutation(8)),
        (
            {"positional": "rope", "qk_norm": True},
            Torus(8, ((0, 4), (1, 5), (2, 6), (3, 7)), quarter_turns=True),
        ),
    ],
)
def test_head_gauge_is_derived_from_the_configuration(overrides, expected):
    config = TransformerConfig(d_model=16, n_heads=4, d_head=8, n_key_value_heads=2, **overrides)
    gauge = head_gauge(config)
    assert len(gauge.groups) == config.n_layers
    assert all(len(row) == 2 and all(G == expected for G in row) for row in gauge.groups)
    assert list(gauge.query_heads(1)) == [2, 3]  # GQA: one element for both query heads


def test_ov_and_mlp_gauges():
    config = TransformerConfig(d_model=16, n_heads=2, d_head=8, d_mlp=12, act_fn="relu")
    assert ov_gauge(config).groups[0][0] == GeneralLinear(8)
    assert ov_gauge(config, orthogonal=True).groups[0][0] == Orthogonal(8)
    assert mlp_gauge(config).groups[0] == (PositiveMonomial(12),)
    moe = config.model_copy(update={"act_fn": "gelu", "num_experts": 3, "shared_expert": True})
    assert mlp_gauge(moe).groups[1] == (Permutation(12),) * 4  # three experts and the shared one


def test_orthogonal_head_gauge_preserves_qk_invariants_and_ov_gauge_preserves_ov():
    config = TransformerConfig(d_model=16, n_heads=4, d_head=4, n_key_value_heads=2)
    model = randomize(Transformer(config, seed=1, dtype=F64), 1)
    gen = torch.Generator().manual_seed(2)
    twin = apply_gauge(
        model, GaugeElements(qk=head_gauge(config).sample(gen), ov=ov_gauge(config).sample(gen))
    )
    for layer in range(config.n_layers):
        assert rel(twin.qk_invariant(layer), model.qk_invariant(layer)) <= 1e-13
        assert rel(twin.ov_invariant(layer), model.ov_invariant(layer)) <= 1e-13


def test_apply_gauge_copies_unless_inplace_and_checks_shapes():
    config = TransformerConfig(d_model=8, n_heads=2, d_head=4, d_mlp=6, d_vocab=7)
    model = Transformer(config, dtype=F64)
    before = model.W_Q.clone()
    Q = head_gauge(config).sample(torch.Generator().manual_seed(0))
    twin = apply_gauge(model, GaugeElements(qk=Q))
    assert torch.equal(model.W_Q, before) and not torch.equal(twin.W_Q, before)
    same = apply_gauge(model, GaugeElements(qk=Q), inplace=True)
    assert same is model and torch.equal(model.W_Q, twin.W_Q)
    with pytest.raises(ValueError, match=r"elements.qk has shape \(2, 4, 4\)"):
        apply_gauge(model, GaugeElements(qk=Q[0]))
    identity = apply_gauge(model, GaugeElements(qk=head_gauge(config).identity()))
    assert torch.equal(identity.W_Q, model.W_Q)
