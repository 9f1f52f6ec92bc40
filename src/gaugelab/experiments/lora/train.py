"""The LoRA protocol's training: the pretrain run and one fine-tuning candidate, resumable.

Both train an :class:`~gaugelab.models.Ensemble` (the pretrain: one member; a candidate: one
member per seed, each with its own minibatch stream) with AdamW under a linear warm-up and a
cosine decay to a tenth of the peak rate, and measure both domains' validation loss on the
pretrain spec's fixed batches at step 0, every ``eval_every`` steps and at the end. Given a run
context they log those losses, write a checkpoint every ``checkpoint_every`` steps (trainable
parameters, optimizer state, stream states, curves) and continue from the latest one after an
interruption, bit for bit.

Source: docs/commands/lora.md (the protocol); biderman2024lora (the learning–forgetting
measurement).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import safetensors.torch
import torch
import torch.nn.functional as F

from gaugelab.adapters import Adapter
from gaugelab.determinism import deterministic
from gaugelab.experiments.lora.data import (
    BASE_PREFIX,
    DOMAINS,
    Batches,
    base_model,
    eval_batches,
    finetune_corpus,
    load_corpus,
    pretrain_weights,
)
from gaugelab.experiments.lora.diagnostics import FactorLog
from gaugelab.experiments.lora.spec import FinetuneSpec, PretrainSpec
from gaugelab.models import Ensemble, Transformer
from gaugelab.models.lora import inject_lora, lora_modules
from gaugelab.optim import make_optimizer
from gaugelab.study.checkpoint import Checkpoint
from gaugelab.study.train import Resume, Snapshot, fit, require_finite, restore_tensors
from gaugelab.tasks import TwoDomainText


@dataclass
class Curves:
    """Validation curves of E members. JSON-able; indices are ``[check][member]``.

    Attributes:
        steps: ``[C]`` the evaluated steps (updates applied), 0 first.
        retention, target: ``[C][E]`` mean validation cross-entropy (nats per character).
        train: ``[C][E]`` mean training loss over the steps since the previous check
            (``None`` at step 0).
    """

    steps: list[int] = field(default_factory=list)
    retention: list[list[float]] = field(default_factory=list)
    target: list[list[float]] = field(default_factory=list)
    train: list[list[float] | None] = field(default_factory=list)

    def final(self, domain: str) -> list[float]:
        """``[E]`` the last check's validation loss of ``domain``."""
        return list(getattr(self, domain)[-1])


def member_losses(ensemble: Ensemble, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]):
    """``[E]`` float64 mean cross-entropy of every member over ``batches`` (equal sizes)."""
    total = torch.zeros(ensemble.n_members, dtype=torch.float64)
    with torch.no_grad():
        for x, y in batches:
            logits = ensemble(x)  # [E, B, T, V]
            E = logits.shape[0]
            loss = F.cross_entropy(logits.flatten(0, 2), y.flatten().repeat(E), reduction="none")
            total += loss.view(E, -1).mean(dim=1).double()
    return total / len(batches)


def lr_factor(step: int, steps: int, warmup: int) -> float:
    """The schedule at ``step`` (updates applied before this one): ``min(1, (step+1)/warmup)
    · (0.1 + 0.9·½(1 + cos(π·step/steps)))``."""
    warm = min(1.0, (step + 1) / warmup) if warmup else 1.0
    return warm * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))


@dataclass(frozen=True)
class Loop:
    """How to train: steps, schedule, batch size, cadences, and the metric-name suffixes."""

    steps: int
    warmup: int
    batch_size: int
    eval_every: int
    checkpoint_every: int
    suffixes: tuple[str, ...]  # one per member, e.g. "/seed=0"; "" for the pretrain
    label: str


def train_members(
    ensemble: Ensemble,
    optimizer: torch.optim.Optimizer,
    streams: Sequence[torch.Generator],
    corpus: TwoDomainText,
    domain: str,
    val: Batches,
    loop: Loop,
    run: Any = None,
    diagnostics: Any = None,
    after_update: Callable[[int], None] | None = None,
) -> Curves:
    """Train every member on minibatches of ``domain``'s training split, one stream each.

    Args:
        ensemble: the E members; optimizer: over its trainable stacked parameters
            (``member_dims=1``), each group's ``lr`` its peak rate.
        streams: E generators, one minibatch stream per member.
        corpus, domain: the training text; val: :func:`eval_batches`.
        loop: the :class:`Loop`.
        run: a run context (logging, checkpoints, resume) or ``None``.
        diagnostics: a :class:`gaugelab.experiments.lora.diagnostics.FactorLog`: with
            a run, the LoRA factors' §0x08L records are logged after the updates it selects
            (``diag/<module><suffix>/…``); ``None`` (the default) logs none.
        after_update: called with the number of updates applied after each update (steps
            after a resume point only), e.g. to record states at declared checkpoints.

    Returns:
        The :class:`Curves` (steps 0, every ``eval_every``, and ``loop.steps``).

    Raises:
        NonFiniteError: a training loss or gradient is NaN/inf.
        StoreError: the checkpoint to resume from does not fit this run.
    """
    peak = [g["lr"] for g in optimizer.param_groups]
    curves, running = Curves(), torch.zeros(ensemble.n_members, dtype=torch.float64)
    source = corpus.domain(domain)
    trainable = {n: p for n, p in ensemble.stacked_parameters().items() if p.requires_grad}

    def check(step: int) -> None:
        losses = {d: member_losses(ensemble, val[d]).tolist() for d in DOMAINS}
        since = step - (curves.steps[-1] if curves.steps else 0)
        train = (running / since).tolist() if since else None
        curves.steps.append(step)
        curves.retention.append(losses["retention"])
        curves.target.append(losses["target"])
        curves.train.append(train)
        running.zero_()
        if run is not None:
            metrics = {}
            for e, suffix in enumerate(loop.suffixes):
                for d in DOMAINS:
                    metrics[f"{d}/val_loss{suffix}"] = losses[d][e]
                if train is not None:
                    metrics[f"train_loss{suffix}"] = train[e]
            run.log(step, metrics)

    def snapshot(t: int) -> Snapshot:
        streams_state = {f"stream{e}": g.get_state() for e, g in enumerate(streams)}
        extra = {"curves": dataclasses.asdict(curves), "running": running.tolist()}
        return Snapshot(trainable, optimizer.state_dict(), streams_state, t, extra)

    def restore(saved: Checkpoint) -> None:
        nonlocal curves, running
        restored = Curves(**saved.extra["curves"])
        expected = list(range(0, saved.step, loop.eval_every))
        if restored.steps != expected:
            raise ValueError(f"curves at steps {restored.steps}, expected {expected}")
        running = torch.tensor(saved.extra["running"], dtype=torch.float64)
        restore_tensors(trainable, saved.model_state, "trainable parameters")
        optimizer.load_state_dict(saved.optimizer_state)
        for e, g in enumerate(streams):
            g.set_state(saved.rng_states[f"stream{e}"])
        curves = restored

    def update(t: int) -> None:
        nonlocal running
        if t % loop.eval_every == 0 and not (curves.steps and curves.steps[-1] == t):
            check(t)
        batches = [source.get_batch("train", loop.batch_size, g) for g in streams]
        x = torch.stack([b[0] for b in batches])  # [E, B, T]
        y = torch.stack([b[1] for b in batches])
        factor = lr_factor(t, loop.steps, loop.warmup)
        for group, lr in zip(optimizer.param_groups, peak, strict=True):
            group["lr"] = lr * factor
        previous = None if diagnostics is None else diagnostics.before(ensemble, t + 1)
        optimizer.zero_grad(set_to_none=True)
        logits = ensemble(x, member_inputs=True)  # [E, B, T, V]
        E = logits.shape[0]
        losses = F.cross_entropy(logits.flatten(0, 2), y.flatten(), reduction="none")
        losses = losses.view(E, -1).mean(dim=1)  # [E]: members never interact
        require_finite(losses, f"{loop.label}: training loss at step {t + 1}")
        losses.sum().backward()
        optimizer.step()
        running += losses.detach().double()
        if previous is not None and run is not None:
            lr_now = optimizer.param_groups[0]["lr"]
            run.log(t + 1, diagnostics.metrics(ensemble, optimizer, previous, t + 1,
                                               losses.detach(), lr_now))  # fmt: skip
        if after_update is not None:
            after_update(t + 1)

    every = loop.checkpoint_every
    fit(update, steps=loop.steps, label=loop.label, run=run,
        resume=Resume(snapshot, restore, lambda t: t % every == 0))  # fmt: skip
    for group, lr in zip(optimizer.param_groups, peak, strict=True):
        group["lr"] = lr
    if not (curves.steps and curves.steps[-1] == loop.steps):
        check(loop.steps)
    return curves


def _write_json(run: Any, name: str, data: dict[str, Any], kind: str) -> None:
    path = run.directory / name
    path.write_text(json.dumps(data, allow_nan=False, indent=1), encoding="utf-8")
    run.artifact(path, kind)


def _loop(spec: PretrainSpec | FinetuneSpec, suffixes: tuple[str, ...], label: str) -> Loop:
    return Loop(spec.steps, spec.warmup, spec.batch_size, spec.eval_every,
                spec.checkpoint_every, suffixes, label)  # fmt: skip


def train_pretrain(spec: PretrainSpec, run: Any = None) -> tuple[Transformer, Curves]:
    """Train the pretrain model on the retention domain (see the module docstring).

    With ``run``: logs ``retention/val_loss``, ``target/val_loss``, ``train_loss``; records
    ``weights.safetensors`` (kind ``weights``: the state dict) and ``result.json`` (kind
    ``result``: curves, final losses, parameter count, seconds).

    Returns:
        The trained model and its :class:`Curves` (one member).

    Raises:
        NonFiniteError: a loss or gradient became NaN/inf.
        FileNotFoundError, ValueError: a corpus file is missing or changed.
    """
    start = time.perf_counter()
    with deterministic():
        corpus = load_corpus(spec.corpus)
        model = Transformer(spec.transformer_config(corpus.d_vocab), seed=spec.init_seed,
                            dtype=getattr(torch, spec.dtype))  # fmt: skip
        ensemble = Ensemble([model])
        trainable = [p for p in ensemble.parameters() if p.requires_grad]
        opt = make_optimizer("adamw", trainable, lr=spec.lr, weight_decay=0.0, member_dims=1)
        stream = torch.Generator().manual_seed(spec.data_seed)
        val = eval_batches(corpus, spec)
        curves = train_members(ensemble, opt, [stream], corpus, "retention", val,
                               _loop(spec, ("",), "pretrain"), run)  # fmt: skip
        trained = ensemble.member(0)
    if run is not None:
        path = run.directory / "weights.safetensors"
        safetensors.torch.save_file({k: v.contiguous() for k, v in trained.state_dict().items()},
                                    str(path))  # fmt: skip
        run.artifact(path, "weights")
        result = {"curves": dataclasses.asdict(curves), "d_vocab": corpus.d_vocab,
                  "parameters": sum(p.numel() for p in trained.parameters()),
                  "seconds": time.perf_counter() - start}  # fmt: skip
        _write_json(run, "result.json", result, "result")
    return trained, curves


def finetune_members(spec: FinetuneSpec, base: Transformer) -> list[Transformer]:
    """One copy of ``base`` per seed of the candidate, LoRA injected (its factors drawn from
    that seed) unless the candidate is full fine-tuning."""
    rank = spec.candidate[1]
    members = []
    for seed in spec.seeds:
        member = copy.deepcopy(base)
        if rank is not None:
            inject_lora(member, list(spec.targets), rank, spec.alpha(rank), init=spec.init,
                        use_rslora=spec.rslora, seed=seed)  # fmt: skip
        members.append(member)
    return members


def train_finetune(
    spec: FinetuneSpec, run: Any, after_update: Callable[[Ensemble, int], None] | None = None
) -> None:
    """Fine-tune one candidate (``spec.candidate``) on the target domain from the pretrain
    run's verified weights, and record it.

    Logs ``{retention,target}/val_loss/seed=S`` and ``train_loss/seed=S``; records per seed a
    PEFT-format adapter folder ``adapter-seed<S>/`` (kind ``adapter``; LoRA) or the dense
    deltas ``deltas-seed<S>.safetensors`` (kind ``deltas``: trained − pretrained, every
    parameter; full fine-tuning), and ``result.json`` (kind ``result``).

    ``after_update(ensemble, step)`` (optional) is called after every update (the
    learn–forget study records its declared checkpoints with it).

    Raises:
        AdmissionError: the pretrain run has not completed in the run's store.
        ArtifactError: its weights file changed since it was written.
        NonFiniteError: a loss or gradient became NaN/inf.
    """
    start = time.perf_counter()
    method, rank = spec.candidate
    store = run.store
    weights = pretrain_weights(store, spec.pretrain)
    label = "full" if rank is None else f"{'rslora' if spec.rslora else 'lora'} r={rank}"
    with deterministic():
        corpus = finetune_corpus(spec.pretrain, spec.target_corpus)
        base = base_model(spec.pretrain, weights, corpus.d_vocab)  # the pretrain vocabulary
        members = finetune_members(spec, base)
        ensemble = Ensemble(members, sdpa=True)  # member-native, fused attention
        trainable = [p for p in ensemble.parameters() if p.requires_grad]
        lr = spec.full_lr if rank is None else spec.lr
        opt = make_optimizer("adamw", trainable, lr=lr, weight_decay=0.0, member_dims=1)
        streams = [torch.Generator().manual_seed(seed) for seed in spec.seeds]
        val = eval_batches(corpus, spec.pretrain)
        suffixes = tuple(f"/seed={s}" for s in spec.seeds)
        log = None
        if rank is not None and spec.diagnostics_every is not None:
            log = FactorLog(
                next(iter(lora_modules(members[0]).values())).scale,
                members=dict(enumerate(suffixes)), every=spec.diagnostics_every,
                tokens_per_step=spec.batch_size * spec.pretrain.corpus.block_size,
            )  # fmt: skip
        hook = None if after_update is None else functools.partial(after_update, ensemble)
        curves = train_members(ensemble, opt, streams, corpus, "target", val,
                               _loop(spec, suffixes, label), run, diagnostics=log,
                               after_update=hook)  # fmt: skip
        trained = [ensemble.member(e) for e in range(len(spec.seeds))]
    files = {}
    for seed, model, original in zip(spec.seeds, trained, members, strict=True):
        if rank is None:
            path = run.directory / f"deltas-seed{seed}.safetensors"
            base_state = base.state_dict()
            deltas = {k: (v - base_state[k]).contiguous() for k, v in model.state_dict().items()}
            safetensors.torch.save_file(deltas, str(path))
            run.artifact(path, "deltas")
            files[str(seed)] = path.name
            continue
        for name, layer in lora_modules(model).items():  # each member's own record (its seed)
            record = lora_modules(original)[name].record
            layer.record = dataclasses.replace(record, lr_down=lr, lr_up=lr)
        adapter = Adapter.from_model(model, base_model_name_or_path=BASE_PREFIX +
                                     spec.pretrain.identity())  # fmt: skip
        folder = adapter.save(run.directory / f"adapter-seed{seed}")
        for file in sorted(folder.iterdir()):
            run.artifact(file, "adapter")
        files[str(seed)] = folder.name
    result = {
        "candidate": label, "method": method, "rank": rank, "seeds": list(spec.seeds),
        "curves": dataclasses.asdict(curves), "files": files,
        "trainable_parameters": sum(p[0].numel() for p in trainable),
        "seconds": time.perf_counter() - start,
    }  # fmt: skip
    _write_json(run, "result.json", result, "result")


__all__ = ["Curves", "Loop", "finetune_members", "lr_factor", "member_losses", "train_finetune",
           "train_members", "train_pretrain"]  # fmt: skip
