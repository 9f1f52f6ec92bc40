"""Tests for gaugelab.models.ensemble: E members as one equal E separate models."""

import warnings
from copy import deepcopy

import pytest
import torch
from torch import nn

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
    every = {**ensemble.stacked_parameters(), **ensemble.shared_parameters()}
    flags = {n: p.requires_grad for n, p in every.items()}
    assert flags == {n: p.requires_grad for n, p in models[0].named_parameters()}
    assert sorted(n for n, f in flags.items() if f) == [
        f"blocks.{i}.{m}.lora_{x}" for i in (0, 1) for m in ("attn.q_proj", "mlp.fc_out")
        for x in "AB"
    ]  # fmt: skip
    ensemble(tokens()).square().sum().backward()
    for name, p in every.items():
        assert (p.grad is not None) == flags[name], name


# --- frozen parameters equal in every member are shared ---------------------------------------


def lora_seeds(n=3, **overrides):
    """n LoRA seeds (r = 2 on q_proj and fc_out, B ≠ 0) on copies of one float64 base."""
    from gaugelab.models.lora import inject_lora

    base = members(1, **overrides)[0]
    models = []
    for seed in range(n):
        model = deepcopy(base)
        inject_lora(model, ["q_proj", "fc_out"], r=2, alpha=4.0, seed=seed)
        with torch.no_grad():  # B = 0 at init: give it a value, so the members differ
            for name, p in model.named_parameters():
                if name.endswith("lora_B"):
                    p.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
        models.append(model)
    return models


def test_frozen_parameters_equal_in_every_member_are_stored_once():
    models = lora_seeds()
    ensemble = Ensemble(models)
    names = [n for n, _ in models[0].named_parameters()]
    assert ensemble.names == names
    assert ensemble.shared_names == [n for n in names if "lora_" not in n]
    stacked, shared = ensemble.stacked_parameters(), ensemble.shared_parameters()
    assert list(stacked) == [n for n in names if "lora_" in n]  # exactly what an optimizer steps
    assert all(p.requires_grad and p.shape[0] == 3 for p in stacked.values())
    for name, p in shared.items():
        assert not p.requires_grad and torch.equal(p, models[0].get_parameter(name)), name
    by_name = {**stacked, **shared}
    assert [id(p) for p in ensemble.parameters()] == [id(by_name[n]) for n in names]
    # the base once, the factors E times
    base = sum(p.numel() for n, p in models[0].named_parameters() if "lora_" not in n)
    factors = sum(p.numel() for n, p in models[0].named_parameters() if "lora_" in n)
    assert sum(p.numel() for p in ensemble.parameters()) == base + 3 * factors


@pytest.mark.parametrize(
    "options", [{}, {"native": False}, {"vectorize": False}], ids=["native", "vmap", "loop"]
)
def test_shared_parameters_give_the_separate_models_forward_and_gradients(options):
    models = lora_seeds(positional="rope", n_key_value_heads=2, qk_norm=True)
    ensemble = Ensemble(models, **options)
    assert ensemble.native == (not options)
    assert ensemble.shared_names
    x = torch.stack([tokens(seed=1), tokens(seed=2), tokens(seed=3)])  # [E, B, T]
    out = ensemble(x, member_inputs=True)
    reference = torch.stack([m(x[e]) for e, m in enumerate(models)])
    assert (out - reference).abs().max() <= 1e-12
    assert (ensemble(x[0]) - torch.stack([m(x[0]) for m in models])).abs().max() <= 1e-12
    out.square().sum().backward()
    for e, m in enumerate(models):
        m(x[e]).square().sum().backward()
    for name, p in ensemble.stacked_parameters().items():
        for e, m in enumerate(models):
            assert (p.grad[e] - m.get_parameter(name).grad).abs().max() <= 1e-12, name
    assert all(p.grad is None for p in ensemble.shared_parameters().values())


def test_sharing_matches_the_fully_stacked_ensemble_step_for_step():
    models = lora_seeds()
    ensembles = [Ensemble(models), Ensemble(models, share_frozen=False)]
    assert ensembles[0].shared_names and not ensembles[1].shared_names
    assert list(ensembles[1].stacked_parameters()) == ensembles[1].names  # E copies of all
    opts = [
        make_optimizer("adam", [p for p in ens.parameters() if p.requires_grad], lr=1e-2,
                       member_dims=1)
        for ens in ensembles
    ]  # fmt: skip
    x = tokens()
    for _ in range(3):
        for ens, opt in zip(ensembles, opts, strict=True):
            opt.zero_grad()
            ens(x).square().mean(dim=(1, 2, 3)).sum().backward()
            opt.step()
    for e in range(3):
        ours, stacked = ensembles[0].member_parameters(e), ensembles[1].member_parameters(e)
        for name in ensembles[0].names:
            assert (ours[name] - stacked[name]).abs().max() <= 1e-12, name


def test_members_get_the_shared_tensor_and_member_copies_own_their_weights():
    models = lora_seeds(2)
    ensemble = Ensemble(models)
    shared = ensemble.shared_parameters()["embed.weight"]
    for e in range(2):
        assert ensemble.member_parameters(e)["embed.weight"] is shared
        assert list(ensemble.member_parameters(e)) == ensemble.names
    x = tokens()
    copies = [ensemble.member(e) for e in range(2)]
    for e, copy_ in enumerate(copies):
        assert torch.equal(copy_(x), models[e](x))
        assert copy_.embed.weight.data_ptr() != shared.data_ptr()
    with torch.no_grad():  # a member copy is standalone: changing it changes nothing else
        copies[0].embed.weight.zero_()
    assert torch.equal(shared, models[0].embed.weight)
    assert torch.equal(ensemble.member(1)(x), models[1](x))


def test_frozen_parameters_that_differ_between_members_stay_stacked():
    models = members(2)  # different seeds: different weights
    for m in models:
        m.embed.weight.requires_grad_(False)
    ensemble = Ensemble(models)
    assert "embed.weight" not in ensemble.shared_names
    embed = ensemble.stacked_parameters()["embed.weight"]
    assert embed.shape[0] == 2 and not embed.requires_grad
    assert torch.equal(embed[1], models[1].embed.weight)
    x = tokens()
    out = ensemble(x)
    assert (out - torch.stack([m(x) for m in models])).abs().max() <= 1e-12
    out.square().sum().backward()
    assert embed.grad is None


def test_trainable_parameters_are_never_shared():
    model = members(1)[0]
    ensemble = Ensemble([model, model])  # equal, but trainable: each member steps its own
    assert ensemble.shared_names == [] and ensemble.shared_parameters() == {}
    assert list(ensemble.stacked_parameters()) == ensemble.names


@pytest.mark.parametrize(
    "overrides",
    [{}, {"positional": "alibi", "n_key_value_heads": 2}, {"causal": False}],
    ids=["causal", "alibi-gqa", "bidirectional"],
)
def test_fused_attention_under_vmap_gives_the_separate_models(overrides):
    """sdpa=True on the vmap path (native=False): torch runs the fused kernel member by member
    (no batching rule), silently."""
    models = lora_seeds(**overrides)
    ensemble = Ensemble(models, sdpa=True, native=False)
    plain = Ensemble(models, native=False)
    assert not plain.sdpa  # vmap's default: the plain ops
    x = torch.stack([tokens(seed=1), tokens(seed=2), tokens(seed=3)])  # [E, B, T]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ensemble(x, member_inputs=True)
        out.square().sum().backward()
    assert not [w for w in caught if "performance drop" in str(w.message)]
    reference = torch.stack([m(x[e]) for e, m in enumerate(models)])
    assert (out - reference).abs().max() <= 1e-12
    assert (out - plain(x, member_inputs=True)).abs().max() <= 1e-12
    for e, m in enumerate(models):
        m(x[e]).square().sum().backward()
    for name, p in ensemble.stacked_parameters().items():
        for e, m in enumerate(models):
            assert (p.grad[e] - m.get_parameter(name).grad).abs().max() <= 1e-12, name


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


@pytest.mark.slow
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


class _Tied(nn.Module):
    """An embedding whose transpose is the output layer (one parameter, two modules)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(7, 5, dtype=torch.float64)
        self.head = nn.Linear(5, 7, bias=False, dtype=torch.float64)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(tokens)))


@pytest.mark.parametrize("vectorize", [True, False])
def test_tied_parameters_stay_tied_in_the_ensemble(vectorize):
    members = [_Tied(0), _Tied(1)]
    ensemble = Ensemble(members, vectorize=vectorize)
    assert ensemble.names == ["embed.weight"]
    tokens = torch.tensor([[0, 3, 6], [2, 2, 5]])
    out = ensemble(tokens)
    for e, member in enumerate(members):  # the loop is exact; vmap batches the matmuls
        ref = member(tokens)
        assert float((out[e] - ref).abs().max()) <= 1e-13 * float(ref.abs().max())
