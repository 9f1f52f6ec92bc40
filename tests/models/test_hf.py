"""Local Hugging Face model folders: weights read from safetensors, a seeded random init from a
config, refusals in one line (tiny configs built here; nothing is downloaded)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from gaugelab.models.hf import load_hf_config, load_hf_model  # noqa: E402


def _gpt2(tmp_path, *, save_weights: bool = True):
    config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=32)
    torch.manual_seed(3)
    model = transformers.GPT2LMHeadModel(config)
    folder = tmp_path / "gpt2"
    if save_weights:
        model.save_pretrained(folder)
    else:
        config.save_pretrained(folder)
    return folder, model


def test_checkpoint_weights_are_the_saved_ones(tmp_path):
    folder, model = _gpt2(tmp_path)
    loaded = load_hf_model(folder, dtype=torch.float64)
    assert loaded.weights == "checkpoint" and loaded.model_type == "gpt2"
    assert loaded.tokenizer is None
    ours = dict(loaded.model.named_parameters())
    for name, p in model.named_parameters():
        assert ours[name].dtype == torch.float64
        assert torch.equal(ours[name], p.detach().double())


def test_random_init_from_config_is_seeded(tmp_path):
    folder, _ = _gpt2(tmp_path, save_weights=False)
    a = load_hf_model(folder / "config.json", seed=5).model
    b = load_hf_model(folder, seed=5).model
    c = load_hf_model(folder, seed=6).model
    wa, wb, wc = (m.transformer.h[0].attn.c_attn.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_refusals_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf_model(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"no config\.json"):
        load_hf_model(tmp_path)
    folder, _ = _gpt2(tmp_path, save_weights=False)
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ValueError, match="never unpickles"):
        load_hf_model(folder)
    assert load_hf_model(folder, random_init=True).weights == "random"
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="model_type"):
        load_hf_config(folder)
    with pytest.raises(ValueError, match="head"):
        load_hf_model(folder, head="seq2seq")
