"""What the LoRA runs and their inspection share: the corpus, the fixed validation batches,
and the pretrain run's weights read back from the store (after the sha256 check).

Source: docs/commands/lora.md (the protocol).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from gaugelab.adapters import Adapter
from gaugelab.experiments.lora.spec import PretrainSpec
from gaugelab.models import Transformer
from gaugelab.study.runner import AdmissionError
from gaugelab.tasks import TwoDomainSpec, TwoDomainText

__all__ = ["BASE_PREFIX", "DOMAINS", "base_model", "eval_batches", "finetune_corpus",
           "load_corpus", "pretrain_weights", "read_adapter_bytes"]  # fmt: skip

DOMAINS = ("retention", "target")
BASE_PREFIX = "gaugelab:lora-pretrain:"
"""``base_model_name_or_path`` of the adapters written here: the prefix and the pretrain run's
identity, so :func:`gaugelab.experiments.lora.run.inspect_lora` finds base model and data again."""

Batches = dict[str, list[tuple[torch.Tensor, torch.Tensor]]]


@functools.lru_cache(maxsize=4)
def load_corpus(spec: TwoDomainSpec, vocabulary: tuple[str, ...] | None = None) -> TwoDomainText:
    """:class:`TwoDomainText` of ``spec``, read (and its digests checked) once per process:
    the pretrain and every candidate of a study share it. Read-only. ``vocabulary``: encode
    with these characters instead of the corpus's own (a fine-tuning ``target_corpus``)."""
    return TwoDomainText(spec, vocabulary=vocabulary)


def finetune_corpus(pretrain: PretrainSpec, target_corpus: TwoDomainSpec | None) -> TwoDomainText:
    """The corpus a fine-tuning run trains and is evaluated on: the pretrain corpus, or its
    ``target_corpus`` (when set) encoded with the pretrain corpus's vocabulary."""
    corpus = load_corpus(pretrain.corpus)
    if target_corpus is None:
        return corpus
    return load_corpus(target_corpus, vocabulary=corpus.chars)


def eval_batches(
    corpus: TwoDomainText,
    spec: PretrainSpec,
    *,
    split: str = "val",
    domains: tuple[str, ...] = DOMAINS,
) -> Batches:
    """The fixed evaluation batches: ``val_batches`` of each domain's ``split`` (default the
    validation split), drawn from one generator seeded ``eval_seed`` (in the order of
    ``domains``, retention first by default), each ``(x, y)`` of ``[val_batch_size,
    block_size]`` longs."""
    gen = torch.Generator().manual_seed(spec.eval_seed)
    return {
        d: [corpus.domain(d).get_batch(split, spec.val_batch_size, gen) for _ in
            range(spec.val_batches)]
        for d in domains
    }  # fmt: skip


def pretrain_weights(store: Any, spec: PretrainSpec) -> dict[str, torch.Tensor]:
    """The state dict of the completed pretrain run of ``spec`` in ``store``, read from its
    ``weights`` artifact after the sha256 check.

    Raises:
        AdmissionError: the run is not in the store or has not completed.
        ArtifactError: the weights file is missing or changed since the run wrote it.
    """
    identity = spec.identity()
    if why := store.incomplete(identity):
        advice = (
            "the candidates run once it completes: mend its cause and rerun the same command"
            if why.startswith("it failed")
            else "run the study with run_lora_finetune (gaugelab lora finetune), which runs it "
            "first"
        )
        raise AdmissionError(f"the pretrain run {identity[:12]} did not complete: {why}; {advice}")
    return safetensors.torch.load(store.result(identity, "weights").data)


def base_model(spec: PretrainSpec, weights: dict[str, torch.Tensor], d_vocab: int) -> Transformer:
    """The pretrained Transformer with ``weights`` loaded (strict)."""
    model = Transformer(spec.transformer_config(d_vocab), dtype=getattr(torch, spec.dtype))
    model.load_state_dict(weights, strict=True)
    return model


def read_adapter_bytes(files: dict[str, bytes]) -> Adapter:
    """An :class:`Adapter` from the verified bytes of its folder's files (name → bytes),
    written to a private temporary folder, loaded from there and read into memory (the
    folder is removed)."""
    with tempfile.TemporaryDirectory(prefix="gaugelab-adapter-") as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
        stored = Adapter.load(tmp)
        return Adapter(dict(stored.modules), stored.config, embeddings=stored.embeddings,
                       others=stored.others)  # fmt: skip
