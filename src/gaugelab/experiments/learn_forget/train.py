"""The learning–forgetting study's training cell and the evaluation of its recorded states.

A cell (one block, one candidate, every paired seed as one ensemble) trains exactly as the LoRA
fine-tuning protocol does (:func:`gaugelab.experiments.lora.train.train_finetune`); at each
declared checkpoint it records the ensemble's trainable state (kind ``state``) and logs the
stress domain's validation loss per seed. :func:`cell_ensemble` rebuilds a cell's ensemble from
the pretrained weights and a recorded state, so the decision and the test evaluate the very
parameters validation saw.

Source: seed 003 §0x0BH (a checkpoint keeps its lineage), §0x0BI (checkpoints are declared and
selected on validation only); biderman2024lora.
"""

from __future__ import annotations

from typing import Any

import safetensors.torch
import torch

from gaugelab.determinism import deterministic
from gaugelab.experiments.learn_forget.spec import LearnForgetSpec
from gaugelab.experiments.lora.data import eval_batches, load_corpus
from gaugelab.experiments.lora.train import finetune_members, member_losses, train_finetune
from gaugelab.models import Ensemble, Transformer
from gaugelab.study.store.db import StoreError
from gaugelab.tasks import TwoDomainText

__all__ = ["DOMAINS3", "cell_ensemble", "domain_batches", "state_name", "train_cell"]

DOMAINS3 = ("target", "retention", "stress")
"""The three evaluated domains: target gain, forgetting (retention), stress."""


def state_name(step: int) -> str:
    """The file of the state recorded at ``step``."""
    return f"state-step{step}.safetensors"


def cell_corpora(spec: LearnForgetSpec) -> tuple[TwoDomainText, TwoDomainText]:
    """``(corpus, stress)``: the cell's two-domain corpus (its block's target, the pretrain
    vocabulary) and the stress corpus (encoded with the pretrain vocabulary)."""
    pretrain = spec.finetune.pretrain.corpus
    chars = load_corpus(pretrain).chars
    stress = load_corpus(spec.stress, vocabulary=chars)
    target = spec.block_corpus()
    corpus = load_corpus(pretrain) if target == pretrain else load_corpus(target, vocabulary=chars)
    return corpus, stress


def domain_batches(spec: LearnForgetSpec, split: str) -> dict[str, list]:
    """The fixed batches of ``split`` (``"val"`` or ``"test"``) for the three domains of the
    spec's block, each drawn as :func:`~gaugelab.experiments.lora.data.eval_batches` draws
    them (the target and retention batches of ``"val"`` are the ones training logs)."""
    corpus, stress = cell_corpora(spec)
    pretrain = spec.finetune.pretrain
    batches = eval_batches(corpus, pretrain, split=split)
    batches["stress"] = eval_batches(stress, pretrain, split=split, domains=("target",))["target"]
    return batches


def cell_ensemble(
    spec: LearnForgetSpec, base: Transformer, state: dict[str, torch.Tensor] | None
) -> Ensemble:
    """The cell's ensemble (one member per seed, LoRA injected as in training) with ``state``
    (the recorded trainable stacked parameters) loaded; ``None`` keeps the initial state.

    Raises:
        ValueError: ``state`` does not hold exactly the ensemble's trainable parameters.
    """
    ensemble = Ensemble(finetune_members(spec.run_finetune(), base), sdpa=True)
    if state is None:
        return ensemble
    trainable = {n: p for n, p in ensemble.stacked_parameters().items() if p.requires_grad}
    if set(trainable) != set(state):
        raise ValueError(
            f"cell_ensemble: the state holds {sorted(set(state) ^ set(trainable))[:4]} that the "
            f"{spec.candidate} ensemble does not (or lacks them)"
        )
    with torch.no_grad():
        for name, p in trainable.items():
            p.copy_(state[name])
    return ensemble


def train_cell(spec: LearnForgetSpec, run: Any) -> None:
    """Train the cell (see the module docstring) and record its declared checkpoints.

    Logs, besides the fine-tuning protocol's metrics, ``stress/val_loss/seed=S`` at every
    declared checkpoint; records ``state-step<t>.safetensors`` (kind ``state``) there.

    Raises:
        AdmissionError: the pretrain run has not completed in the run's store.
        StoreError: a state file of an earlier attempt differs from this attempt's (a resume
            that did not reproduce its run).
    """
    ft = spec.run_finetune()
    declared = set(spec.checkpoint_steps())
    with deterministic():
        stress_val = domain_batches(spec, "val")["stress"]
    suffixes = [f"/seed={s}" for s in ft.seeds]

    def record(ensemble: Ensemble, step: int) -> None:
        if step not in declared:
            return
        state = {
            n: p.detach().contiguous()
            for n, p in ensemble.stacked_parameters().items()
            if p.requires_grad
        }
        path = run.directory / state_name(step)
        data = safetensors.torch.save(state)
        if path.exists() and path.read_bytes() != data:
            raise StoreError(
                f"{path}: the state an earlier attempt recorded at step {step} differs from "
                "this attempt's; the run did not reproduce itself (delete the run's folder to "
                "restart it)"
            )
        if not path.exists():
            path.write_bytes(data)
        run.artifact(path, "state")
        losses = member_losses(ensemble, stress_val).tolist()
        run.log(step, {f"stress/val_loss{s}": v for s, v in zip(suffixes, losses, strict=True)})

    train_finetune(ft, run, after_update=record)  # admits the pretrain run before training
