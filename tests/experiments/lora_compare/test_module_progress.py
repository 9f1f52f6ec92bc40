"""``lora inspect``, ``compare`` and ``compose`` report their progress module by module
(``progress(label, i, n)``, what the CLI's "module i/n" bar shows), and compare reads each
module's float64 factors only when it reaches it."""

import json

import safetensors.torch
import torch

from gaugelab.adapters import Adapter
from gaugelab.adapters.files import factor_key
from gaugelab.experiments.lora.inspect import inspect_lora
from gaugelab.experiments.lora.sources import Found, resolve_path
from gaugelab.experiments.lora_compare.compose import compose_lora
from gaugelab.experiments.lora_compare.run import compare_lora

MODULES = [f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("q_proj", "v_proj")]
MODULES.append("model.layers.0.mlp.down_proj")


def _adapter(folder, seed):
    """A PEFT-layout adapter (as ``save_pretrained`` writes one) of :data:`MODULES`."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for m in MODULES:
        tensors[factor_key(m, "lora_A")] = torch.randn(2, 12, generator=gen)
        tensors[factor_key(m, "lora_B")] = torch.randn(8, 2, generator=gen)
    folder.mkdir()
    safetensors.torch.save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "r": 2, "lora_alpha": 4,
              "target_modules": ["q_proj", "v_proj", "down_proj"]}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def _calls():
    calls = []
    return calls, lambda label, done, total: calls.append((label, done, total))


def _counted(label, n):
    return [(label, i, n) for i in range(1, n + 1)]


def test_every_command_counts_its_modules_one_by_one(tmp_path):
    a, b = _adapter(tmp_path / "a", 0), _adapter(tmp_path / "b", 1)
    store = tmp_path / "none.sqlite"
    calls, progress = _calls()
    inspect_lora(a, store=store, progress=progress)
    assert calls == _counted("inspecting", len(MODULES))
    calls, progress = _calls()
    compare_lora(a, b, store=store, progress=progress)
    assert calls == _counted("comparing", len(MODULES))
    calls, progress = _calls()
    compose_lora([a, b], tmp_path / "ab", store=store, evaluate=False, progress=progress)
    n = len(MODULES)
    assert calls == _counted("composing", n) + _counted("staged expansion", n)


def test_compare_upcasts_one_module_when_it_is_looked_up(tmp_path):
    found = Found(str(tmp_path / "a"), resolve_path(_adapter(tmp_path / "a", 0), None))
    updates = found.updates()
    assert sorted(updates) == sorted(MODULES) and len(updates) == len(MODULES)
    adapter = Adapter.load(tmp_path / "a")
    for m in MODULES:
        B, A, s = updates[m]
        assert B.dtype == A.dtype == torch.float64 and s == 2.0
        assert torch.equal(B, adapter.modules[m].B.double())
        assert updates[m][0] is not B  # a fresh upcast per lookup: nothing is kept
