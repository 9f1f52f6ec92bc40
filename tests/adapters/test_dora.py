"""DoRA adapters made by PEFT, read with their base checkpoint: the effective update
``m ⊙ (W₀ + s·B A)/‖W₀ + s·B A‖_c − W₀`` equals PEFT's merged weight minus the base
(``merge_and_unload``, float64), for GPT-2 (``Conv1D``, ``fan_in_fan_out``) and Llama
(``nn.Linear``); without a base the refusal says what is needed."""

import copy
import warnings

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("transformers")
from tests.support.hf_models import base_model, peft_adapter, tiny_gpt2, tiny_llama

from gaugelab.adapters import Adapter
from gaugelab.adapters.checkpoint import BaseCheckpoint
from gaugelab.adapters.dora import dora_delta, dora_rtol, dora_updates
from gaugelab.experiments.lora.inspect import inspect_lora
from gaugelab.lowrank.composition.adapters import compose_adapters

TOL = 1e-12


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dora")
    out = {}
    settings = (
        ("gpt2", tiny_gpt2, dict(target_modules=["c_attn", "c_proj"], fan_in_fan_out=True)),
        ("llama", tiny_llama, dict(target_modules=["q_proj", "v_proj", "down_proj"],
                               use_rslora=True)),
    )  # fmt: skip
    for name, build, lora in settings:
        base = build(tmp / f"{name}-base")
        model = peft_adapter(base, tmp / name, seed=3, r=2, lora_alpha=5, use_dora=True, **lora)
        out[name] = (base, tmp / name, model)
    return out


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_dora_delta_is_peft_merged_weight_minus_base(made, name):
    base, folder, model = made[name]
    adapter = Adapter.load(folder, dora=True)
    checkpoint = BaseCheckpoint.open(base)
    flip = adapter.config.fan_in_fan_out
    assert set(adapter.magnitudes) == set(adapter.modules) and len(adapter.modules) >= 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged = copy.deepcopy(model).merge_and_unload()
    weights = dict(merged.named_parameters())
    for path, m in adapter.modules.items():
        W0 = checkpoint.weight(path)
        ours = dora_delta(W0, m.B, m.A, m.scale, adapter.magnitudes[path], fan_in_fan_out=flip)
        theirs = weights[f"{path}.weight"].detach() - W0  # PEFT's layout
        theirs = theirs.T if flip else theirs
        assert (ours - theirs).abs().max() <= TOL * W0.abs().max(), path
        # DoRA is not LoRA: the plain s·B A misses the rescaling of W₀
        assert (ours - m.scale * m.B @ m.A).abs().max() > 1e3 * TOL * W0.abs().max()


def test_a_dora_adapter_without_base_is_refused_saying_what_is_needed(made):
    _, folder, _ = made["llama"]
    with pytest.raises(ValueError, match=r"use_dora=True: DoRA's update .* needs the base "
                                         r"weights.*--base"):  # fmt: skip
        Adapter.load(folder)
    dora = Adapter.load(folder, dora=True)
    with pytest.raises(ValueError, match=r"Adapter\.save: a DoRA adapter"):
        dora.save(folder.parent / "copy")
    with pytest.raises(ValueError, match=r"adapters\[0\] is a DoRA adapter"):
        compose_adapters([dora])


def test_base_checkpoint_keys_shapes_and_refusals(made, tmp_path):
    base, _, _ = made["gpt2"]
    checkpoint = BaseCheckpoint.open(base / "model.safetensors")
    assert checkpoint.shape("transformer.h.0.attn.c_attn") == (16, 48)  # Conv1D [d_in, d_out]
    assert checkpoint.key("h.1.mlp.c_fc") == "transformer.h.1.mlp.c_fc.weight"  # outer prefix
    assert checkpoint.key("model.transformer.h.0.mlp.c_fc") == "transformer.h.0.mlp.c_fc.weight"
    assert checkpoint.shape("transformer.h.9.attn.c_attn") is None
    sharded = tmp_path / "sharded"
    base_model(base).save_pretrained(sharded, max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    shards = BaseCheckpoint.open(sharded)
    for module in ("transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj"):
        assert torch.equal(shards.weight(module), checkpoint.weight(module))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ValueError, match="pickle checkpoint, which gaugelab never loads"):
        BaseCheckpoint.open(tmp_path)
    with pytest.raises(ValueError, match=r"is not a \.safetensors file"):
        BaseCheckpoint.open(tmp_path / "pytorch_model.bin")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_an_untrained_dora_module_has_numerical_rank_r(tmp_path, dtype):
    """At PEFT's start ``m = ‖W₀ + s·B A‖_c``, so ``ΔW = s·B A`` (rank r) up to round-off of
    ``W₀``'s size (float64's, and ``m``'s own dtype's); a small scale makes that round-off
    exceed ``max(m, n)·eps·σ₁``."""
    base = tiny_llama(tmp_path / "base", dtype=dtype)
    peft_adapter(base, tmp_path / "fresh", seed=4, r=2, lora_alpha=1e-4, use_dora=True,
                 target_modules=["q_proj", "down_proj"], redraw=False, dtype=dtype)  # fmt: skip
    updates = dora_updates(Adapter.load(tmp_path / "fresh", dora=True), BaseCheckpoint.open(base))
    for path, (delta, rtol) in updates.items():
        sigma = torch.linalg.svdvals(delta)
        naive = max(delta.shape) * torch.finfo(torch.float64).eps
        assert int((sigma > naive * sigma[0]).sum()) > 2, path  # the storage rule: W₀'s noise
        assert int((sigma > rtol * sigma[0]).sum()) == 2, path  # the computation's: rank r
        room = 1e-6 if dtype == torch.float64 else 1e-2  # float32's m: known to eps(float32)
        assert rtol * sigma[0] < room * sigma[1]  # below the signal (s = 1e-4: a small one)
    assert dora_rtol(torch.ones(3, 4), torch.zeros(3, 4)) == float("inf")
    inspected = inspect_lora(tmp_path / "fresh", base=base, store=tmp_path / "none.sqlite")
    assert [m.policy("numerical") for m in inspected.modules] == [2, 2]
