"""Tests for gaugelab.adapters.writer and the module-at-a-time reading of adapter files:
what the streaming writer writes, safetensors' own readers read back bit for bit."""

import gc
import itertools
import json

import pytest
import safetensors
import safetensors.torch
import torch

from gaugelab.adapters import Adapter, AdapterConfig, AdapterModule
from gaugelab.adapters.files import WEIGHTS, factor_key
from gaugelab.adapters.module import StoredModules
from gaugelab.adapters.writer import AdapterWriter
from gaugelab.models.lora import FactorRecord

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def record(module, r, d_in, d_out, dtype):
    return FactorRecord(
        module=module, d_in=d_in, d_out=d_out, r=r, alpha=float(r), use_rslora=False, scale=1.0,
        init="given", zero_factor="none", down_distribution="given", down_variance=None,
        up_distribution="given", up_variance=None, seed=None, dtype=str(dtype).split(".")[-1],
        fan_in_fan_out=False,
    )  # fmt: skip


def adapter(dtype, modules=("layers.0.q_proj", "layers.1.q_proj"), r=3, d=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for i, m in enumerate(modules):
        stacked = torch.randn(d + r, d + 1, generator=gen, dtype=torch.float64).to(dtype)
        A = stacked[d:, 1:]  # a strided view into a larger storage
        B = stacked[:d, :r].T.T if i else stacked[:d, :r].contiguous()
        out[m] = AdapterModule(A, B, record(m, r, d, d, dtype))
    config = AdapterConfig(r=r, lora_alpha=float(r), target_modules=("q_proj",))
    return Adapter(out, config)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_written_factors_read_back_bit_for_bit_by_safetensors(tmp_path, dtype):
    made = adapter(dtype)
    folder = made.save(tmp_path / "a")
    with open(folder / WEIGHTS, "rb") as f:
        back = safetensors.torch.load(f.read())  # the library's whole-file reader
    assert set(back) == {factor_key(m, h) for m in made.modules for h in ("lora_A", "lora_B")}
    for m, mod in made.modules.items():
        for half, t in (("lora_A", mod.A), ("lora_B", mod.B)):
            got = back[factor_key(m, half)]
            assert got.dtype == dtype and torch.equal(got.view(-1).view(torch.uint8),
                                                      t.contiguous().view(-1).view(torch.uint8))
    with safetensors.safe_open(str(folder / WEIGHTS), "pt") as f:
        assert f.metadata() == {"format": "pt"}
    loaded = Adapter.load(folder)
    assert isinstance(loaded.modules, StoredModules)
    for m in made.modules:
        assert torch.equal(loaded.modules[m].A, made.modules[m].A)
        assert torch.equal(loaded.delta_weight(m), made.delta_weight(m))
    assert loaded.records == made.records


def test_header_is_padded_to_eight_bytes_and_offsets_tile_the_data(tmp_path):
    folder = adapter(torch.float16, r=1, d=3).save(tmp_path / "a")
    raw = (folder / WEIGHTS).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert n % 8 == 0
    header = json.loads(raw[8 : 8 + n])
    spans = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert spans[0][0] == 0 and spans[-1][1] == len(raw) - 8 - n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


def test_a_failed_write_leaves_the_folder_as_it_was(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("mine")
    A, B = torch.ones(2, 3), torch.ones(4, 2)
    with pytest.raises(RuntimeError, match="stop"), AdapterWriter(tmp_path / "a", owner="t") as w:
        w.add("m", A, B, {})
        raise RuntimeError("stop")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["notes.txt"]


def test_the_writer_refuses_a_module_twice_other_dtypes_and_an_existing_adapter(tmp_path):
    w = AdapterWriter(tmp_path / "a", owner="t")
    w.add("m", torch.ones(2, 3), torch.ones(4, 2), {})
    with pytest.raises(ValueError, match="module 'm' is written twice"):
        w.add("m", torch.ones(2, 3), torch.ones(4, 2), {})
    with pytest.raises(ValueError, match=r"'n' lora_A is torch\.int64; allowed: torch\.float64"):
        w.add("n", torch.ones(2, 3, dtype=torch.int64), torch.ones(4, 2), {})
    w.finish({"peft_type": "LORA"})
    with pytest.raises(FileExistsError, match=r"already holds adapter_model\.safetensors"):
        AdapterWriter(tmp_path / "a", owner="t")
    assert [p.name for p in (tmp_path / "a").iterdir() if p.name.startswith(".")] == []


def _tensors_held(obj) -> int:
    """Tensors reachable from ``obj`` through containers and gaugelab objects."""
    seen, todo, found = set(), [obj], 0
    while todo:
        x = todo.pop()
        if id(x) in seen or isinstance(x, type):
            continue
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            found += 1
        elif isinstance(x, dict | list | tuple | set | frozenset):
            todo.extend(x.values() if isinstance(x, dict) else x)
        elif type(x).__module__.startswith("gaugelab"):
            todo.extend(gc.get_referents(x))
    return found


def test_a_loaded_adapter_keeps_no_factor_after_a_lookup(tmp_path):
    """Each lookup reads the module from the file; nothing of it stays with the adapter."""
    made = adapter(torch.float32)
    loaded = Adapter.load(made.save(tmp_path / "a"))
    first = loaded.modules["layers.0.q_proj"]
    assert torch.equal(first.A, made.modules["layers.0.q_proj"].A)
    assert _tensors_held(loaded) == 0
    assert _tensors_held(made) == 4  # the in-memory adapter: two modules' A and B
    first.A.add_(1.0)  # in place: no later lookup sees it
    assert torch.equal(loaded.modules["layers.0.q_proj"].A, made.modules["layers.0.q_proj"].A)
    assert list(loaded.modules) == ["layers.0.q_proj", "layers.1.q_proj"]
    assert "layers.1.q_proj" in loaded.modules and "layers.2.q_proj" not in loaded.modules
