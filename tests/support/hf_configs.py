"""Tiny Hugging Face configs of every family with a derived gauge, built in the test (nothing
is downloaded): GPT-2, GPT-NeoX with partial rotary, Llama and Mistral with grouped-query
attention, Qwen2 with q/k/v biases."""

from __future__ import annotations

import torch


def tiny_config(transformers, family: str, *, vocab: int = 61, d_model: int = 32,
                n_heads: int = 4, n_layers: int = 2, n_ctx: int = 16):  # fmt: skip
    """A ``PretrainedConfig`` of ``family`` at a tiny size (``head_dim = d_model / n_heads``)."""
    common = dict(vocab_size=vocab, num_hidden_layers=n_layers, num_attention_heads=n_heads,
                  hidden_size=d_model, intermediate_size=2 * d_model,
                  max_position_embeddings=n_ctx)  # fmt: skip
    if family == "gpt2":
        return transformers.GPT2Config(n_embd=d_model, n_layer=n_layers, n_head=n_heads,
                                       vocab_size=vocab, n_positions=n_ctx)  # fmt: skip
    if family == "gpt_neox":
        return transformers.GPTNeoXConfig(**common, rotary_pct=0.5, attention_bias=True)
    if family == "llama":
        return transformers.LlamaConfig(**common, num_key_value_heads=n_heads // 2)
    if family == "mistral":
        return transformers.MistralConfig(**common, num_key_value_heads=n_heads // 2)
    if family == "qwen2":
        return transformers.Qwen2Config(**common, num_key_value_heads=n_heads // 2)
    raise ValueError(f"tiny_config: family={family!r}")


def tiny_model(transformers, family: str, *, seed: int = 0, **sizes):
    """A float64 causal LM of ``family`` in eval mode, every parameter (biases included) drawn
    ``N(0, 0.3²)`` so no bias is zero."""
    config = tiny_config(transformers, family, **sizes)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float64).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
    return model
