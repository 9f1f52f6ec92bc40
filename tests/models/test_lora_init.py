"""Tests for gaugelab.models._lora_init: the LoRA initialisation families (float64).

Variance checks use the sample second moment ``m₂ = mean(x²)`` of ``N`` i.i.d. zero-mean
entries with variance ``σ²``: ``E[m₂] = σ²`` and ``sd(m₂)/σ² = √(Var(x²)/σ⁴ / N)``, which is
``√(2/N)`` for a Gaussian and ``√(0.8/N)`` for a uniform law. Each check allows five such
standard deviations (``√(2/N)`` for both laws, the larger), at ``N ≥ 16 384`` entries; the
draws are seeded, so the tests are deterministic and the bound says how far they may be from
the law.
"""

import math

import pytest
import torch
from torch import nn

from gaugelab.experiments.lora.spec import FinetuneSpec
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.lora import DEFAULT_INIT, INITS, FactorRecord, LoRALinear, inject_lora

pytestmark = pytest.mark.usefixtures("strict_dtypes")

F64 = torch.float64
SMALL = TransformerConfig(
    n_layers=1, d_model=16, n_heads=2, d_head=8, d_mlp=24, d_vocab=11, n_ctx=5
)
WIDTHS = (256, 1024)  # d_in; with r = 64, N = 16 384 and 65 536 entries of A
RANK = 64


def gen(seed):
    return torch.Generator().manual_seed(seed)


def adapter(init, d_in, d_out=8, r=RANK, seed=0):
    return LoRALinear(nn.Linear(d_in, d_out, bias=False, dtype=F64), r, 1.0, init=init, seed=seed)


def second_moment(t):
    return float((t * t).mean())


def five_sd(n):
    return 5 * math.sqrt(2 / n)  # relative: five standard deviations of m₂ (Gaussian, larger)


def test_seed_0x07F_standard_start_is_gaussian_A_and_exactly_zero_B():
    layer = adapter("standard", 512)
    A, B = layer.lora_A.detach(), layer.lora_B.detach()
    assert torch.equal(B, torch.zeros_like(B)) and A.dtype == F64
    assert layer.record.zero_factor == "up"
    assert layer.record.down_distribution == "normal(0, 1/512)"
    assert layer.record.down_variance == 1 / 512 and layer.record.up_variance == 0.0
    # the Gaussian law, not PEFT's uniform one (support |a| ≤ 1/√d_in):
    # P(|a| √d_in > 1) = 2(1 − Φ(1)) = erfc(1/√2) ≈ 0.3173
    n, p = A.numel(), math.erfc(1 / math.sqrt(2))
    tail = float((A.abs() * math.sqrt(512) > 1).double().mean())
    assert abs(tail - p) <= 5 * math.sqrt(p * (1 - p) / n)
    peft = adapter("peft-default", 512).lora_A.detach()
    assert float(peft.abs().max()) <= 1 / math.sqrt(512)


@pytest.mark.parametrize(("init", "constant"), [("standard", 1.0), ("peft-default", 1 / 3)])
def test_seed_0x07G_init_A_entry_variance_is_constant_over_d_in_at_two_widths(init, constant):
    moments = {}
    for d_in in WIDTHS:
        A = adapter(init, d_in).lora_A.detach()
        moments[d_in] = second_moment(A)
        assert abs(float(A.mean())) <= 5 * math.sqrt(constant / d_in / A.numel())
        assert moments[d_in] * d_in == pytest.approx(constant, rel=five_sd(A.numel()))
    ratio = moments[WIDTHS[0]] / moments[WIDTHS[1]]  # 4: the variance scales as 1/d_in
    n0, n1 = (RANK * d for d in WIDTHS)
    assert ratio == pytest.approx(WIDTHS[1] / WIDTHS[0], rel=5 * math.sqrt(2 / n0 + 2 / n1))


def test_peft_gaussian_variance_is_one_over_r_squared_whatever_the_width():
    for d_in in WIDTHS:  # PEFT's "gaussian": std 1/r; not an Init[A] start (no 1/d_in)
        A = adapter("peft-gaussian", d_in).lora_A.detach()
        assert second_moment(A) * RANK**2 == pytest.approx(1.0, rel=five_sd(A.numel()))


@pytest.mark.parametrize("r", [16, 64])
def test_seed_0x07G_reversed_start_is_init_B_zero_A_and_B_variance_one_third_over_r(r):
    layer = adapter("reversed", 8, d_out=1024, r=r)
    A, B = layer.lora_A.detach(), layer.lora_B.detach()
    assert torch.equal(A, torch.zeros_like(A)) and layer.record.zero_factor == "down"
    assert layer.record.up_variance == 1 / (3 * r)  # U(±1/√r): Θ(1/r), the order of Init[B]
    assert second_moment(B) * 3 * r == pytest.approx(1.0, rel=five_sd(B.numel()))


@pytest.mark.parametrize(
    ("ours", "theirs"), [("peft-default", True), ("peft-gaussian", "gaussian")]
)
def test_peft_named_starts_reproduce_peft_lora_layer_init_on_the_same_seed(
    ours, theirs, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    peft = pytest.importorskip("peft")
    r, d_in, d_out, seed = 4, 40, 30, 11
    model = nn.Sequential(nn.Linear(d_in, d_out, bias=False, dtype=F64))
    config = peft.LoraConfig(target_modules=["0"], r=r, lora_alpha=8, init_lora_weights=theirs)
    wrapped = peft.get_peft_model(model, config)
    (layer,) = (m for m in wrapped.modules() if isinstance(m, peft.tuners.lora.LoraLayer))
    with torch.random.fork_rng(devices=[]):  # PEFT draws from the global generator
        torch.manual_seed(seed)
        layer.reset_lora_parameters("default", theirs)  # PEFT's own layer initialisation
    A, B = layer.lora_A["default"].weight.detach(), layer.lora_B["default"].weight.detach()
    base = nn.Linear(d_in, d_out, bias=False, dtype=F64)
    mine = LoRALinear(base, r, 8.0, init=ours, generator=gen(seed))
    assert A.dtype == F64 and torch.equal(mine.lora_A.detach(), A)
    assert torch.equal(mine.lora_B.detach(), B) and not B.any()


def test_default_init_is_peft_default():
    assert DEFAULT_INIT == "peft-default" and DEFAULT_INIT in INITS
    assert adapter(DEFAULT_INIT, 6, r=2).record.init == "peft-default"
    assert LoRALinear(nn.Linear(6, 4, dtype=F64), 2, 1.0).record.init == "peft-default"
    assert FinetuneSpec().init == "peft-default"  # the fine-tune starts where PEFT's would


@pytest.mark.parametrize("name", ["gaussian", "kaiming", "Standard", ""])
def test_unknown_init_is_a_value_error_naming_the_value_and_the_choices(name):
    calls = (
        lambda: LoRALinear(nn.Linear(6, 4, dtype=F64), 2, 1.0, init=name),
        lambda: inject_lora(Transformer(SMALL, seed=0, dtype=F64), ["q_proj"], 2, 2.0, init=name),
        lambda: FinetuneSpec(init=name),
    )
    for call in calls:
        with pytest.raises(ValueError) as caught:
            call()
        message = str(caught.value)
        assert f"init={name!r}" in message
        assert all(choice in message for choice in INITS if choice != "given")
        if name == "gaussian":
            assert "now 'peft-gaussian'" in message and "'standard'" in message
    with pytest.raises(ValueError, match="init='given'"):
        FinetuneSpec(init="given")  # a fine-tune draws its factors


def test_records_written_under_the_old_names_read_under_the_new_ones():
    record = adapter("peft-default", 6, r=2).record.to_dict()
    old = {**record, "init": "standard"}  # before peft-default had its name
    assert FactorRecord.from_dict(old).init == "peft-default"
    gaussian = {**adapter("peft-gaussian", 6, r=2).record.to_dict(), "init": "gaussian"}
    assert FactorRecord.from_dict(gaussian).init == "peft-gaussian"
    standard = adapter("standard", 6, r=2).record
    assert FactorRecord.from_json(standard.to_json()) == standard  # stays standard
