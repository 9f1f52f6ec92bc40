"""Tests for gaugelab.models.ensemble: E members as one equal E separate models."""

import pytest
import torch

from gaugelab.determinism import deterministic
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.optim import make_optimizer

F64 = torch.float64
SMALL = dict(d_model=16, n_heads=4, d_head=4, d_mlp=12, d_vocab=11, n_ctx=5)


def members(n=3, **overrides):
    config = TransformerConfig(**{**SMALL, **overrides})
    return [Transformer(config, seed=s, dtype=F64) for s in range(n)]


def tokens(batch=6, seed=0):
    return torch.randint(
        0, SMALL["d_vocab"], (batch, SMALL["n_ctx"]), generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"causal": False, "positional": "learned"},
        {"positional": "rope", "n_key_value_heads": 2, "qk_norm": True},
        {"positional": "alibi", "normalization": "layernorm", "act_fn": "swiglu"},
        {"num_experts": 3, "experts_per_token": 2, "shared_expert": True},
    ],
    ids=["default", "bidirectional", "rope-gqa-qknorm", "alibi-layernorm-swiglu", "moe"],
)
def test_ensemble_forward_and_gradients_equal_separate_models(overrides):
    models = members(**overrides)
    ensemble = Ensemble(models)
    x = tokens()
    out = ensemble(x)  # [E, B, T, V]
    reference = torch.stack([m(x) for m in models])
    assert out.shape == reference.shape
    assert (out - reference).abs().max() <= 1e-12
    out.square().sum().backward()  # the sum of member losses
    for m in models:
        m(x).square().sum().backward()
    for name, stacked in ensemble.stacked_parameters().items():
        for e, m in enumerate(models):
            assert (stacked.grad[e] - m.get_parameter(name).grad).abs().max() <= 1e-12, name


def test_members_with_identical_parameters_are_bit_identical():
    model = members(1, causal=False)[0]
    ensemble = Ensemble([model, model, model])
    out = ensemble(tokens())
    out.square().sum().backward()
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])
    for stacked in ensemble.stacked_parameters().values():
        assert torch.equal(stacked.grad[0], stacked.grad[1])
        assert torch.equal(stacked.grad[0], stacked.grad[2])


def test_member_inputs_give_each_member_its_own_batch():
    models = members(2)
    ensemble = Ensemble(models)
    x = torch.stack([tokens(seed=1), tokens(seed=2)])  # [E, B, T]
    out = ensemble(x, member_inputs=True)
    for e, m in enumerate(models):
        assert (out[e] - m(x[e])).abs().max() <= 1e-12


def test_ensemble_parameters_are_exactly_the_stacked_parameters():
    models = members(2)
    ensemble = Ensemble(models)
    stacked = ensemble.stacked_parameters()
    assert [id(p) for p in ensemble.parameters()] == [id(stacked[n]) for n in ensemble.names]
    assert all(p.shape[0] == 2 for p in ensemble.parameters())


def test_member_views_share_storage_and_member_copies_match():
    models = members(2)
    ensemble = Ensemble(models)
    view = ensemble.member_parameters(1)["embed.weight"]
    assert view.data_ptr() == ensemble.stacked_parameters()["embed.weight"][1].data_ptr()
    copy = ensemble.member(1)
    x = tokens()
    assert torch.equal(copy(x), models[1](x))
    with pytest.raises(ValueError, match="member 2"):
        ensemble.member_parameters(2)


def test_one_optimizer_over_the_ensemble_equals_separate_optimizers():
    models = members(3, causal=False)
    ensemble = Ensemble(models)
    opt = make_optimizer("adam", list(ensemble.parameters()), lr=1e-2, member_dims=1)
    separate = [make_optimizer("adam", list(m.parameters()), lr=1e-2) for m in models]
    x = tokens()
    for _ in range(3):
        opt.zero_grad()
        ensemble(x).square().mean(dim=(1, 2, 3)).sum().backward()
        opt.step()
        for m, o in zip(models, separate, strict=True):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for name, stacked in ensemble.stacked_parameters().items():
        for e, m in enumerate(models):
            assert (stacked[e] - m.get_parameter(name)).abs().max() <= 1e-12, name


def test_frozen_parameters_stay_frozen_and_get_no_gradient():
    """A LoRA member's base weights are frozen; the stacked copies must be too, or an optimizer
    over ensemble.parameters() trains the base (and backward pays for its gradients)."""
    from gaugelab.models.lora import inject_lora

    models = members(2)
    for seed, m in enumerate(models):
        inject_lora(m, ["q_proj", "fc_out"], r=2, alpha=4.0, seed=seed)
    ensemble = Ensemble(models)
    flags = {n: p.requires_grad for n, p in ensemble.stacked_parameters().items()}
    assert flags == {n: p.requires_grad for n, p in models[0].named_parameters()}
    assert sorted(n for n, f in flags.items() if f) == [
        f"blocks.{i}.{m}.lora_{x}" for i in (0, 1) for m in ("attn.q_proj", "mlp.fc_out")
        for x in "AB"
    ]  # fmt: skip
    ensemble(tokens()).square().sum().backward()
    for name, p in ensemble.stacked_parameters().items():
        assert (p.grad is not None) == flags[name], name


def test_members_frozen_differently_are_refused():
    a, b = members(2)
    b.embed.weight.requires_grad_(False)
    with pytest.raises(ValueError, match="member 1 freezes other parameters"):
        Ensemble([a, b])


def test_bad_ensembles_raise():
    with pytest.raises(ValueError, match="empty"):
        Ensemble([])
    a = members(1)[0]
    b = Transformer(TransformerConfig(**{**SMALL, "d_mlp": 8}), dtype=F64)
    with pytest.raises(ValueError, match="member 1 differs"):
        Ensemble([a, b])
    with pytest.raises(ValueError, match="n_ctx"):
        Ensemble([a])(torch.zeros(2, 9, dtype=torch.long))


def test_compiled_ensemble_matches_eager_and_keeps_identical_members_bitwise():
    """torch.compile path: float64 agreement with separate models; identical members stay
    bitwise identical under deterministic algorithms (the twin protocol's identity twin)."""
    model, other = members(2, causal=False)
    models = [model, model, other]
    x = tokens()
    with deterministic():
        ensemble = Ensemble(models, compile=True)
        out = ensemble(x)
        out.square().sum().backward()
    reference = torch.stack([m(x) for m in models])
    assert (out - reference).abs().max() <= 1e-12
    for m in (model, other):
        m.zero_grad()
    other(x).square().sum().backward()
    for name, stacked in ensemble.stacked_parameters().items():
        assert torch.equal(stacked.grad[0], stacked.grad[1]), name
        assert (stacked.grad[2] - other.get_parameter(name).grad).abs().max() <= 1e-12, name
    with torch.no_grad():  # evaluation runs eagerly, for any batch shape
        assert (
            ensemble(tokens(batch=3)) - torch.stack([m(tokens(batch=3)) for m in models])
        ).abs().max() <= 1e-12


def test_compile_needs_a_vectorized_ensemble():
    with pytest.raises(ValueError, match="compile=True needs a vectorized"):
        Ensemble(members(2), vectorize=False, compile=True)
