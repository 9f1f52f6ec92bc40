"""Tests for gaugelab.models.lora: the LoRA layer in PEFT's layout (float64 identities)."""

import dataclasses
import math

import pytest
import torch
from torch import nn

from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.models.lora import (
    FactorRecord,
    LoRALinear,
    inject_lora,
    lora_modules,
    lora_parameter_groups,
    lora_scale,
    merge_lora,
    module_seed,
    pattern_key,
    target_matches,
    unmerge_lora,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

F64 = torch.float64
EXACT, LOOSE = 1e-11, 1e-9
SMALL = TransformerConfig(
    n_layers=2, d_model=16, n_heads=2, d_head=8, d_mlp=24, d_vocab=11, n_ctx=5
)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def linear(d_in=6, d_out=4, seed=0):
    layer = nn.Linear(d_in, d_out, dtype=F64)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(d_out, d_in, generator=gen(seed), dtype=F64))
        layer.bias.copy_(torch.randn(d_out, generator=gen(seed + 1), dtype=F64))
    return layer


def given(r, d_in, d_out, seed=0):
    return (
        torch.randn(r, d_in, generator=gen(seed), dtype=F64),
        torch.randn(d_out, r, generator=gen(seed + 1), dtype=F64),
    )


def tokens(seed=0, batch=3):
    return torch.randint(0, SMALL.d_vocab, (batch, SMALL.n_ctx), generator=gen(seed))


# --- the layer -------------------------------------------------------------------------------


def test_scale_is_alpha_over_r_or_alpha_over_sqrt_r():
    assert lora_scale(8, 4) == 2.0
    assert lora_scale(8, 4, use_rslora=True) == 4.0  # 8/√4
    assert lora_scale(3, 2, use_rslora=True) == 3 / math.sqrt(2)
    for bad in (dict(alpha=1.0, r=0), dict(alpha=float("nan"), r=2), dict(alpha=1.0, r=2.0)):
        with pytest.raises(ValueError, match="lora_scale"):
            lora_scale(**bad)


def test_forward_is_base_plus_scaled_down_then_up_product():
    base = linear()
    A, B = given(3, 6, 4)
    layer = LoRALinear(base, 3, 6.0, init="given", factors=(A, B))
    x = torch.randn(5, 6, generator=gen(9), dtype=F64)
    expected = x @ base.weight.T + base.bias + 2.0 * (x @ A.T) @ B.T  # s = 6/3
    assert (layer(x) - expected).abs().max() <= EXACT
    assert (layer.delta_weight() - 2.0 * B @ A).abs().max() <= EXACT
    assert layer.lora_A.shape == (3, 6) and layer.lora_B.shape == (4, 3)  # [r, d_in], [d_out, r]
    assert not base.weight.requires_grad and not base.bias.requires_grad
    assert layer.lora_A.requires_grad and layer.lora_B.requires_grad


def test_rank_above_min_dimension_is_accepted_and_the_product_rank_is_capped():
    A, B = given(9, 6, 4)  # r = 9 > min(6, 4)
    layer = LoRALinear(linear(), 9, 9.0, init="given", factors=(A, B))
    assert torch.linalg.matrix_rank(layer.delta_weight()) == 4  # rank(B A) <= min(d_out, d_in)
    assert layer(torch.randn(2, 6, dtype=F64, generator=gen(1))).shape == (2, 4)


def test_dropout_acts_on_the_adapter_input_only():
    base = linear()
    A, B = given(2, 6, 4)
    layer = LoRALinear(base, 2, 2.0, init="given", factors=(A, B), dropout=0.5)
    x = torch.randn(64, 6, generator=gen(3), dtype=F64)
    layer.eval()
    assert (layer(x) - (base(x) + (x @ A.T) @ B.T)).abs().max() <= EXACT
    layer.train()
    with torch.no_grad():
        layer.lora_B.zero_()
    assert torch.equal(layer(x), base(x))  # the base path never sees the dropout mask


@pytest.mark.parametrize(
    ("init", "zero_factor"),
    [
        ("standard", "up"),
        ("peft-default", "up"),
        ("reversed", "down"),
        ("peft-gaussian", "up"),
        ("zero", "both"),
    ],
)
def test_init_families_draw_their_stated_distributions(init, zero_factor):
    r, d_in, d_out = 4, 6, 5
    layer = LoRALinear(linear(d_in, d_out), r, 8.0, init=init, seed=7, name="m")
    A, B = layer.lora_A.detach(), layer.lora_B.detach()
    g = gen(module_seed(7, "m"))
    if init == "standard":  # hu2021lora: Gaussian A (variance 1/d_in), B = 0
        assert torch.equal(A, torch.empty(r, d_in, dtype=F64).normal_(0, d_in**-0.5, generator=g))
    elif init == "peft-default":  # PEFT: kaiming_uniform_(A, a=√5), B = 0
        assert torch.equal(
            A,
            nn.init.kaiming_uniform_(torch.empty(r, d_in, dtype=F64), a=math.sqrt(5), generator=g),
        )
    elif init == "peft-gaussian":  # PEFT: normal_(A, std=1/r), B = 0
        assert torch.equal(
            A, nn.init.normal_(torch.empty(r, d_in, dtype=F64), std=1 / r, generator=g)
        )
    elif init == "reversed":  # B drawn as nn.Linear(r, d_out) draws its weight
        assert torch.equal(
            B,
            nn.init.kaiming_uniform_(torch.empty(d_out, r, dtype=F64), a=math.sqrt(5), generator=g),
        )
    assert layer.record.zero_factor == zero_factor
    assert (not A.any()) == (zero_factor in ("down", "both"))
    assert (not B.any()) == (zero_factor in ("up", "both"))
    assert layer.record.init == init and layer.record.seed == 7


@pytest.mark.parametrize(
    ("init", "factor", "variance"),
    [
        ("standard", "down", 1 / 400),
        ("peft-default", "down", 1 / (3 * 400)),
        ("peft-gaussian", "down", 1 / 64**2),
        ("reversed", "up", 1 / (3 * 64)),
    ],
)
def test_recorded_variance_is_the_drawn_variance(init, factor, variance):
    layer = LoRALinear(linear(400, 300), 64, 1.0, init=init, seed=0)
    drawn = (layer.lora_A if factor == "down" else layer.lora_B).detach()
    recorded = getattr(layer.record, f"{factor}_variance")
    assert recorded == pytest.approx(variance, rel=1e-15)
    assert drawn.var().item() == pytest.approx(recorded, rel=0.05)  # ≥ 19 200 samples


def test_seeded_draws_depend_only_on_seed_and_module():
    one = Transformer(SMALL, seed=0, dtype=F64)
    two = Transformer(SMALL, seed=0, dtype=F64)
    a = inject_lora(one, ["q_proj"], 2, 2.0, seed=5)
    b = inject_lora(two, ["q_proj", "fc_in"], 2, 2.0, seed=5)
    key = "blocks.1.attn.q_proj"
    assert torch.equal(a[key].lora_A, b[key].lora_A)
    other = inject_lora(Transformer(SMALL, seed=0, dtype=F64), ["q_proj"], 2, 2.0, seed=6)
    assert not torch.equal(a[key].lora_A, other[key].lora_A)
    drawn = inject_lora(Transformer(SMALL, seed=0, dtype=F64), ["q_proj"], 2, 2.0, generator=gen(5))
    assert drawn[key].record.seed is None


def test_layer_refuses_bad_arguments():
    base = linear()
    cases = [
        (dict(r=0, alpha=1.0), "r=0"),
        (dict(r=2, alpha=1.0, dropout=1.0), "dropout"),
        (dict(r=2, alpha=1.0, init="kaiming"), "init='kaiming'"),
        (dict(r=2, alpha=1.0, init="given"), "factors exactly when"),
        (dict(r=2, alpha=1.0, factors=given(2, 6, 4)), "factors exactly when"),
        (dict(r=2, alpha=1.0, init="given", factors=given(3, 6, 4)), r"shape \(3, 6\)"),
        (
            dict(r=2, alpha=1.0, init="given", factors=tuple(t.float() for t in given(2, 6, 4))),
            "dtype",
        ),
        (dict(r=2, alpha=1.0, seed=1, generator=gen(1)), "both seed and generator"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            LoRALinear(base, **kwargs)
    with pytest.raises(TypeError, match=r"allowed: nn\.Linear"):
        LoRALinear(nn.Conv1d(2, 2, 1), 2, 1.0)


# --- the seed's zero-product mechanisms and factor trace (§0x07C, §0x07F) ----------------------


def bilinear_loss(layer, G):
    """``L = s⟨G, B A⟩`` with a zero base weight, through the layer's forward: x = I gives
    ``y = s (B A)ᵀ``."""
    eye = torch.eye(layer.base_layer.in_features, dtype=F64)
    return (layer(eye) * G.T).sum()


def zero_base(d=2):
    base = nn.Linear(d, d, bias=False, dtype=F64)
    with torch.no_grad():
        base.weight.zero_()
    return base


G_FIXTURE = torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=F64)  # the seed's G (§0x07C)


def test_nonzero_factors_with_zero_product_both_move():
    B0 = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=F64)
    A0 = torch.tensor([[0.0, 0.0], [0.0, 1.0]], dtype=F64)
    layer = LoRALinear(zero_base(), 2, 2.0, init="given", factors=(A0, B0))  # s = 1
    assert not layer.delta_weight().any() and layer.record.zero_factor == "none"
    bilinear_loss(layer, G_FIXTURE).backward()
    assert torch.equal(layer.lora_B.grad, torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=F64))
    assert torch.equal(layer.lora_A.grad, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=F64))


@pytest.mark.parametrize(("init", "dead"), [("standard", "A"), ("reversed", "B"), ("zero", "AB")])
def test_zero_factor_starts_block_the_expected_gradients(init, dead):
    layer = LoRALinear(zero_base(), 2, 2.0, init=init, seed=3)
    bilinear_loss(layer, G_FIXTURE).backward()
    A0, B0 = layer.lora_A.detach(), layer.lora_B.detach()
    expected = {"A": B0.T @ G_FIXTURE, "B": G_FIXTURE @ A0.T}  # s = 1
    for letter, grad in (("A", layer.lora_A.grad), ("B", layer.lora_B.grad)):
        assert torch.equal(grad, torch.zeros(2, 2, dtype=F64)) == (letter in dead)
        assert (grad - expected[letter]).abs().max() <= EXACT


def test_per_factor_sgd_step_reproduces_the_seed_trace():
    B = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64)
    A = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=F64)
    model = nn.Sequential(zero_base())
    inject_lora(model, ["0"], 2, 2.0, init="given", factors={"0": (A, B)})
    layer = model[0]
    groups = lora_parameter_groups(model, lr_A=1 / 5, lr_B=1 / 10)
    assert [g["factor"] for g in groups] == ["down", "up"]
    assert groups[0]["params"][0] is layer.lora_A and groups[1]["params"][0] is layer.lora_B
    assert (layer.record.lr_down, layer.record.lr_up) == (0.2, 0.1)
    before = layer.delta_weight().detach()
    opt = torch.optim.SGD(groups)
    bilinear_loss(layer, G_FIXTURE).backward()
    assert torch.equal(layer.lora_B.grad, torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=F64))
    assert torch.equal(layer.lora_A.grad, torch.tensor([[1.0, 1.0], [0.0, 2.0]], dtype=F64))
    opt.step()
    step = layer.delta_weight().detach() - before
    # Δ+ − Δ = [[−14/25, −11/50], [0, −43/50]] (seed fixture 0x07D)
    assert (
        step - torch.tensor([[-14 / 25, -11 / 50], [0.0, -43 / 50]], dtype=F64)
    ).abs().max() <= EXACT


def test_parameter_groups_refuse_bad_rates_and_plain_models():
    model = Transformer(SMALL, seed=0, dtype=F64)
    with pytest.raises(ValueError, match="no LoRA factors"):
        lora_parameter_groups(model, 1e-3, 1e-3)
    inject_lora(model, ["q_proj"], 2, 2.0)
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="lr_B"):
            lora_parameter_groups(model, 1e-3, bad)


# --- injection -------------------------------------------------------------------------------


def test_inject_wraps_only_targets_and_freezes_the_rest():
    model = Transformer(SMALL, seed=0, dtype=F64)
    x = tokens()
    before = model(x).detach()
    layers = inject_lora(
        model,
        ["q_proj", "mlp.fc_out"],
        4,
        8.0,
        rank_pattern={"^blocks\\.1\\.attn\\.q_proj": 2},
        alpha_pattern={"fc_out": 2.0},
    )
    assert list(layers) == [
        "blocks.0.attn.q_proj",
        "blocks.0.mlp.fc_out",
        "blocks.1.attn.q_proj",
        "blocks.1.mlp.fc_out",
    ]
    assert {k: (v.r, v.scale) for k, v in layers.items()} == {
        "blocks.0.attn.q_proj": (4, 2.0),
        "blocks.0.mlp.fc_out": (4, 0.5),
        "blocks.1.attn.q_proj": (2, 4.0),
        "blocks.1.mlp.fc_out": (4, 0.5),
    }
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert trainable == sorted(f"{k}.{f}" for k in layers for f in ("lora_A", "lora_B"))
    assert torch.equal(model(x), before)  # B = 0: the function is unchanged
    assert lora_modules(model) == layers


def test_inject_with_a_regex_string_matches_whole_paths():
    model = Transformer(SMALL, seed=0, dtype=F64)
    layers = inject_lora(model, r"blocks\.1\.attn\.(q|v)_proj", 2, 2.0)
    assert list(layers) == ["blocks.1.attn.q_proj", "blocks.1.attn.v_proj"]


def test_inject_refuses_no_match_non_linear_match_and_double_adaptation():
    model = Transformer(SMALL, seed=0, dtype=F64)
    with pytest.raises(ValueError, match=r"matched no module; nn\.Linear modules: blocks\.0\.attn"):
        inject_lora(model, ["wq"], 2, 2.0)
    with pytest.raises(ValueError, match=r"'blocks\.0\.attn' \(Attention\)"):
        inject_lora(model, ["attn"], 2, 2.0)
    with pytest.raises(ValueError, match="not a valid regex"):
        inject_lora(model, "(", 2, 2.0)
    with pytest.raises(ValueError, match=r"rank_pattern\['q_proj'\]=0"):
        inject_lora(model, ["q_proj"], 2, 2.0, rank_pattern={"q_proj": 0})
    inject_lora(model, ["q_proj"], 2, 2.0)
    with pytest.raises(ValueError, match="already a LoRALinear"):
        inject_lora(model, ["q_proj"], 2, 2.0)
    assert inject_lora(model, ["base_layer", "k_proj"], 2, 2.0).keys() == {
        "blocks.0.attn.k_proj",
        "blocks.1.attn.k_proj",
    }


def test_inject_given_factors_needs_one_pair_per_target():
    model = Transformer(SMALL, seed=0, dtype=F64)
    pair = given(2, 16, 16)
    with pytest.raises(ValueError, match=r"lack \['blocks.1.attn.q_proj'\]"):
        inject_lora(model, ["q_proj"], 2, 2.0, init="given", factors={"blocks.0.attn.q_proj": pair})
    with pytest.raises(ValueError, match="init='given'"):
        inject_lora(model, ["q_proj"], 2, 2.0, factors={"blocks.0.attn.q_proj": pair})


# --- PEFT's matching rules -------------------------------------------------------------------


PATHS = [
    "blocks.0.attn.q_proj",
    "blocks.1.attn.q_proj",
    "blocks.1.mlp.fc_in",
    "q_proj",
    "encoder.blocks.0.attn.q_proj",
    "blocks10attnXq_proj",
]
PATTERNS = [
    "q_proj",
    "attn.q_proj",
    "1.attn.q_proj",
    "blocks.0.attn.q_proj",
    "^blocks\\.0\\.attn\\.q_proj",
    "^q_proj",
    "fc_.*",
    "blocks\\.[01]\\..*",
    "proj",
    ".*q_proj",
]


def test_pattern_key_follows_the_suffix_after_a_dot_rule():
    assert pattern_key(["q_proj"], "blocks.0.attn.q_proj") == "q_proj"
    assert pattern_key(["proj"], "blocks.0.attn.q_proj") is None  # not after a dot
    assert pattern_key(["^blocks\\.0\\.attn\\.q_proj"], "encoder.blocks.0.attn.q_proj") is None
    assert pattern_key(["blocks.0.attn.q_proj"], "encoder.blocks.0.attn.q_proj") is not None
    assert pattern_key({"fc_.*": 1, "q_proj": 2, "1.mlp.fc_in": 3}, "blocks.1.mlp.fc_in") == "fc_.*"
    assert target_matches(["q_proj"], "q_proj") and not target_matches(["proj"], "a.q_proj")
    assert target_matches("blocks\\..*proj", "blocks.1.attn.q_proj")
    assert not target_matches("q_proj", "blocks.1.attn.q_proj")  # a string is a full match


def test_matching_rules_agree_with_peft():
    pytest.importorskip("peft")
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists
    from peft.utils.other import get_pattern_key

    for key in PATHS:
        for i in range(len(PATTERNS)):
            patterns = PATTERNS[i:] + PATTERNS[:i]  # every key first once: order matters
            ours = pattern_key(patterns, key)
            assert get_pattern_key(patterns, key) == (key if ours is None else ours), (key, i)
        for targets in (
            ["q_proj"],
            ["attn.q_proj", "fc_in"],
            ["proj"],
            ["blocks.1.mlp.fc_in"],
            "blocks\\.1\\..*",
            ".*q_proj",
            "q_proj",
        ):
            config = LoraConfig(target_modules=targets)
            expected = bool(check_target_module_exists(config, key))
            assert target_matches(targets, key) == expected, (key, targets)


# --- merge -----------------------------------------------------------------------------------


def adapted_transformer(seed=0, lora_seed=0):
    model = Transformer(SMALL, seed=seed, dtype=F64)
    layers = inject_lora(
        model,
        ["q_proj", "v_proj", "fc_in"],
        3,
        6.0,
        seed=lora_seed,
        rank_pattern={"v_proj": 2},
        use_rslora=True,
    )
    with torch.no_grad():
        for i, layer in enumerate(layers.values()):
            g = gen(1000 * lora_seed + i)
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=g, dtype=F64))
    return model, layers


def test_merge_keeps_the_function_and_unmerge_restores_the_base():
    model, layers = adapted_transformer()
    x = tokens()
    adapted = model(x).detach()
    weights = {k: v.base_layer.weight.detach().clone() for k, v in layers.items()}
    assert merge_lora(model) == list(layers)
    assert (model(x) - adapted).abs().max() <= EXACT
    for k, layer in layers.items():
        assert (layer.base_layer.weight - weights[k] - layer.delta_weight()).abs().max() <= EXACT
        assert layer.merged and layer.record.merged
        assert "optimizer moments" in layer.record.history[-1]
    with pytest.raises(ValueError, match="already merged"):
        merge_lora(model)
    with pytest.raises(ValueError, match="is already merged"):
        layers["blocks.0.attn.q_proj"].merge()
    unmerge_lora(model)
    for k, layer in layers.items():
        assert (layer.base_layer.weight - weights[k]).abs().max() <= EXACT
        assert not layer.merged and layer.record.history[-1].startswith("unmerged")
    assert (model(x) - adapted).abs().max() <= EXACT
    with pytest.raises(ValueError, match="not merged"):
        unmerge_lora(model)


def test_merge_lora_changes_nothing_when_one_layer_is_already_merged():
    model, layers = adapted_transformer()
    layers["blocks.1.mlp.fc_in"].merge()
    weights = {k: v.base_layer.weight.detach().clone() for k, v in layers.items()}
    with pytest.raises(ValueError, match=r"already merged: blocks.1.mlp.fc_in"):
        merge_lora(model)
    for k, layer in layers.items():
        assert torch.equal(layer.base_layer.weight, weights[k])


# --- the factor record -----------------------------------------------------------------------


def test_factor_record_round_trips_through_json_and_states_the_abi():
    _, layers = adapted_transformer()
    record = layers["blocks.0.attn.v_proj"].record
    assert (record.down_layout, record.up_layout, record.product_order) == (
        "[r, d_in]",
        "[d_out, r]",
        "up @ down",
    )
    assert (record.r, record.scale, record.zero_factor) == (2, 6.0 / math.sqrt(2), "up")
    assert FactorRecord.from_json(record.to_json()) == record


def test_factor_record_refuses_another_orientation_a_wrong_scale_and_unknown_fields():
    _, layers = adapted_transformer()
    values = layers["blocks.0.attn.q_proj"].record.to_dict()
    for change, message in (
        ({"down_layout": "[d_in, r]"}, "down_layout"),
        ({"product_order": "down @ up"}, "product_order"),
        ({"scale": 2.0}, "scale=2.0"),  # 6/√3 with rsLoRA
        ({"init": "kaiming"}, "init='kaiming'"),
        ({"colour": "blue"}, r"unknown fields \['colour'\]"),
    ):
        with pytest.raises(ValueError, match=message):
            FactorRecord.from_dict({**values, **change})
    values.pop("r")
    with pytest.raises(ValueError, match=r"missing fields \['r'\]"):
        FactorRecord.from_dict(values)
    assert dataclasses.is_dataclass(FactorRecord)


# --- ensembles of seeds ----------------------------------------------------------------------


def test_lora_seeds_train_as_one_ensemble():
    members = [adapted_transformer(seed=0, lora_seed=s)[0] for s in range(3)]
    ensemble = Ensemble(members)
    x = tokens(batch=4)
    out = ensemble(x)
    reference = torch.stack([m(x) for m in members])
    assert (out - reference).abs().max() <= EXACT
    assert not torch.equal(reference[0], reference[1])  # the members differ
    groups = lora_parameter_groups(ensemble, lr_A=0.05, lr_B=0.1)
    assert all(g["member_dims"] == 1 for g in groups)
    assert sum(p.numel() for g in groups for p in g["params"]) == 3 * sum(
        p.numel() for n, p in members[0].named_parameters() if "lora_" in n
    )
    base_before = {n: p.detach().clone() for n, p in ensemble.shared_parameters().items()}
    assert list(base_before) == [n for n, _ in members[0].named_parameters() if "lora_" not in n]
    opt = torch.optim.SGD(groups)
    out.square().mean(dim=(1, 2, 3)).sum().backward()
    opt.step()
    for m in members:
        step = torch.optim.SGD(lora_parameter_groups(m, lr_A=0.05, lr_B=0.1))
        m(x).square().mean().backward()
        step.step()
    for name, stacked in ensemble.stacked_parameters().items():
        for e, m in enumerate(members):
            assert (stacked[e] - m.get_parameter(name)).abs().max() <= EXACT, name
    for name, before in base_before.items():
        assert torch.equal(ensemble.shared_parameters()[name], before), name
