"""Tests for the member-native ensemble forward (gaugelab.models._member_native): the same
function as E separate Transformers (float64, 1e-12, forward and gradients), identical members
bitwise identical, LoRA seeds on a shared base, and the fallbacks it leaves to vmap."""

from copy import deepcopy

import pytest
import torch

from gaugelab.determinism import deterministic
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.models._member_native import unsupported
from gaugelab.models.lora import inject_lora, merge_lora

F64 = torch.float64
SMALL = dict(d_model=16, n_heads=4, d_head=4, d_mlp=12, d_vocab=11, n_ctx=5)
CONFIGS = {
    "default": {},
    "bidirectional-relu": {"causal": False, "act_fn": "relu"},
    "rope-gqa-qknorm": {"positional": "rope", "n_key_value_heads": 2, "qk_norm": True},
    "alibi-layernorm-swiglu": {"positional": "alibi", "normalization": "layernorm",
                               "act_fn": "swiglu"},
    "sinusoidal-tied-biases-postnorm": {
        "positional": "sinusoidal", "tie_embeddings": True, "unembed_bias": True,
        "attn_bias": True, "mlp_bias": True, "norm_placement": "post",
        "normalization": "layernorm", "act_fn": "gelu",
    },
    "no-norm-no-positions": {"normalization": "none", "positional": "none", "init_std": None},
}  # fmt: skip


def members(n=3, **overrides):
    config = TransformerConfig(**{**SMALL, **overrides})
    return [Transformer(config, seed=s, dtype=F64) for s in range(n)]


def tokens(batch=6, seed=0, members=None):
    shape = (batch, SMALL["n_ctx"]) if members is None else (members, batch, SMALL["n_ctx"])
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, SMALL["d_vocab"], shape, generator=g)


def assert_same_function(ensemble, models, x, member_inputs=False):
    """Forward and the gradients of every stacked parameter equal the separate models'."""
    for m in (ensemble, *models):
        m.zero_grad()
    out = ensemble(x, member_inputs=member_inputs)
    reference = torch.stack([m(x[e] if member_inputs else x) for e, m in enumerate(models)])
    assert out.shape == reference.shape
    assert (out - reference).abs().max() <= 1e-12
    weights = torch.linspace(-1, 1, out.numel(), dtype=F64).view_as(out)  # no symmetric loss
    (out * weights).sum().backward()
    for e, m in enumerate(models):
        (m(x[e] if member_inputs else x) * weights[e]).sum().backward()
    for name, p in ensemble.stacked_parameters().items():
        if not p.requires_grad:
            continue
        for e, m in enumerate(models):
            assert (p.grad[e] - m.get_parameter(name).grad).abs().max() <= 1e-12, (name, e)


@pytest.mark.parametrize("sdpa", [True, False], ids=["fused", "plain"])
@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_native_forward_is_the_separate_models(overrides, sdpa):
    models = members(**overrides)
    ensemble = Ensemble(models, sdpa=sdpa)
    assert ensemble.native and ensemble.sdpa == sdpa
    assert_same_function(ensemble, models, tokens())


def test_each_member_reads_its_own_batch():
    models = members(3, positional="rope")
    assert_same_function(Ensemble(models), models, tokens(members=3), member_inputs=True)


def test_native_and_vmap_paths_agree():
    models = members(3, positional="alibi", n_key_value_heads=2)
    native, vmapped = Ensemble(models), Ensemble(models, native=False)
    assert native.native and not vmapped.native
    x = tokens()
    assert (native(x) - vmapped(x)).abs().max() <= 1e-12


@pytest.mark.parametrize("sdpa", [True, False], ids=["fused", "plain"])
def test_identical_members_stay_bitwise_identical(sdpa):
    """The identity twin's guarantee: equal weights, equal outputs and gradients, bit for bit,
    in float32 and with a different member between them."""
    config = TransformerConfig(**{**SMALL, "causal": False})
    model, other = Transformer(config, seed=0), Transformer(config, seed=1)
    with deterministic():
        ensemble = Ensemble([model, other, model, model], sdpa=sdpa)
        out = ensemble(tokens(batch=32))
        out.square().sum().backward()
    for e in (2, 3):
        assert torch.equal(out[0], out[e])
        for name, p in ensemble.stacked_parameters().items():
            assert torch.equal(p.grad[0], p.grad[e]), name
    assert not torch.equal(out[0], out[1])


def lora_seeds(n=3, dropout=0.0, **overrides):
    """n LoRA seeds (r = 2 on every projection, B ≠ 0) on copies of one float64 base."""
    base = members(1, **overrides)[0]
    models = []
    for seed in range(n):
        model = deepcopy(base)
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "fc_in", "fc_out"]
        inject_lora(model, targets, r=2, alpha=4.0, seed=seed, dropout=dropout)
        with torch.no_grad():  # B = 0 at init: give it a value, so the members differ
            for name, p in model.named_parameters():
                if name.endswith("lora_B"):
                    p.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
        models.append(model)
    return models


@pytest.mark.parametrize("overrides", [{}, {"attn_bias": True, "mlp_bias": True}],
                         ids=["bias-free", "biases"])  # fmt: skip
def test_lora_seeds_on_a_shared_base_are_the_separate_models(overrides):
    models = lora_seeds(**overrides)
    ensemble = Ensemble(models)
    assert ensemble.native
    assert ensemble.shared_names == [n for n, _ in models[0].named_parameters() if "lora_" not in n]
    assert_same_function(ensemble, models, tokens(members=3), member_inputs=True)
    assert_same_function(ensemble, models, tokens())
    assert all(p.grad is None for p in ensemble.shared_parameters().values())


def test_a_frozen_base_that_differs_between_members_stays_stacked_and_native():
    models = lora_seeds(2)
    with torch.no_grad():
        models[1].blocks[0].attn.q_proj.base_layer.weight.mul_(2.0)
    ensemble = Ensemble(models)
    assert "blocks.0.attn.q_proj.base_layer.weight" in ensemble.stacked_parameters()
    assert ensemble.native
    assert_same_function(ensemble, models, tokens())


def test_merged_lora_layers_run_their_base_alone():
    models = lora_seeds(2)
    for m in models:
        merge_lora(m)
    ensemble = Ensemble(models)
    x = tokens()
    assert (ensemble(x) - torch.stack([m(x) for m in models])).abs().max() <= 1e-12


def test_models_the_native_path_does_not_know_fall_back_to_vmap_or_the_loop():
    moe = members(2, num_experts=3, experts_per_token=2)
    assert "MixtureOfExperts" in unsupported(moe[0])
    ensemble = Ensemble(moe)
    assert not ensemble.native and not ensemble.vectorize  # routing: the member loop
    assert (ensemble(tokens()) - torch.stack([m(tokens()) for m in moe])).abs().max() <= 1e-12

    class Scaled(Transformer):  # a subclass may change forward: never native
        def forward(self, tokens):
            return 2 * super().forward(tokens)

    config = TransformerConfig(**SMALL)
    scaled = [Scaled(config, seed=s, dtype=F64) for s in range(2)]
    ensemble = Ensemble(scaled)
    assert not ensemble.native and ensemble.vectorize
    assert (ensemble(tokens()) - torch.stack([m(tokens()) for m in scaled])).abs().max() <= 1e-12
    assert "adapter dropout" in unsupported(lora_seeds(1, dropout=0.1)[0])
    assert unsupported(torch.nn.Linear(2, 2)) == "Linear is not a gaugelab Transformer"


def test_asking_for_the_native_path_where_it_cannot_run_raises():
    with pytest.raises(ValueError, match=r"native=True, but submodule .* MixtureOfExperts"):
        Ensemble(members(2, num_experts=2), native=True)
    with pytest.raises(ValueError, match="native=True, but vectorize=False"):
        Ensemble(members(2), native=True, vectorize=False)
    assert not Ensemble(members(2), vectorize=False).native  # the loop, as asked


def test_the_twin_protocol_ensemble_is_native():
    from gaugelab.experiments.twins.run import TwinSpec, build_members

    twins, names = build_members(TwinSpec())
    ensemble = Ensemble(twins)
    assert names == ["base", "gauge", "identity", "noise"]
    assert ensemble.native and ensemble.sdpa
