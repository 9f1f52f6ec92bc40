"""Adapters with more than LoRA factors, made by PEFT itself: a classification adapter
(``modules_to_save``), trained biases (``bias="lora_only"``) and embedding LoRA."""

import warnings

import pytest
import torch

from gaugelab.adapters import Adapter
from gaugelab.experiments.lora.inspect import inspect_lora
from gaugelab.experiments.lora_compare.compose import compose_lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def _classifier(folder, seed):
    torch.manual_seed(seed)
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=16, intermediate_size=32,
                                     num_attention_heads=2, vocab_size=50)  # fmt: skip
    base = transformers.BertForSequenceClassification(config)
    base.save_pretrained(folder.parent / f"{folder.name}-base")  # before PEFT wraps its layers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(
            base,
            peft.LoraConfig(r=2, target_modules=["query", "value", "word_embeddings"],
                            task_type="SEQ_CLS", bias="lora_only", init_lora_weights=False),
        )  # fmt: skip
        model.save_pretrained(folder)
    return model, folder


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layouts")
    small = transformers.BertConfig(num_hidden_layers=1, hidden_size=16, intermediate_size=32,
                                    num_attention_heads=2, vocab_size=40)  # fmt: skip
    transformers.BertForSequenceClassification(small).save_pretrained(tmp / "bert-small")
    return [_classifier(tmp / f"a{seed}", seed) for seed in (0, 1)]


def test_the_lora_pairs_are_read_and_everything_else_is_listed(made):
    model, folder = made[0]
    adapter = Adapter.load(folder)
    embedding = "bert.embeddings.word_embeddings"
    assert set(adapter.modules) == {embedding, "bert.encoder.layer.0.attention.self.query",
                                    "bert.encoder.layer.0.attention.self.value"}  # fmt: skip
    assert adapter.embeddings == {embedding}
    assert set(adapter.others) == {
        "base_model.model.classifier.weight", "base_model.model.classifier.bias",
        "base_model.model.bert.encoder.layer.0.attention.self.query.base_layer.bias",
        "base_model.model.bert.encoder.layer.0.attention.self.value.base_layer.bias",
    }  # fmt: skip
    assert adapter.others["base_model.model.classifier.weight"] == "[2, 16] F32"
    # the embedding pair is PEFT's update, transposed: s·B A = ΔE^T  [embedding_dim, vocab]
    layer = model.base_model.model.bert.embeddings.word_embeddings
    theirs = layer.get_delta_weight("default").detach()  # [vocab, dim]
    torch.testing.assert_close(adapter.delta_weight(embedding).T, theirs, rtol=0, atol=1e-7)


def test_inspect_analyses_the_pairs_and_says_what_it_did_not(made, tmp_path):
    result = inspect_lora(made[0][1], store=tmp_path / "none.sqlite")
    assert len(result.modules) == 3
    notes = " ".join(result.not_computed)
    assert "not analysed: 4 trained tensor(s)" in notes and "classifier.weight [2, 16]" in notes
    assert "embedding LoRA (bert.embeddings.word_embeddings)" in notes
    assert "is not a gaugelab pretrain run (lora inspect --base FOLDER --data FILE" in notes


def test_the_base_checkpoint_holds_every_pair_embedding_included(made, tmp_path):
    _, folder = made[0]
    base = folder.parent / f"{folder.name}-base"
    result = inspect_lora(folder, base=base, store=tmp_path / "none.sqlite")
    assert len(result.modules) == 3  # the table [vocab, dim] is the pair's [d_in, d_out]
    with pytest.raises(ValueError, match=r"'bert\.embeddings\.word_embeddings' needs a base "
                                         r"weight 50×16 but the base checkpoint"):  # fmt: skip
        inspect_lora(folder, base=made[1][1].parent / "bert-small",
                     store=tmp_path / "none.sqlite")  # fmt: skip


def test_a_composed_classifier_adapter_keeps_its_embedding_keys_and_loads_in_peft(made, tmp_path):
    """PEFT's SEQ_CLS model expects the classifier head in the folder (KeyError
    'base_model.model.classifier.weight' without it); heads are not composed, so the
    composition names no such task type and PEFT loads it as a PeftModel."""
    out = tmp_path / "composed"
    result = compose_lora([f for _, f in made], out, store=tmp_path / "none.sqlite",
                          evaluate=False)  # fmt: skip
    composed = Adapter.load(out)
    assert composed.config.extra["task_type"] is None
    assert any("task_type SEQ_CLS not written" in n for n in result.notes)
    assert composed.embeddings == {"bert.embeddings.word_embeddings"}
    assert not composed.others
    assert sum("are not composed and not written" in n for n in result.notes) == 2
    _, folder = made[0]
    base = transformers.BertForSequenceClassification.from_pretrained(
        folder.parent / f"{folder.name}-base")  # fmt: skip
    loaded = peft.PeftModel.from_pretrained(base, str(out))
    layer = loaded.base_model.model.bert.encoder.layer[0].attention.self.query
    module = "bert.encoder.layer.0.attention.self.query"
    torch.testing.assert_close(layer.get_delta_weight("default").detach(),
                               composed.delta_weight(module), rtol=0, atol=1e-7)  # fmt: skip


def test_compose_json_and_a_base_mismatch_allowed_and_recorded(made, tmp_path):
    import json
    import shutil

    from typer.testing import CliRunner

    from gaugelab.cli.app import app

    other = tmp_path / "renamed"
    shutil.copytree(made[1][1], other)
    config = json.loads((other / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "/local/copy/of/bert"
    (other / "adapter_config.json").write_text(json.dumps(config))
    args = ["lora", "compose", str(made[0][1]), str(other), "--store", str(tmp_path / "s.sqlite"),
            "--no-report"]  # fmt: skip
    refused = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o1")])
    assert refused.exit_code == 2 and "different base models" in refused.output
    assert not (tmp_path / "o1").exists()
    allowed = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o2"),
                                       "--allow-base-mismatch", "--json"])  # fmt: skip
    assert allowed.exit_code == 0, allowed.output
    data = json.loads(allowed.output)
    assert data["method"] == "cat" and len(data["ledger"]) == 3
    written = json.loads((tmp_path / "o2" / "gaugelab_composition.json").read_text())
    assert written["bases"][1] == "/local/copy/of/bert" and written["allow_different_bases"]
    assert Adapter.load(tmp_path / "o2").config.base_model_name_or_path is None
