"""Half-precision adapters made by PEFT itself: inspect, compare and compose keep their ranks.

A bfloat16 adapter of a Llama-style model (built from a config, random weights) with d = 128:
``max(m, n)·eps(bfloat16) = 1``, so a tolerance taken from the storage dtype calls every module
rank 0. The stored factors are exact; the rank tolerance is the computation's
(:func:`gaugelab.lowrank.numerical_rank`, factors)."""

import warnings

import pytest
import torch

from gaugelab.adapters import Adapter
from gaugelab.experiments.lora.inspect import inspect_lora
from gaugelab.experiments.lora_compare.compose import compose_lora
from gaugelab.experiments.lora_compare.run import compare_lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

R = 4


def _adapter(folder, seed: int, dtype: torch.dtype):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=64,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(
            transformers.LlamaForCausalLM(config),
            peft.LoraConfig(r=R, lora_alpha=2 * R, init_lora_weights=False,  # B non-zero
                            target_modules=["q_proj", "v_proj", "down_proj"]),
        )  # fmt: skip
        model.to(dtype).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("half")
    return [_adapter(tmp / f"a{seed}", seed, torch.bfloat16) for seed in (0, 1)]


def test_a_bfloat16_adapter_has_its_configured_rank_everywhere(adapters, tmp_path):
    assert 128 * torch.finfo(torch.bfloat16).eps >= 1  # the storage dtype's rule gives rank 0
    result = inspect_lora(adapters[0], store=tmp_path / "none.sqlite")
    assert len(result.modules) == 6
    for m in result.modules:
        assert m.configured == R and m.policy("numerical") == R and m.policy("algebraic") == R
    assert [m.layer for m in result.modules] == [0, 0, 0, 1, 1, 1]  # read from Llama's names
    assert {m.family for m in result.modules} == {"attention", "mlp"}


def test_compare_and_compose_of_bfloat16_adapters_keep_their_ranks(adapters, tmp_path):
    compared = compare_lora(adapters[0], adapters[1], store=tmp_path / "none.sqlite")
    assert all(m.rank_a == m.rank_b == R for m in compared.modules)
    composed = compose_lora(adapters, tmp_path / "out", store=tmp_path / "none.sqlite",
                            weights=[1.0, -1.0], evaluate=False)  # fmt: skip
    for m in composed.ledger:
        assert (m.rank_b_cat, m.rank_a_cat, m.rank_bound) == (2 * R,) * 3
        assert m.measured_rank == 2 * R  # two independent adapters: nothing cancels
    same = compose_lora([adapters[0], adapters[0]], tmp_path / "zero", weights=[1.0, -1.0],
                        store=tmp_path / "none.sqlite", evaluate=False)  # fmt: skip
    assert all(m.measured_rank == 0 <= m.rank_bound for m in same.ledger)  # X − X = 0


def test_a_composition_of_bfloat16_adapters_is_written_in_float32_and_is_the_weighted_sum(
    adapters, tmp_path
):
    """λ_j s_j folded into a bfloat16 down factor would round the sum by ~1e-3 relative
    (λ = 0.3, 0.7 are not bfloat16 numbers); written in float32 it is exact to float32's
    round-off."""
    lam = (0.3, 0.7)
    compose_lora(adapters, tmp_path / "out", store=tmp_path / "none.sqlite", weights=list(lam),
                 evaluate=False)  # fmt: skip
    written = Adapter.load(tmp_path / "out")
    sources = [Adapter.load(a) for a in adapters]
    exact = [s.to(torch.float64) for s in sources]  # the stored bfloat16 factors, exactly
    for module in written.modules:
        got = written.modules[module]
        assert got.A.dtype == got.B.dtype == torch.float32
        want = sum(w * s.delta_weight(module) for w, s in zip(lam, exact, strict=True))
        got_delta = written.to(torch.float64).delta_weight(module)
        error = (got_delta - want).norm() / want.norm()
        assert error < 1e-6, (module, float(error))  # bfloat16 factors: ~1e-3
