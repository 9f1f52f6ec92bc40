"""Tiny Hugging Face models built from configs and PEFT adapters made on them, saved locally
(offline, random weights, float64 where the test compares to round-off)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import peft
import torch
import transformers


def tiny_gpt2(folder: Path, *, dtype: torch.dtype = torch.float64, seed: int = 0) -> Path:
    """A 2-layer GPT-2 (``Conv1D`` projections, ``n_embd`` 16) saved as safetensors."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=40,
                                     n_positions=16)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).to(dtype)
    model.save_pretrained(folder)
    return folder


def tiny_llama(folder: Path, *, intermediate_size: int = 24, seed: int = 0,
               dtype: torch.dtype = torch.float64) -> Path:  # fmt: skip
    """A 1-layer Llama (``nn.Linear`` projections, hidden 16) saved as safetensors."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                                      intermediate_size=intermediate_size, num_key_value_heads=2,
                                      vocab_size=30)  # fmt: skip
    transformers.LlamaForCausalLM(config).to(dtype).save_pretrained(folder)
    return folder


def base_model(folder: Path, *, dtype: torch.dtype = torch.float64):
    """The causal LM saved in ``folder`` (its ``name_or_path`` is the folder)."""
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)


def peft_adapter(base: Path, out: Path, *, seed: int, dtype=torch.float64, redraw: bool = True,
                 **lora) -> object:  # fmt: skip
    """A PEFT adapter of the model in ``base`` with random non-zero factors (both A and B),
    saved with ``save_pretrained`` into ``out``; returns the PEFT model. A DoRA magnitude
    (``use_dora=True``) is moved off its start by a random factor 1 ± 0.1. ``redraw=False``
    keeps PEFT's own start (``init_lora_weights=False``: A and B random; DoRA's ``m`` the norm
    ``‖W₀ + s·B A‖_c``)."""
    model = base_model(base, dtype=dtype)
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        peft_model = peft.get_peft_model(model, peft.LoraConfig(init_lora_weights=False, **lora))
        with torch.no_grad():
            for name, p in peft_model.named_parameters() if redraw else ():
                if "magnitude" in name:  # m moved off its start ‖W₀ + s·B A‖, as by training
                    p.mul_(1 + 0.1 * torch.randn(p.shape, dtype=p.dtype))
                elif "lora_" in name:
                    p.copy_(torch.randn(p.shape, dtype=p.dtype) / p.shape[-1] ** 0.5)
        peft_model.save_pretrained(out)
    return peft_model
