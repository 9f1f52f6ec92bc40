"""The module-name reader on the names PEFT itself writes for each family (tiny models built
from configs, random weights), and on gaugelab's own model."""

import warnings

import pytest
import torch

from gaugelab.adapters.names import module_order, parse_module_name

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def _peft_names(model: torch.nn.Module, targets: list[str]) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=targets))
    return [n.removeprefix("base_model.model.") for n, m in wrapped.named_modules()
            if hasattr(m, "lora_A") and n]  # fmt: skip


def _roles(names: list[str]) -> list[tuple[int | None, str]]:
    return [(parse_module_name(n).layer, parse_module_name(n).key) for n in names]


def test_gpt2_tells_the_two_c_proj_apart():
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=16)
    )
    names = _peft_names(model, ["c_attn", "c_proj", "c_fc"])
    assert _roles(names)[:4] == [(0, "attention.qkv"), (0, "attention.o"), (0, "mlp.up"),
                                 (0, "mlp.down")]  # fmt: skip
    assert {parse_module_name(n).layer for n in names} == {0, 1}


def test_llama_reads_every_projection_and_orders_them_as_a_block_computes():
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=16, intermediate_size=32,
                                      num_attention_heads=2, num_key_value_heads=1,
                                      vocab_size=50)  # fmt: skip
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    names = _peft_names(transformers.LlamaForCausalLM(config), targets)
    keys = [k for layer, k in _roles(names) if layer == 1]
    assert keys == ["attention.q", "attention.k", "attention.v", "attention.o", "mlp.gate",
                    "mlp.up", "mlp.down"]  # fmt: skip
    shuffled = sorted(names, key=lambda n: n[::-1])
    assert sorted(shuffled, key=module_order) == names  # layer 0 before 1, block order within


def test_bert_tells_the_attention_output_from_the_mlp_output():
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=16, intermediate_size=32,
                                     num_attention_heads=2, vocab_size=50)  # fmt: skip
    names = _peft_names(transformers.BertForSequenceClassification(config),
                        ["query", "key", "value", "dense"])  # fmt: skip
    read = dict(zip(names, _roles(names), strict=True))
    assert read["bert.encoder.layer.0.attention.output.dense"] == (0, "encoder.attention.o")
    assert read["bert.encoder.layer.0.intermediate.dense"] == (0, "encoder.mlp.up")
    assert read["bert.encoder.layer.0.output.dense"] == (0, "encoder.mlp.down")
    assert read["bert.pooler.dense"] == (None, "other.dense")  # outside the blocks


def test_gpt_neox_and_t5_with_its_two_stacks_and_cross_attention():
    neox = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        num_hidden_layers=1, hidden_size=16, intermediate_size=32, num_attention_heads=2,
        vocab_size=50))  # fmt: skip
    names = _peft_names(neox, ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"])
    assert [k for _, k in _roles(names)] == ["attention.qkv", "attention.o", "mlp.up",
                                             "mlp.down"]  # fmt: skip
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        num_layers=1, num_decoder_layers=1, d_model=16, d_ff=32, num_heads=2, d_kv=8,
        vocab_size=50))  # fmt: skip
    names = _peft_names(t5, ["q", "o", "wi", "wo"])
    assert [k for _, k in _roles(names)] == [
        "encoder.attention.q", "encoder.attention.o", "encoder.mlp.up", "encoder.mlp.down",
        "decoder.attention.q", "decoder.attention.o", "decoder.cross-attention.q",
        "decoder.cross-attention.o", "decoder.mlp.up", "decoder.mlp.down",
    ]  # fmt: skip


def test_gaugelab_model_names_and_unknown_names():
    assert _roles(["blocks.2.attn.k_proj", "blocks.0.mlp.fc_in", "blocks.0.mlp.fc_out"]) == [
        (2, "attention.k"), (0, "mlp.up"), (0, "mlp.down")]  # fmt: skip
    odd = parse_module_name("score")
    assert (odd.layer, odd.family, odd.role) == (None, "other", "score")
    assert parse_module_name("model.embed_tokens").family == "embedding"
