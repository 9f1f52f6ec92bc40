"""Tests for gaugelab.adapters: PEFT-format files read and written without pickle (float64)."""

import json
import math
import pickle

import pytest
import safetensors.torch
import torch
from safetensors import safe_open

from gaugelab.adapters import Adapter, AdapterConfig
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.lora import inject_lora, lora_parameter_groups, merge_lora

pytestmark = pytest.mark.usefixtures("strict_dtypes")

F64 = torch.float64
EXACT = 1e-11
SMALL = TransformerConfig(
    n_layers=2, d_model=16, n_heads=2, d_head=8, d_mlp=24, d_vocab=11, n_ctx=5
)
KEY = "base_model.model.{}.lora_{}.weight"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def tokens(seed=0):
    return torch.randint(0, SMALL.d_vocab, (3, SMALL.n_ctx), generator=gen(seed))


def adapted(use_rslora=False):
    model = Transformer(SMALL, seed=0, dtype=F64)
    layers = inject_lora(
        model,
        ["q_proj", "v_proj", "fc_in"],
        4,
        8.0,
        seed=1,
        rank_pattern={"v_proj": 2},
        alpha_pattern={"1.mlp.fc_in": 3.0},
        use_rslora=use_rslora,
    )
    with torch.no_grad():
        for i, layer in enumerate(layers.values()):
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=gen(i), dtype=F64))
    return model, layers


def write(folder, tensors, config):
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def factor_pair(r=2, d_in=16, d_out=16, seed=0):
    return (
        torch.randn(r, d_in, generator=gen(seed), dtype=F64),
        torch.randn(d_out, r, generator=gen(seed + 1), dtype=F64),
    )


CONFIG = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]}


def test_round_trip_keeps_factors_scales_records_and_the_function(tmp_path):
    model, layers = adapted(use_rslora=True)
    lora_parameter_groups(model, lr_A=1e-3, lr_B=2e-3)  # recorded per module
    adapter = Adapter.from_model(model)
    adapter.save(tmp_path / "a")
    loaded = Adapter.load(tmp_path / "a")
    assert loaded.records == adapter.records
    assert loaded.config == adapter.config
    for path, layer in layers.items():
        m = loaded.modules[path]
        assert torch.equal(m.A, layer.lora_A) and torch.equal(m.B, layer.lora_B)
        assert m.scale == layer.scale and m.record.lr_up == 2e-3
        assert torch.equal(loaded.delta_weight(path), layer.delta_weight())
    assert loaded.modules["blocks.1.attn.v_proj"].scale == 8.0 / math.sqrt(2)  # rank_pattern
    assert loaded.modules["blocks.1.mlp.fc_in"].scale == 3.0 / 2.0  # alpha_pattern, α/√4
    fresh = Transformer(SMALL, seed=0, dtype=F64)
    loaded.apply(fresh)
    x = tokens()
    assert (fresh(x) - model(x)).abs().max() <= EXACT
    assert sorted(n for n, p in fresh.named_parameters() if p.requires_grad) == sorted(
        n for n, p in model.named_parameters() if p.requires_grad
    )


def test_files_use_peft_key_layout_and_config_fields(tmp_path):
    model, layers = adapted()
    folder = Adapter.from_model(model).save(tmp_path / "a")
    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as f:
        keys, metadata = set(f.keys()), f.metadata()
    assert keys == {KEY.format(p, h) for p in layers for h in "AB"}
    assert metadata == {"format": "pt"}
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and (config["r"], config["lora_alpha"]) == (4, 8.0)
    assert config["rank_pattern"] == {
        "^blocks\\.0\\.attn\\.v_proj": 2,
        "^blocks\\.1\\.attn\\.v_proj": 2,
    }
    assert config["alpha_pattern"] == {"^blocks\\.1\\.mlp\\.fc_in": 3.0}
    assert config["target_modules"] == list(layers) and config["use_rslora"] is False
    assert config["fan_in_fan_out"] is False


def test_save_never_overwrites_an_adapter_unless_asked(tmp_path):
    model, _ = adapted()
    adapter = Adapter.from_model(model)
    (tmp_path / "empty").mkdir()
    adapter.save(tmp_path / "empty")  # an empty directory is fine
    with pytest.raises(FileExistsError, match=r"already holds adapter_model\.safetensors"):
        adapter.save(tmp_path / "empty")
    adapter.save(tmp_path / "empty", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "gaugelab_factor_records.json",
    ]


class _Tripwire:
    """Unpickling this creates a file: a loader that unpickles leaves evidence."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_pickle_checkpoints_are_refused_and_never_unpickled(tmp_path):
    folder, marker = tmp_path / "a", tmp_path / "unpickled"
    folder.mkdir()
    (folder / "adapter_model.bin").write_bytes(pickle.dumps(_Tripwire(marker)))
    (folder / "adapter_config.json").write_text(json.dumps(CONFIG))
    for path in (folder, folder / "adapter_model.bin"):
        with pytest.raises(ValueError, match=r"adapter_model\.bin is a pickle checkpoint"):
            Adapter.load(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"A": torch.ones(2, dtype=F64)}, r"lora_A.weight has shape \[2\] \(1-D\)"),
        (
            {"B": torch.ones(16, 3, dtype=F64)},
            r"lora_A.weight has rank 2 .*lora_B.weight has "
            "rank 3",
        ),
        ({"B": None}, r"lora_A.weight has no partner .*q_proj.lora_B.weight"),
        ({"A": torch.full((2, 16), float("nan"), dtype=F64)}, "non-finite"),
        ({"A": torch.ones(2, 16, dtype=torch.int64)}, "floating point"),
        (
            {
                "extra": (
                    "base_model.model.blocks.0.attn.q_proj.lora_magnitude_vector",
                    torch.ones(16, 1, dtype=F64),
                )
            },
            "lora_magnitude_vector is a DoRA magnitude",
        ),
        (
            {
                "extra": (
                    "base_model.model.blocks.0.attn.k_proj.lora_A.default.weight",
                    torch.ones(2, 16, dtype=F64),
                )
            },
            "lora_A.default.weight' is not a LoRA factor",
        ),
    ],
    ids=["1-D", "ranks-differ", "missing-half", "nan", "integer", "dora", "adapter-name"],
)
def test_bad_tensors_are_refused_naming_the_key(tmp_path, tensors, message):
    A, B = factor_pair()
    files = {KEY.format("blocks.0.attn.q_proj", "A"): A, KEY.format("blocks.0.attn.q_proj", "B"): B}
    for half in ("A", "B"):
        if half in tensors:
            if tensors[half] is None:
                files.pop(KEY.format("blocks.0.attn.q_proj", half))
            else:
                files[KEY.format("blocks.0.attn.q_proj", half)] = tensors[half]
    if "extra" in tensors:
        files[tensors["extra"][0]] = tensors["extra"][1]
    with pytest.raises(ValueError, match=message):
        Adapter.load(write(tmp_path / "a", files, CONFIG))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"peft_type": "IA3"}, "peft_type='IA3'"),
        ({"use_dora": True}, "use_dora=True: DoRA's update .* needs the base weights"),
        ({"init_lora_weights": "pissa_niter_4"}, "rewrites the base weights"),
        ({"r": None}, "r=None"),
        ({"lora_alpha": "8"}, "lora_alpha='8'"),
        ({"rank_pattern": {"q_proj": 0}}, r"rank_pattern\['q_proj'\]=0"),
        ({"rank_pattern": {"q_proj": 4}}, "has rank 2 but the config resolves r=4"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(tmp_path, change, message):
    A, B = factor_pair()
    files = {KEY.format("blocks.0.attn.q_proj", "A"): A, KEY.format("blocks.0.attn.q_proj", "B"): B}
    with pytest.raises(ValueError, match=message):
        Adapter.load(write(tmp_path / "a", files, {**CONFIG, **change}))


def test_rank_comes_from_the_tensors_and_scale_from_each_modules_alpha(tmp_path):
    files = {}
    ranks = {"blocks.0.attn.q_proj": 4, "blocks.0.attn.v_proj": 2, "blocks.1.attn.v_proj": 2}
    for i, (path, r) in enumerate(ranks.items()):
        A, B = factor_pair(r=r, seed=10 * i)
        files[KEY.format(path, "A")], files[KEY.format(path, "B")] = A, B
    config = {
        **CONFIG,
        "r": 4,
        "lora_alpha": 8,
        "use_rslora": True,
        "rank_pattern": {"v_proj": 2},
        "alpha_pattern": {"^blocks\\.1\\.attn\\.v_proj": 3},
    }
    adapter = Adapter.load(write(tmp_path / "a", files, config))
    assert {p: m.r for p, m in adapter.modules.items()} == ranks
    assert {p: m.scale for p, m in adapter.modules.items()} == {
        "blocks.0.attn.q_proj": 8 / math.sqrt(4),
        "blocks.0.attn.v_proj": 8 / math.sqrt(2),
        "blocks.1.attn.v_proj": 3 / math.sqrt(2),
    }
    m = adapter.modules["blocks.1.attn.v_proj"]
    assert (
        adapter.delta_weight("blocks.1.attn.v_proj") - 3 / math.sqrt(2) * m.B @ m.A
    ).abs().max() <= EXACT
    assert m.record.init == "unknown" and m.record.seed is None  # a plain PEFT directory
    assert adapter.config.extra == {}


def test_fan_in_fan_out_delta_weight_is_transposed(tmp_path):
    A, B = factor_pair(d_in=16, d_out=24)
    files = {KEY.format("h.0.attn.c_attn", "A"): A, KEY.format("h.0.attn.c_attn", "B"): B}
    adapter = Adapter.load(write(tmp_path / "a", files, {**CONFIG, "fan_in_fan_out": True}))
    delta = adapter.delta_weight("h.0.attn.c_attn")
    assert delta.shape == (16, 24)  # Conv1D weights are [d_in, d_out]
    assert (delta - 2.0 * (B @ A).T).abs().max() <= EXACT
    with pytest.raises(ValueError, match=r"'h\.0\.attn\.q' is not adapted"):
        adapter.delta_weight("h.0.attn.q")


def test_records_that_disagree_with_the_tensors_are_refused(tmp_path):
    model, _ = adapted()
    folder = Adapter.from_model(model).save(tmp_path / "a")
    doc = json.loads((folder / "gaugelab_factor_records.json").read_text())
    doc["modules"]["blocks.0.attn.q_proj"]["dtype"] = "float32"
    (folder / "gaugelab_factor_records.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"the record of 'blocks\.0\.attn\.q_proj' says"):
        Adapter.load(folder)
    doc["modules"].pop("blocks.0.attn.q_proj")
    (folder / "gaugelab_factor_records.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="covers"):
        Adapter.load(folder)


def test_apply_refuses_missing_modules_shapes_and_dtypes_without_changing_the_model():
    model, _ = adapted()
    adapter = Adapter.from_model(model)
    other = Transformer(SMALL.model_copy(update={"d_mlp": 12}), seed=0, dtype=F64)
    with pytest.raises(ValueError, match=r"'blocks.0.mlp.fc_in' has weight \[12, 16\]"):
        adapter.apply(other)
    assert not any("lora_" in n for n, _ in other.named_parameters())  # nothing half-applied
    single = Transformer(SMALL.model_copy(update={"n_layers": 1}), seed=0, dtype=F64)
    with pytest.raises(ValueError, match=r"no module 'blocks\.1\.attn\.q_proj'"):
        adapter.apply(single)
    with pytest.raises(ValueError, match=r"cast with Adapter.to\(dtype\)"):
        adapter.apply(Transformer(SMALL, seed=0, dtype=torch.float32))
    with pytest.raises(ValueError, match="LoRALinear"):
        adapter.apply(model)  # already adapted
    as32 = Transformer(SMALL, seed=0, dtype=torch.float32)
    adapter.to(torch.float32).apply(as32)
    assert as32.blocks[0].attn.q_proj.lora_A.dtype == torch.float32


def test_from_model_keeps_the_merge_history_and_refuses_mixed_scales(tmp_path):
    model, _ = adapted()
    merge_lora(model)
    adapter = Adapter.from_model(model)
    assert all(r.merged and "optimizer moments" in r.history[-1] for r in adapter.records.values())
    fresh = Transformer(SMALL, seed=0, dtype=F64)
    applied = adapter.apply(fresh)  # factors on the unmerged base: the function is kept
    assert not any(layer.merged for layer in applied.values())
    assert (fresh(tokens()) - model(tokens())).abs().max() <= EXACT
    mixed = Transformer(SMALL, seed=0, dtype=F64)
    inject_lora(mixed, ["q_proj"], 2, 2.0)
    inject_lora(mixed, ["k_proj"], 2, 2.0, use_rslora=True)
    with pytest.raises(ValueError, match="mix use_rslora"):
        Adapter.from_model(mixed)
    with pytest.raises(ValueError, match="no LoRALinear"):
        Adapter.from_model(Transformer(SMALL, seed=0, dtype=F64))


def test_adapter_config_round_trips_unknown_fields():
    values = {**CONFIG, "task_type": "CAUSAL_LM", "lora_dropout": 0.05, "bias": "none"}
    config = AdapterConfig.from_json_dict(values)
    assert config.extra == {"task_type": "CAUSAL_LM", "bias": "none"}
    assert config.target_modules == ("q_proj",)
    out = config.to_json_dict()
    assert {k: out[k] for k in values} == values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"r": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests 100001 deep; allowed: at most 64"),
        (json.dumps({**CONFIG, "notes": "x" * (1 << 20)}), "bytes; allowed: at most 1048576"),
        ('{"r": 2', "is not valid JSON"),
    ],
    ids=["deep", "large", "truncated"],
)
def test_a_hostile_config_is_refused_in_one_line_before_it_is_parsed(tmp_path, text, message):
    A, B = factor_pair()
    files = {KEY.format("blocks.0.attn.q_proj", "A"): A, KEY.format("blocks.0.attn.q_proj", "B"): B}
    folder = write(tmp_path / "a", files, CONFIG)
    (folder / "adapter_config.json").write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        Adapter.load(folder)
    assert "\n" not in str(error.value)


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path):
    A, B = factor_pair()
    files = {KEY.format("blocks.0.attn.q_proj", "A"): A, KEY.format("blocks.0.attn.q_proj", "B"): B}
    folder = write(tmp_path / "a", files, {**CONFIG, "notes": '[[[{"\\"' * 100})
    assert Adapter.load(folder).config.r == 2
