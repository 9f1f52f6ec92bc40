"""``lora inspect ADAPTER --base CHECKPOINT`` on adapters made by PEFT: a DoRA adapter is
analysed through its effective update (singular values those of PEFT's merged weight minus the
base, float64); a module the base lacks, or of another shape, is refused in one line."""

import copy
import warnings

import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("peft")
pytest.importorskip("transformers")
from tests.support.hf_models import peft_adapter, tiny_gpt2, tiny_llama

from gaugelab.cli.app import app
from gaugelab.experiments.lora.inspect import inspect_lora


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("base")
    base = tiny_llama(tmp / "llama")
    dora = peft_adapter(base, tmp / "dora", seed=1, r=2, lora_alpha=4, use_dora=True,
                        target_modules=["q_proj", "down_proj"])  # fmt: skip
    peft_adapter(base, tmp / "lora", seed=2, r=2, lora_alpha=4, target_modules=["down_proj"])
    return tmp, base, dora


def test_a_dora_adapter_is_inspected_through_its_effective_update(made, tmp_path):
    tmp, base, model = made
    result = inspect_lora(tmp / "dora", base=base, store=tmp_path / "none.sqlite", ranks=(1,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        merged = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    bare = dict(model.get_base_model().named_parameters())
    assert result.method == "dora" and len(result.modules) == 2
    for m in result.modules:
        key = f"{m.module}.weight"
        delta = merged[key].detach() - bare[f"{m.module}.base_layer.weight"].detach()
        sigma = torch.linalg.svdvals(delta)
        ours = torch.tensor(m.sigma, dtype=torch.float64)
        assert (ours - sigma).abs().max() <= 1e-12 * sigma[0], m.module
        assert m.policy("algebraic") == min(delta.shape) > 2  # dense, not rank r = 2
    assert any("effective update m ⊙ (W₀ + s·B A)" in n for n in result.not_computed)


def test_without_base_a_dora_adapter_is_refused_in_one_line(made, tmp_path):
    tmp, _, _ = made
    run = CliRunner().invoke(app, ["lora", "inspect", str(tmp / "dora"), "--no-report",
                                   "--store", str(tmp_path / "s.sqlite")])  # fmt: skip
    assert run.exit_code == 2
    assert "use_dora=True: DoRA's update" in run.output and "--base" in run.output


def test_a_module_the_base_lacks_or_of_another_shape_is_refused(made, tmp_path):
    tmp, _, _ = made
    other = tiny_llama(tmp_path / "wider", intermediate_size=32)
    gpt2 = tiny_gpt2(tmp_path / "gpt2")
    args = ["lora", "inspect", str(tmp / "lora"), "--no-report", "--store",
            str(tmp_path / "s.sqlite"), "--base"]  # fmt: skip
    wider = CliRunner().invoke(app, [*args, str(other)])
    assert wider.exit_code == 2
    assert ("module 'model.layers.0.mlp.down_proj' needs a base weight 16×24 but the base "
            "checkpoint") in wider.output and "has 16×32" in wider.output  # fmt: skip
    lacks = CliRunner().invoke(app, [*args, str(gpt2 / "model.safetensors")])
    assert lacks.exit_code == 2 and "has no weight in the base checkpoint" in lacks.output
    fine = CliRunner().invoke(app, [*args, str(tmp / "llama"), "--json"])
    assert fine.exit_code == 0, fine.output
    with pytest.raises(ValueError, match="a base checkpoint is for adapter folders"):
        inspect_lora("lora r=4", base=tmp / "llama", store=tmp_path / "s.sqlite")
