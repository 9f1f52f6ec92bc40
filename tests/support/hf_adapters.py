"""Tiny Hugging Face bases (GPT-2 with ``Conv1D``, Llama with ``nn.Linear``) built from configs
and saved, with a PEFT adapter on each (``init_lora_weights=False``: B non-zero), and a text to
read. Nothing is downloaded; the vocabulary (300) takes UTF-8 bytes."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

TEXT = "".join(f"line {i}: the quick brown fox jumps over {i * 7 % 13} lazy dogs.\n"
               for i in range(40))  # fmt: skip
"""40 lines, 2,000-odd bytes."""


def configs(transformers) -> dict:
    """Family → (config, model class, PEFT target modules, fan_in_fan_out)."""
    gpt2 = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=300,
                                   n_positions=64)  # fmt: skip
    llama = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=1,
                                     vocab_size=300, max_position_embeddings=64)  # fmt: skip
    return {
        "gpt2": (gpt2, transformers.GPT2LMHeadModel, ["c_attn", "attn.c_proj", "mlp.c_fc"], True),
        "llama": (llama, transformers.LlamaForCausalLM, ["q_proj", "v_proj", "down_proj"], False),
    }


def make_base_and_adapter(tmp: Path, family: str, transformers, peft, seed: int = 0):
    """Save ``<family>-base`` and ``<family>-adapter`` (r 4, α 8, ``CAUSAL_LM``) under ``tmp``;
    return PEFT's model, float64, in evaluation mode."""
    config, cls, targets, fan_in_fan_out = configs(transformers)[family]
    torch.manual_seed(seed)
    cls(config).save_pretrained(tmp / f"{family}-base")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(cls.from_pretrained(tmp / f"{family}-base"), peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM",
            fan_in_fan_out=fan_in_fan_out, init_lora_weights=False))  # fmt: skip
    model.save_pretrained(tmp / f"{family}-adapter")
    return model.double().eval()
