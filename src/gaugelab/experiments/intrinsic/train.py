"""The intrinsic-dimension protocol's training: the digits pretrain and one trial.

A trial is the full fine-tuning reference at one learning rate, or one ``(d, seed, lr)``
subspace run: DID (``θ = θ₀ + P u``) or SAID (``θ_i = θ₀_i + λ_i R_i P(z)``, one group per
layer, the scales inside ``d``) of the problem's MLP through
:class:`gaugelab.lowrank.intrinsic.protocol.DIDReparameterization` /
:class:`~gaugelab.lowrank.intrinsic.protocol.SAIDReparameterization`, trained with Adam on
minibatches
of the train split (stream seeded by the trial's seed, which also draws the projection), and
scored by accuracy on the selection and evaluation splits after the last step. The base score
is the same accuracy at ``u = 0`` (``θ₀``). Trials take seconds, so they keep no checkpoint: an
interrupted one starts again from step 0.

Source: seed 003 §0x02A (DID), §0x02E (SAID), §0x02J (the pseudocode); li2018intrinsic;
aghajanyan2021intrinsic (head inside d).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import safetensors.torch
import torch
import torch.nn.functional as F
from torch import nn

from gaugelab.determinism import deterministic
from gaugelab.experiments.intrinsic.spec import DigitsPretrainSpec, IntrinsicSpec
from gaugelab.lowrank.intrinsic.protocol import (
    DegenerateBudget,
    DIDReparameterization,
    SAIDReparameterization,
    make_projection,
)
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.optim import Adam
from gaugelab.study.runner import AdmissionError
from gaugelab.study.train import fit, require_finite
from gaugelab.tasks import CharText
from gaugelab.tasks.digits import DigitsSplits, digits_splits

__all__ = [
    "Problem",
    "accuracy",
    "build_problem",
    "char_model",
    "make_mlp",
    "train_pretrain",
    "train_trial",
]

FINETUNE_CLASSES = (5, 6, 7, 8, 9)


def make_mlp(hidden: int, layers: int, n_out: int, seed: int, dtype: torch.dtype) -> nn.Sequential:
    """``64 → hidden (tanh) → … → n_out``; weights and biases ``U(±1/√fan_in)`` from a
    generator seeded ``seed`` (global RNG untouched)."""
    sizes = [64] + [hidden] * layers + [n_out]
    mods: list[nn.Module] = []
    gen = torch.Generator().manual_seed(seed)
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        lin = nn.Linear(a, b, dtype=dtype)
        with torch.no_grad():
            bound = 1 / math.sqrt(a)
            lin.weight.copy_((torch.rand(b, a, generator=gen, dtype=dtype) * 2 - 1) * bound)
            lin.bias.copy_((torch.rand(b, generator=gen, dtype=dtype) * 2 - 1) * bound)
        mods.append(lin)
        if i < layers:
            mods.append(nn.Tanh())
    return nn.Sequential(*mods)


Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Problem:
    """θ₀ and the data of one problem.

    Attributes:
        model: the network at θ₀; sample: ``(generator, batch) → (x, y)`` a training minibatch;
        selection, evaluation: fixed batches of the selection and evaluation splits;
        sha256: the data's digest (recorded in every run).
    """

    model: nn.Module
    sample: Callable[[torch.Generator, int], Batch]
    selection: list[Batch]
    evaluation: list[Batch]
    sha256: str


def accuracy(model: nn.Module, batches: list[Batch]) -> float:
    """Fraction of targets predicted correctly (argmax of the logits) over ``batches``; for a
    sequence model every position counts (next-character accuracy)."""
    right = total = 0
    with torch.no_grad():
        for x, y in batches:
            right += int((model(x).argmax(dim=-1) == y).sum())
            total += y.numel()
    return right / total


def _train(
    model: nn.Module,
    params: list[torch.Tensor],
    sample: Callable[[torch.Generator, int], Batch],
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    label: str,
    run: Any,
) -> float:
    """Adam on ``params``; returns the mean training loss of the last tenth of the steps."""
    opt = Adam(params, lr=lr)  # torch's Adam update; ours does not load the compiler
    gen = torch.Generator().manual_seed(seed)
    tail: list[float] = []

    def update(t: int) -> None:
        x, y = sample(gen, batch)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        require_finite(loss.detach(), f"{label}: training loss at step {t + 1}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        require_finite((p.grad for p in params), f"{label}: gradient at step {t + 1}")
        opt.step()
        if t >= steps - max(1, steps // 10):
            tail.append(float(loss.detach()))

    fit(update, steps=steps, label=label, run=run, progress_every=10)
    return sum(tail) / len(tail)


def _write_json(run: Any, name: str, data: dict[str, Any], kind: str) -> None:
    path = run.directory / name
    path.write_text(json.dumps(data, allow_nan=False, indent=1), encoding="utf-8")
    run.artifact(path, kind)


def train_pretrain(spec: DigitsPretrainSpec, run: Any = None) -> tuple[nn.Module, float]:
    """Train the pretrain MLP on ``spec.classes``; with ``run``, record its weights and
    ``result.json`` (selection and eval accuracy on those classes). Returns (model, eval
    accuracy)."""
    start = time.perf_counter()
    with deterministic():
        data = digits_splits(spec.classes, seed=spec.split_seed)
        model = make_mlp(spec.hidden, spec.layers, len(spec.classes), spec.init_seed, torch.float32)
        loss = _train(
            model,
            list(model.parameters()),
            _digits_sampler(data),
            spec.steps,
            spec.batch_size,
            spec.lr,
            spec.data_seed,
            "pretrain 0–4",
            run,
        )
        scores = {"selection": accuracy(model, [data.selection]),
                  "eval": accuracy(model, [data.eval])}  # fmt: skip
    if run is not None:
        path = run.directory / "weights.safetensors"
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        safetensors.torch.save_file(state, str(path))
        run.artifact(path, "weights")
        _write_json(
            run,
            "result.json",
            {
                "accuracy": scores,
                "train_loss": loss,
                "data_sha256": data.sha256,
                "seconds": time.perf_counter() - start,
            },
            "result",
        )
    return model, scores["eval"]


def pretrain_weights(store: Any, spec: DigitsPretrainSpec) -> dict[str, torch.Tensor]:
    """The verified state dict of the completed pretrain run of ``spec`` in ``store``.

    Raises:
        AdmissionError: not completed; ArtifactError: its weights file changed or is missing.
    """
    identity = spec.identity()
    if why := store.incomplete(identity):
        raise AdmissionError(
            f"the digits pretrain run {identity[:12]} did not complete: {why}"
            + (
                "; the trials run once it completes: mend its cause and rerun the same command"
                if why.startswith("it failed")
                else "; run_intrinsic_dim runs it first"
            )
        )
    return safetensors.torch.load(store.result(identity, "weights").data)


def _digits_sampler(data: DigitsSplits) -> Callable[[torch.Generator, int], Batch]:
    x, y = data.train

    def sample(gen: torch.Generator, batch: int) -> Batch:
        idx = torch.randint(0, x.shape[0], (batch,), generator=gen)
        return x[idx], y[idx]

    return sample


CHAR_BLOCK = 32
"""Window length of the character problem (characters)."""


def char_model(spec: IntrinsicSpec) -> tuple[nn.Module, Any]:
    """The causal character Transformer (``layers`` blocks, ``d_model = hidden``, two heads) at
    its initialization, and the packaged tiny-shakespeare it reads."""
    text = CharText.tiny_shakespeare(block_size=CHAR_BLOCK)
    config = TransformerConfig(
        n_layers=spec.layers, d_model=spec.hidden, n_heads=2, d_head=spec.hidden // 2,
        d_mlp=2 * spec.hidden, d_vocab=text.d_vocab, n_ctx=CHAR_BLOCK, act_fn="gelu",
        normalization="rmsnorm", norm_placement="pre", positional="learned", causal=True,
        init_std=0.02,
    )  # fmt: skip
    return Transformer(config, seed=spec.init_seed, dtype=getattr(torch, spec.dtype)), text


def _char_problem(spec: IntrinsicSpec) -> Problem:
    """:func:`char_model` on tiny-shakespeare: training windows from the train split; the
    validation split cut in halves, four fixed batches of 64 windows from the first half
    (selection) and from the second (evaluation), drawn from ``split_seed``."""
    model, text = char_model(spec)
    val = text.data("val")
    half = val.numel() // 2
    gen = torch.Generator().manual_seed(spec.split_seed)
    window = torch.arange(CHAR_BLOCK)

    def fixed(part: torch.Tensor) -> list[Batch]:
        out = []
        for _ in range(4):
            index = torch.randint(part.numel() - CHAR_BLOCK, (64, 1), generator=gen) + window
            out.append((part[index], part[index + 1]))
        return out

    selection, evaluation = fixed(val[:half]), fixed(val[half:])
    return Problem(model, lambda g, b: text.get_batch("train", b, g), selection, evaluation,
                   text.sha256)  # fmt: skip


def build_problem(spec: IntrinsicSpec, store: Any = None) -> Problem:
    """θ₀ and the data of ``spec.problem``: ``scratch`` — the freshly initialized MLP and all
    ten digits; ``finetune`` — the pretrained body (from the store) with a new head for digits
    5–9 (relabelled 0–4) initialized from ``init_seed``; ``char`` — :func:`_char_problem`."""
    if spec.problem == "char":
        return _char_problem(spec)
    dtype = getattr(torch, spec.dtype)
    if spec.problem == "scratch":
        model = make_mlp(spec.hidden, spec.layers, 10, spec.init_seed, dtype)
        data = digits_splits(range(10), seed=spec.split_seed, dtype=dtype)
    else:
        p = spec.pretrain
        model = make_mlp(p.hidden, p.layers, len(p.classes), p.init_seed, torch.float32)
        model.load_state_dict(pretrain_weights(store, p), strict=True)
        fresh = make_mlp(p.hidden, p.layers, len(FINETUNE_CLASSES), spec.init_seed, torch.float32)
        model[-1] = fresh[-1]  # the new head, counted inside d
        model = model.to(dtype)
        data = digits_splits(FINETUNE_CLASSES, seed=p.split_seed, dtype=dtype)
    return Problem(model, _digits_sampler(data), [data.selection], [data.eval], data.sha256)


def train_trial(spec: IntrinsicSpec, run: Any) -> dict[str, Any]:
    """Train this run's one trial (see the module docstring) and record ``result.json``.

    Raises:
        AdmissionError: finetune without its completed pretrain run.
        NonFiniteError: a loss or gradient became NaN/inf.
        ValueError: a SAID budget below the number of groups.
    """
    start = time.perf_counter()
    with deterministic():
        problem = build_problem(spec, run.store if run is not None else None)
        model = problem.model
        base = {"selection": accuracy(model, problem.selection),
                "eval": accuracy(model, problem.evaluation)}  # fmt: skip
        D = sum(p.numel() for p in model.parameters())
        out: dict[str, Any] = {
            "role": spec.role,
            "ambient_dim": D,
            "base": base,
            "data_sha256": problem.sha256,
            "status": "completed",
        }
        if spec.role == "full":
            trained: nn.Module = model
            seed, lr = 0, spec.full_lrs[0]
            out.update(lr=lr, ledger={"method": "full", "trainable": D})
        else:
            d, seed, lr = spec.dims[0], spec.seeds[0], spec.lrs[0]
            dtype = getattr(torch, spec.dtype)
            out.update(d=d, seed=seed, lr=lr)

            def proj(D_: int, k: int) -> Any:
                return make_projection(
                    spec.family, D_, k, seed, dtype=dtype, normalization=spec.normalization
                )

            try:
                if spec.method == "did":
                    trained = DIDReparameterization(model, lambda D_: proj(D_, d))
                else:
                    trained = SAIDReparameterization(model, proj, d, groups="module")
            except DegenerateBudget as exc:  # d = m: no update; reported, scored untrained
                out.update(
                    status="degenerate",
                    message=str(exc),
                    selection=base["selection"],
                    eval=base["eval"],
                    train_loss=None,
                    ledger={"method": "SAID", "d": d, "shared": 0, "scales": exc.m},
                    seconds=time.perf_counter() - start,
                )
                if run is not None:
                    _write_json(run, "result.json", out, "result")
                return out
            out.update(ledger=trained.ledger(), projection=trained.projection.identity.as_dict())
        loss = _train(trained, list(trained.parameters()), problem.sample, spec.steps,
                      spec.batch_size, lr, seed, spec.run_label(), run)  # fmt: skip
        out.update(
            selection=accuracy(trained, problem.selection),
            eval=accuracy(trained, problem.evaluation),
            train_loss=loss,
            seconds=time.perf_counter() - start,
        )
    if run is not None:
        _write_json(run, "result.json", out, "result")
    return out
