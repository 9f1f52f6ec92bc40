"""Composing GPT-2 (``Conv1D``, ``fan_in_fan_out``) adapters made by PEFT, checked against PEFT
itself: the composed file, loaded by PEFT, has ``ΔW = Σ λ_j ΔW_j`` in the Conv1D layout
``[d_in, d_out]``, and PEFT's ``add_weighted_adapter(..., "cat")`` gives the same (float64)."""

import warnings

import pytest
import torch

peft = pytest.importorskip("peft")
pytest.importorskip("transformers")
from tests.support.hf_models import base_model, peft_adapter, tiny_gpt2  # noqa: E402

from gaugelab.adapters import Adapter  # noqa: E402
from gaugelab.experiments.lora_compare.compose import compose_lora  # noqa: E402
from gaugelab.lowrank.composition.adapters import compose_adapters  # noqa: E402

TOL = 1e-12
TARGETS = ["c_attn", "c_proj"]  # both attn.c_proj and mlp.c_proj
LAMBDA = (0.7, 1.3)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpt2")
    base = tiny_gpt2(tmp / "base")
    made = []
    for seed, r in ((0, 2), (1, 3)):
        folder = tmp / f"a{seed}"
        model = peft_adapter(base, folder, seed=seed, r=r, lora_alpha=2 * r, fan_in_fan_out=True,
                             target_modules=TARGETS, task_type="CAUSAL_LM")  # fmt: skip
        made.append((model, folder))
    return base, made


def _layers(model):
    inner = model.base_model.model
    return {n: m for n, m in inner.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)}


def test_composed_gpt2_adapter_loads_in_peft_with_the_summed_delta(gpt2, tmp_path):
    _, made = gpt2
    out = tmp_path / "composed"
    result = compose_lora([f for _, f in made], out, weights=LAMBDA, evaluate=False,
                          store=tmp_path / "none.sqlite")  # fmt: skip
    assert len(result.ledger) == 6 and all(m.written_rank == 5 for m in result.ledger)
    written = Adapter.load(out)
    assert written.config.fan_in_fan_out and written.config.extra["task_type"] == "CAUSAL_LM"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = peft.AutoPeftModelForCausalLM.from_pretrained(out, dtype=torch.float64)
    loaded = _layers(theirs)
    sources = [_layers(model) for model, _ in made]
    assert set(loaded) == set(sources[0]) == set(written.modules)
    for path, layer in loaded.items():
        composed = layer.get_delta_weight("default").detach()  # [d_in, d_out], Conv1D layout
        assert composed.shape == layer.get_base_layer().weight.shape
        expected = sum(lam * s[path].get_delta_weight("default").detach()
                       for lam, s in zip(LAMBDA, sources, strict=True))  # fmt: skip
        assert (composed - expected).abs().max() <= TOL * expected.abs().max(), path
        assert (written.delta_weight(path) - composed).abs().max() <= TOL * expected.abs().max()


def test_compose_equals_peft_cat_on_gpt2(gpt2):
    base, made = gpt2
    model = peft.PeftModel.from_pretrained(base_model(base), made[0][1], adapter_name="a0")
    model.load_adapter(made[1][1], adapter_name="a1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.add_weighted_adapter(["a0", "a1"], list(LAMBDA), "cat", combination_type="cat")
    ours = compose_adapters([Adapter.load(f) for _, f in made], LAMBDA, method="cat")
    for path, layer in _layers(model).items():
        peft_cat = layer.get_delta_weight("cat").detach()
        mine = ours.adapter.delta_weight(path)
        assert (mine - peft_cat).abs().max() <= TOL * peft_cat.abs().max(), path


def test_mixed_fan_in_fan_out_is_refused_naming_each(gpt2):
    _, made = gpt2
    plain = Adapter.load(made[0][1])
    flipped = Adapter(plain.modules, type(plain.config)(
        **{**plain.config.__dict__, "fan_in_fan_out": False}))  # fmt: skip
    with pytest.raises(ValueError, match=r"mix fan_in_fan_out \(adapters\[0\]: True, "
                                         r"adapters\[1\]: False\)"):  # fmt: skip
        compose_adapters([plain, flipped])
