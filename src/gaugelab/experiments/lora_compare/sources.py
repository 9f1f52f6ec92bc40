"""What ``lora compare`` / ``lora compose`` need beside a resolved source
(:func:`gaugelab.experiments.lora.sources.find`), when its base model is known: its
validation data, its base with the updates merged, and losses.

Source: docs/commands/lora-compare.md.
"""

from __future__ import annotations

import torch

from gaugelab.experiments.lora.data import base_model, eval_batches, finetune_corpus, load_corpus
from gaugelab.experiments.lora.ladder import mean_loss
from gaugelab.experiments.lora.sources import Found
from gaugelab.models import Transformer

__all__ = ["losses", "merged_model", "target_batches"]


def target_batches(found: Found):
    """The fixed validation batches ``{retention, target}`` of the corpus this source was
    fine-tuned on (its ``target_corpus`` when set), or ``None`` when unknown."""
    s = found.source
    if s.pretrain is None:
        return None
    return eval_batches(finetune_corpus(s.pretrain, s.target_corpus), s.pretrain)


def merged_model(found: Found, deltas: dict[str, torch.Tensor]) -> Transformer:
    """The pretrained model of ``found`` with ``W₀ + ΔW`` in every module of ``deltas``."""
    s = found.source
    corpus = load_corpus(s.pretrain.corpus)  # type: ignore[union-attr]
    model = base_model(s.pretrain, s.weights, corpus.d_vocab)  # type: ignore[arg-type]
    with torch.no_grad():
        for module, delta in deltas.items():
            weight = model.get_submodule(module).weight
            weight += delta.to(weight.dtype)
    return model


def losses(model: Transformer, batches) -> dict[str, float]:
    """``{target, retention}`` mean validation loss (nats per character)."""
    return {d: mean_loss(model, batches[d]) for d in ("target", "retention")}
