"""``lora compare`` and ``lora compose`` on adapters made by PEFT as a user has them: a DoRA
adapter compared through its effective update (``--base``), refused by compose; adapters of one
model in two dtypes refused naming both shapes and dtypes; a module the base lacks refused in
one line; ``--json`` on compare."""

import json

import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("peft")
pytest.importorskip("transformers")
from tests.support.hf_models import peft_adapter, tiny_gpt2, tiny_llama

from gaugelab.adapters import Adapter
from gaugelab.adapters.checkpoint import BaseCheckpoint
from gaugelab.adapters.dora import dora_updates
from gaugelab.cli.app import app
from gaugelab.experiments.lora_compare.run import compare_lora

TARGETS = ["q_proj", "down_proj"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("user")
    base = tiny_llama(tmp / "llama")
    peft_adapter(base, tmp / "dora", seed=1, r=2, lora_alpha=4, use_dora=True,
                 target_modules=TARGETS)  # fmt: skip
    peft_adapter(base, tmp / "lora", seed=2, r=2, lora_alpha=4, target_modules=TARGETS)
    peft_adapter(base, tmp / "f32", seed=3, r=2, lora_alpha=4, target_modules=TARGETS,
                 dtype=torch.float32)  # fmt: skip
    return tmp, base


def _cli(*args):
    return CliRunner().invoke(app, ["lora", *map(str, args)])


def test_a_dora_adapter_is_compared_through_its_effective_update(made, tmp_path):
    tmp, base = made
    result = compare_lora(tmp / "dora", tmp / "dora", base=base, store=tmp_path / "none.sqlite")
    assert result.method_a == "dora" and len(result.modules) == 2
    dense = dora_updates(Adapter.load(tmp / "dora", dora=True), BaseCheckpoint.open(base))
    for m in result.modules:  # the dense policy: the 90%-energy rank of the effective update
        sigma2 = torch.linalg.svdvals(dense[m.module].delta) ** 2
        k = int((torch.cumsum(sigma2, 0) < 0.9 * sigma2.sum()).sum()) + 1
        assert m.rank_a == m.rank_b == k
        assert max(m.row["angles"]) <= 1e-6  # the same update: every angle 0
    mixed = compare_lora(tmp / "dora", tmp / "lora", base=base, store=tmp_path / "none.sqlite")
    assert "dense updates: energy" in mixed.policy and mixed.method_b == "lora"


def test_compose_refuses_dora_and_compare_without_base_says_what_is_needed(made, tmp_path):
    tmp, base = made
    composed = _cli("compose", tmp / "dora", tmp / "lora", "--base", base, "--out",
                    tmp_path / "o", "--store", tmp_path / "s.sqlite", "--no-report")  # fmt: skip
    assert composed.exit_code == 2 and "is a DoRA adapter" in composed.output
    assert not (tmp_path / "o").exists()
    compared = _cli("compare", tmp / "dora", tmp / "lora", "--store", tmp_path / "s.sqlite",
                    "--no-report")  # fmt: skip
    assert compared.exit_code == 2 and "needs the base weights" in compared.output


def test_mixed_dtypes_are_refused_naming_both_shapes_and_dtypes(made, tmp_path):
    tmp, _ = made
    run = _cli("compose", tmp / "lora", tmp / "f32", "--out", tmp_path / "o", "--store",
               tmp_path / "s.sqlite", "--no-report")  # fmt: skip
    assert run.exit_code == 2
    assert ("module 'model.layers.0.mlp.down_proj' differs across the adapters (adapters[0]: "
            "16×24 float64; adapters[1]: 16×24 float32)") in run.output  # fmt: skip


def test_a_module_the_base_lacks_is_refused_and_compare_prints_json(made, tmp_path):
    tmp, base = made
    gpt2 = tiny_gpt2(tmp_path / "gpt2")
    args = ["--store", tmp_path / "s.sqlite", "--no-report"]
    lacks = _cli("compose", tmp / "lora", "--out", tmp_path / "o", "--base", gpt2, *args)
    assert lacks.exit_code == 2 and "has no weight in the base checkpoint" in lacks.output
    as_json = _cli("compare", tmp / "lora", tmp / "f32", "--base", base, "--json", *args)
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert [m["rank_a"] for m in data["modules"]] == [2, 2]
    assert [m["rank_b"] for m in data["modules"]] == [2, 2]
