"""A float16 adapter made by PEFT at d = 1024, where the storage dtype's rule
``max(m, n)·eps(float16) = 1`` calls every module rank 0: inspect, compare and compose (``--json``)
keep the configured rank, and ``compose A A --weights 1,-1`` measures rank 0 within its bound."""

import json

import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
from tests.support.hf_models import peft_adapter  # noqa: E402

from gaugelab.cli.app import app  # noqa: E402

R = 3


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fp16")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=1024, intermediate_size=32,
                                      num_attention_heads=8, num_key_value_heads=8,
                                      vocab_size=16)  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(tmp / "base")
    out = []
    for seed in (0, 1):
        model = peft_adapter(tmp / "base", tmp / f"tmp{seed}", seed=seed, r=R, lora_alpha=2 * R,
                             dtype=torch.float32, target_modules=["q_proj", "o_proj"])  # fmt: skip
        model.to(torch.float16).save_pretrained(tmp / f"a{seed}")  # PEFT keeps float32 factors
        out.append(tmp / f"a{seed}")
    return out


def _cli(*args):
    run = CliRunner().invoke(app, ["lora", *map(str, args), "--no-report", "--json"])
    assert run.exit_code == 0, run.output
    return json.loads(run.output)


def test_float16_adapters_keep_their_rank_in_inspect_compare_and_compose(adapters, tmp_path):
    assert 1024 * torch.finfo(torch.float16).eps >= 1  # the storage dtype's rule: rank 0
    store = ["--store", tmp_path / "s.sqlite"]
    inspected = _cli("inspect", adapters[0], *store)
    assert [m["policies"]["configured"] for m in inspected["modules"]] == [R, R]
    assert all(next(v for k, v in m["policies"].items() if k.startswith("numerical")) == R
               for m in inspected["modules"])  # fmt: skip
    compared = _cli("compare", adapters[0], adapters[1], *store)
    assert all(m["rank_a"] == m["rank_b"] == R for m in compared["modules"])
    composed = _cli("compose", adapters[0], adapters[1], "--out", tmp_path / "ab", *store)
    assert all(m["measured_rank"] == m["rank_bound"] == 2 * R for m in composed["ledger"])
    zero = _cli("compose", adapters[0], adapters[0], "--weights", "1,-1", "--out",
                tmp_path / "zero", *store)  # fmt: skip
    assert all(m["measured_rank"] == 0 and m["rank_bound"] == R for m in zero["ledger"])  # B twice
