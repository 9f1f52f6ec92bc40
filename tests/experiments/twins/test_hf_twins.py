"""gaugelab twins on a Hugging Face model: the spec read from a folder (tiny configs built here,
nothing downloaded), refusals in one line, the built-in runs' identity unchanged, and the verdict
pattern of the built-in model (adam basis-sensitive, scalar-adam equivariant) on a GPT-2-style
and a Llama-style config."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from gaugelab.experiments.twins.hf import check_hf, hf_parts, hf_twin  # noqa: E402
from gaugelab.experiments.twins.run import TwinStudy, plan, run_twins  # noqa: E402
from gaugelab.tasks import tiny_shakespeare_bytes  # noqa: E402

SMALL = dict(steps=2, block_size=16, batch_size=8, val_batches=1)


def _folder(tmp_path, family: str, *, vocab: int = 256, d: int = 16):
    """A config.json of the family at a tiny size (random init), in its own folder."""
    tokens = dict(bos_token_id=0, eos_token_id=0, vocab_size=vocab)
    if family == "gpt2":
        config = transformers.GPT2Config(n_embd=d, n_layer=1, n_head=2, n_inner=2 * d,
                                         n_positions=16, **tokens)  # fmt: skip
    else:
        config = transformers.LlamaConfig(hidden_size=d, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=2 * d,
                                          max_position_embeddings=16, **tokens)  # fmt: skip
    folder = tmp_path / family
    config.save_pretrained(folder)
    return folder


def test_the_spec_records_the_model_and_leaves_builtin_identities_alone(tmp_path):
    spec = hf_twin(_folder(tmp_path, "gpt2") / "config.json", **SMALL)
    assert spec.task == "text" and spec.hf.model_type == "gpt2"
    assert (spec.hf.weights, spec.hf.tokens, spec.hf.block_size) == ("random", "bytes", 16)
    assert "hf" not in TwinStudy().spec_dict()["twin"]  # the built-in identity as before
    assert TwinStudy(twin=spec).spec_dict()["twin"]["hf"]["sha256"] == spec.hf.sha256
    with pytest.raises(ValueError, match="merge=True with a Hugging Face model"):
        plan(["adam"], base=spec, merge=True)


def test_refusals_are_one_line(tmp_path):
    refused = r"vocab_size=61 .* has no tokenizer; allowed: a vocabulary of at least 256"
    with pytest.raises(ValueError, match=refused):
        hf_twin(_folder(tmp_path, "gpt2", vocab=61))
    with pytest.raises(ValueError, match="block_size=32; allowed: at most the model's 16"):
        hf_twin(_folder(tmp_path, "llama"), block_size=32)
    bert = tmp_path / "bert"
    transformers.BertConfig(
        vocab_size=300, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=8,
    ).save_pretrained(bert)  # fmt: skip
    with pytest.raises(ValueError, match="model_type='bert' has no derived gauge"):
        hf_twin(bert)
    folder = _folder(tmp_path, "llama")
    spec = hf_twin(folder, **SMALL)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    with pytest.raises(ValueError, match="its files changed"):
        check_hf(spec.hf)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_adam_is_basis_sensitive_and_scalar_adam_equivariant(tmp_path, family):
    spec = hf_twin(_folder(tmp_path, family), **SMALL)
    for optimizer, verdict in (("adam", "basis-sensitive"), ("scalar-adam", "equivariant")):
        result = run_twins(spec.model_copy(update={"optimizer": optimizer}))
        assert result.verdict == verdict, result.explanation
        for metrics in result.records.values():
            assert metrics["identity/logit_distance"] == 0.0  # bit for bit, every step
            assert metrics["identity/qk_drift_max"] == 0.0
        # before training the gauge twin is the base's function, to float32 round-off
        assert result.records[0]["gauge/logit_distance"] < 1e-5


@pytest.mark.slow
def test_a_folder_with_a_tokenizer_feeds_its_tokens(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    text = tiny_shakespeare_bytes().decode()
    chars = sorted(set(text))
    vocab = {c: i for i, c in enumerate(chars)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=chars[0]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    folder = _folder(tmp_path, "gpt2", vocab=len(chars))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    spec = hf_twin(folder, **SMALL)
    assert spec.hf.tokens == "tokenizer"
    data = hf_parts(spec)[0]
    x, y = data.batch()
    assert x.shape == (8, 16) and torch.equal(x[:, 1:], y[:, :-1])
    decoded = "".join(chars[i] for i in x[0].tolist())
    assert decoded in text  # the windows are the text, one character per token
