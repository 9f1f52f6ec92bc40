"""Tests for gaugelab.models.heads: the per-head views of a parameter mapping equal the
Transformer's own (one model, and every member of an ensemble), and the QK/OV invariants do not
see the head gauge."""

import pytest
import torch

from gaugelab.models import (
    Ensemble,
    Transformer,
    TransformerConfig,
    head_weight,
    head_weights,
    ov_invariants,
    qk_invariants,
)
from gaugelab.models.symmetry import GaugeElements, apply_gauge, head_gauge, ov_gauge

F64 = torch.float64
# grouped-query attention: 4 query heads read 2 key/value heads (group size 2)
GQA = TransformerConfig(
    n_layers=2, d_model=12, n_heads=4, n_key_value_heads=2, d_head=3, d_mlp=8, d_vocab=7,
    n_ctx=4, init_std=0.5,
)  # fmt: skip


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def params(model: Transformer) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in model.named_parameters()}


def views(model: Transformer) -> tuple[torch.Tensor, ...]:
    """The model's own properties: W_Q, W_K, W_V, W_O and the per-layer invariants, stacked."""
    L = model.config.n_layers
    with torch.no_grad():
        qk = torch.stack([model.qk_invariant(layer) for layer in range(L)])
        ov = torch.stack([model.ov_invariant(layer) for layer in range(L)])
        return model.W_Q, model.W_K, model.W_V, model.W_O, qk, ov


def test_head_views_of_a_gqa_model_equal_its_properties_exactly():
    model = Transformer(GQA, seed=1, dtype=F64)
    W_Q, W_K, W_V, W_O, qk, ov = views(model)
    weights = head_weights(params(model), GQA)
    assert weights.W_Q.shape == (2, 4, 12, 3) and weights.W_O.shape == (2, 4, 3, 12)
    assert weights.W_K.shape == (2, 2, 12, 3) and weights.W_V.shape == (2, 2, 12, 3)
    for mine, theirs in zip(weights, (W_Q, W_K, W_V, W_O), strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(qk_invariants(params(model), GQA), qk)
    assert torch.equal(ov_invariants(params(model), GQA), ov)


def test_invariants_are_the_per_head_products_with_the_key_value_head_of_each_query_head():
    model = Transformer(GQA, seed=2, dtype=F64)
    W_Q, W_K, W_V, W_O = head_weights(params(model), GQA)
    qk, ov = qk_invariants(params(model), GQA), ov_invariants(params(model), GQA)
    assert qk.shape == ov.shape == (2, 4, 12, 12)
    for layer in range(2):
        for h in range(4):
            g = h // 2  # query head h reads key/value head h // group_size
            torch.testing.assert_close(qk[layer, h], W_Q[layer, h] @ W_K[layer, g].T,
                                       rtol=0, atol=1e-14)  # fmt: skip
            torch.testing.assert_close(ov[layer, h], W_V[layer, g] @ W_O[layer, h],
                                       rtol=0, atol=1e-14)  # fmt: skip


def test_head_views_of_stacked_ensemble_parameters_equal_each_members_properties_exactly():
    members = [Transformer(GQA, seed=s, dtype=F64) for s in (3, 4, 5)]
    stacked = {n: p.detach() for n, p in Ensemble(members).stacked_parameters().items()}
    weights = head_weights(stacked, GQA)
    qk, ov = qk_invariants(stacked, GQA), ov_invariants(stacked, GQA)
    assert weights.W_Q.shape == (3, 2, 4, 12, 3) and qk.shape == (3, 2, 4, 12, 12)
    for e, model in enumerate(members):
        mine = (*(w[e] for w in weights), qk[e], ov[e])
        for a, b in zip(mine, views(model), strict=True):
            assert torch.equal(a, b)


def test_qk_invariants_do_not_see_the_head_gauge_and_ov_invariants_do_not_see_the_ov_gauge():
    model = Transformer(GQA, seed=6, dtype=F64)
    gen = torch.Generator().manual_seed(0)
    qk_twin = apply_gauge(model, GaugeElements(qk=head_gauge(GQA).sample(gen, F64)))
    ov_twin = apply_gauge(model, GaugeElements(ov=ov_gauge(GQA).sample(gen, F64)))
    ensemble = Ensemble([model, qk_twin, ov_twin])
    stacked = {n: p.detach() for n, p in ensemble.stacked_parameters().items()}
    W_Q, _, W_V, _ = head_weights(stacked, GQA)
    assert rel(W_Q[1], W_Q[0]) > 1e-2 and rel(W_V[2], W_V[0]) > 1e-2  # really another basis
    qk, ov = qk_invariants(stacked, GQA), ov_invariants(stacked, GQA)
    assert rel(qk[1], qk[0]) <= 1e-12
    assert rel(ov[2], ov[0]) <= 1e-12


def test_head_views_carry_gradients_to_the_parameters():
    model = Transformer(GQA, seed=7, dtype=F64)
    qk_invariants(dict(model.named_parameters()), GQA).sum().backward()
    assert model.blocks[1].attn.q_proj.weight.grad.abs().sum() > 0
    assert model.blocks[1].attn.k_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda p: p.pop("blocks.1.attn.k_proj.weight"), r"no parameter 'blocks\.1\.attn\.k_proj"),
        (lambda p: p.update({"blocks.0.attn.o_proj.weight": torch.zeros(12, 6)}),
         r"o_proj\.weight has shape \(12, 6\); allowed: \[\*, 12, 12\]"),
    ],
    ids=["missing", "shape"],
)  # fmt: skip
def test_head_views_reject_a_mapping_that_does_not_fit_the_config(change, match):
    p = params(Transformer(GQA, dtype=F64))
    change(p)
    with pytest.raises(ValueError, match=match):
        head_weights(p, GQA)


def test_head_weight_rejects_an_unknown_role():
    with pytest.raises(ValueError, match="role='W_X'; allowed: W_Q, W_K, W_V, W_O"):
        head_weight(params(Transformer(GQA, dtype=F64)), GQA, "W_X")


def _adapted(merge: bool):
    """A GQA model with LoRA on q_proj and o_proj (random factors, both nonzero) and the plain
    model whose weights are the effective ones, W + s·B A."""
    from gaugelab.models.lora import inject_lora, merge_lora

    model = Transformer(GQA, dtype=F64, seed=1)
    plain = Transformer(GQA, dtype=F64, seed=1)
    gen = torch.Generator().manual_seed(5)
    factors = {}
    for layer in range(GQA.n_layers):
        for proj in ("q_proj", "o_proj"):
            weight = plain.get_submodule(f"blocks.{layer}.attn.{proj}").weight
            A = torch.randn(2, weight.shape[1], generator=gen, dtype=F64)
            B = torch.randn(weight.shape[0], 2, generator=gen, dtype=F64)
            factors[f"blocks.{layer}.attn.{proj}"] = (A, B)
            with torch.no_grad():
                weight += (B @ A) * 1.5  # s = alpha / r = 3 / 2
    inject_lora(model, ["q_proj", "o_proj"], r=2, alpha=3.0, init="given", factors=factors)
    if merge:
        merge_lora(model)
    return model, plain


def test_per_head_views_of_a_lora_model_name_the_adapter_and_the_way_out():
    model, _ = _adapted(merge=False)
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.q_proj is LoRA-adapted.*"
                                         r"effective_weights\(model\)"):  # fmt: skip
        _ = model.W_Q
    with pytest.raises(ValueError, match="LoRA-adapted"):
        qk_invariants(params(model), GQA)


@pytest.mark.parametrize("merge", [False, True], ids=["unmerged", "merged"])
def test_effective_weights_give_the_per_head_views_of_the_model_that_runs(merge):
    from gaugelab.models.heads import effective_weights

    model, plain = _adapted(merge)
    got = head_weights(effective_weights(model), GQA)
    for mine, reference in zip(got, views(plain)[:4], strict=True):
        assert (mine - reference).abs().max() <= 1e-12
    x = torch.randint(0, GQA.d_vocab, (3, GQA.n_ctx), generator=torch.Generator().manual_seed(0))
    assert (model(x) - plain(x)).abs().max() <= 1e-12  # the same function
    assert set(effective_weights(model)) == set(dict(plain.named_parameters()))
    if not merge:  # the effective weight is connected to the factors
        qk_invariants(effective_weights(model), GQA).square().sum().backward()
        assert model.blocks[0].attn.q_proj.lora_A.grad.abs().sum() > 0
