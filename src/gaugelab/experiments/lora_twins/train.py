"""One LoRA twin run: warm up an adapter, build its twins, train them as one ensemble, measure.

The warm-up trains the adapter alone (AdamW, constant rate) from the pretrain run's verified
weights, so the twins start from a nonzero ``B``. The twins (:data:`TWIN_NAMES`) are then
built per adapted module from the warmed factors ``(A, B)``, and the five members are trained
together from a zero optimizer state on one minibatch stream (the warm-up's, continued). At
every checkpoint each twin is measured against the base; the verdicts come from the shared
triplet engine (:func:`gaugelab.equivariance.twins.triplet_verdict`), once for the GL(r)
gauge twin and once for the scalar twin, with the same identity and noise twins.

Source: singh2026lossbasis, §6; seed 003 §0x08 (LoRA gauge, scalar gauge and learning-rate
compensation), §0x08L (the base adapter's factor diagnostics, logged at every checkpoint).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from gaugelab.determinism import deterministic
from gaugelab.equivariance.distance import relative_distance
from gaugelab.equivariance.twins import triplet_verdict
from gaugelab.errors import NonFiniteError
from gaugelab.experiments.lora.data import base_model, eval_batches, load_corpus, pretrain_weights
from gaugelab.experiments.lora.diagnostics import FactorLog, lora_pairs
from gaugelab.experiments.lora_twins.spec import TWIN_NAMES, LoraTwinSpec
from gaugelab.gauge import GeneralLinear
from gaugelab.lowrank.subspaces.compare import compare_updates
from gaugelab.models import Ensemble, Transformer
from gaugelab.models.lora import inject_lora, lora_modules
from gaugelab.optim import ScaledGD, make_optimizer
from gaugelab.study.train import fit, require_finite

__all__ = ["GAUGE_TWINS", "CompensatedSGD", "build_lora_twins", "train_lora_twins", "warm_adapter"]

GAUGE_TWINS = ("gauge", "scalar")
"""The twins that carry a gauge, each read against the same identity and noise twins."""


def warm_adapter(spec: LoraTwinSpec, model: Transformer, corpus: Any, stream: torch.Generator):
    """Inject the adapter into ``model`` (in place) and train it ``warmup_steps`` AdamW steps
    at the constant rate ``warmup_lr`` on ``stream``'s target minibatches.

    Returns:
        ``[W]`` the warm-up's training losses (nats per character).

    Raises:
        NonFiniteError: a warm-up loss is NaN/inf.
    """
    inject_lora(
        model,
        list(spec.targets),
        spec.rank,
        spec.alpha(),
        init="peft-default",
        use_rslora=spec.rslora,
        seed=spec.adapter_seed,
    )
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer("adamw", params, lr=spec.warmup_lr, weight_decay=0.0)
    source, losses = corpus.domain("target"), []

    def update(t: int) -> None:
        x, y = source.get_batch("train", spec.batch_size, stream)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        require_finite(loss, f"lora twins: warm-up loss at step {t + 1}")
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))

    fit(update, steps=spec.warmup_steps, label="lora twins warm-up")
    return losses


def build_lora_twins(spec: LoraTwinSpec, model: Transformer) -> list[Transformer]:
    """The members of :data:`TWIN_NAMES` from the warmed ``model``, in that order.

    Per adapted module (in :func:`gaugelab.models.lora.lora_modules` order): the gauge twin's
    ``(B G, G⁻¹ A)`` with ``G`` drawn from :class:`gaugelab.gauge.GeneralLinear` (singular
    values in ``[1/2, 2]``; one generator seeded ``gauge_seed``, module by module) and computed
    in float64 before the cast; the scalar twin's ``(c B, A / c)`` in the factors' dtype (exact
    for a power of two); the identity twin through the gauge twin's arithmetic with ``G = I``;
    the noise twin's ``A += σ·randn``, ``B += σ·randn`` (float32 draws from one generator
    seeded ``noise_seed``, A then B per module).
    """
    gen_g = torch.Generator().manual_seed(spec.gauge_seed)
    gen_n = torch.Generator().manual_seed(spec.noise_seed)
    twins = {name: copy.deepcopy(model) for name in TWIN_NAMES[1:]}
    layers = {name: lora_modules(m) for name, m in twins.items()}
    c, r = float(spec.scalar), spec.rank
    eye = torch.eye(r, dtype=torch.float64)
    with torch.no_grad():
        for name, layer in lora_modules(model).items():
            A, B = layer.lora_A.detach(), layer.lora_B.detach()
            G = GeneralLinear(r).sample(gen_g, torch.float64)
            for twin, element in (("gauge", G), ("identity", eye)):
                target = layers[twin][name]
                target.lora_B.copy_((B.double() @ element).to(B.dtype))
                target.lora_A.copy_(torch.linalg.solve(element, A.double()).to(A.dtype))
            layers["scalar"][name].lora_B.copy_(B * c)
            layers["scalar"][name].lora_A.copy_(A / c)
            noise = layers["noise"][name]
            for p in (noise.lora_A, noise.lora_B):
                draw = torch.randn(p.shape, generator=gen_n, dtype=torch.float32)
                p.add_(spec.noise_scale * draw.to(p.dtype))
    return [model, *(twins[n] for n in TWIN_NAMES[1:])]


class CompensatedSGD(torch.optim.Optimizer):
    """Plain SGD with one rate per ensemble member and factor: ``p[e] ← p[e] − η_e g[e]``.

    Param groups carry ``rates``: ``[E]`` float64 learning rates of their parameters' members.
    Under the scalar gauge ``(c B, A / c)`` the rates ``(c² η, η / c²)`` of the scalar twin make
    its trajectory the base's, scaled (seed 003 §0x08: the compensation is exact for SGD at
    every step; with ``c`` a power of two even in floating point).

    Raises:
        ValueError: a group without ``rates`` or with rates of another member count.
        NonFiniteError: (from ``step``) a non-finite gradient; nothing moves.
    """

    def __init__(self, groups: list[dict]) -> None:
        super().__init__(groups, {"lr": 1.0})
        for group in self.param_groups:
            rates = group.get("rates")
            if rates is None or any(p.shape[0] != len(rates) for p in group["params"]):
                raise ValueError("CompensatedSGD: every group needs rates [E] for params [E, …]")

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):  # type: ignore[override]
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not all(bool(torch.isfinite(p.grad).all()) for p in params):
            raise NonFiniteError("CompensatedSGD.step: a non-finite gradient; nothing moved")
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    rate = group["rates"].to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
                    p.sub_(rate * p.grad)


def make_twin_optimizer(spec: LoraTwinSpec, ensemble: Ensemble) -> torch.optim.Optimizer:
    """The twin phase's optimizer over the ensemble's factors (``member_dims = 1``)."""
    pairs, lr = lora_pairs(ensemble), spec.learning_rate()
    factors = [p for _, B, A in pairs for p in (B, A)]
    if spec.optimizer == "adam":
        return make_optimizer("adam", factors, lr=lr, member_dims=1)
    if spec.optimizer == "sgd":
        return make_optimizer("gd", factors, lr=lr, member_dims=1)
    if spec.optimizer == "scalar-adam":
        return make_optimizer("scalar-adam", factors, lr=lr, member_dims=1)
    if spec.optimizer == "scaled-gd":
        return ScaledGD(factors, lr=lr, damping=spec.damping, factors="ba", member_dims=1)
    c2 = float(spec.scalar) ** 2
    rate_b = torch.full((len(TWIN_NAMES),), lr, dtype=torch.float64)
    rate_a = rate_b.clone()
    k = TWIN_NAMES.index("scalar")
    rate_b[k], rate_a[k] = c2 * lr, lr / c2
    return CompensatedSGD(
        [
            {"params": [B for _, B, _ in pairs], "rates": rate_b},
            {"params": [A for _, _, A in pairs], "rates": rate_a},
        ]
    )


def measure(
    ensemble: Ensemble, x_val: torch.Tensor, y_val: torch.Tensor, scale: float, dtype: torch.dtype
) -> dict[str, float]:
    """Every member's validation loss and every twin's distances to the base.

    Names: ``<member>/val_loss``; ``<twin>/logit_distance`` (relative distance of the
    validation logits), ``<twin>/update_distance`` (of every module's ``s·B A`` together),
    ``<twin>/angle_max`` (the largest principal angle, radians, between the twin's and the
    base's update row and column spaces over every module; numerical rank policy) and
    ``<twin>/angle_mean`` (the mean over modules of each module's largest angle).
    """
    metrics: dict[str, float] = {}
    with torch.no_grad():
        logits = ensemble(x_val)  # [E, N, T, V]
        for e, name in enumerate(TWIN_NAMES):
            loss = F.cross_entropy(logits[e].flatten(0, 1), y_val.flatten())
            metrics[f"{name}/val_loss"] = float(loss)
        deltas = [
            scale * (B.double() @ A.double()) for _, B, A in lora_pairs(ensemble)
        ]  # [E, o, i]
        flat = torch.cat([d.flatten(1) for d in deltas], dim=1)  # [E, Σ o·i]
        pairs = lora_pairs(ensemble)
        for e, name in enumerate(TWIN_NAMES[1:], start=1):
            metrics[f"{name}/logit_distance"] = float(relative_distance(logits[e], logits[0]))
            metrics[f"{name}/update_distance"] = float(relative_distance(flat[e], flat[0]))
            worst = []
            for _, B, A in pairs:
                rep = compare_updates(
                    (B[0].double(), A[0].double(), scale),
                    (B[e].double(), A[e].double(), scale),
                    computed_in=dtype,
                )
                angles = [
                    a[v]
                    for a, v in (
                        (rep.row.angles, rep.row.valid),
                        (rep.column.angles, rep.column.valid),
                    )
                ]
                worst.append(
                    float(torch.cat(angles).max()) if sum(a.numel() for a in angles) else 0.0
                )
            metrics[f"{name}/angle_max"] = max(worst)
            metrics[f"{name}/angle_mean"] = sum(worst) / len(worst)
    return metrics


def run_lora_twin_phase(
    spec: LoraTwinSpec,
    members: list[Transformer],
    corpus: Any,
    stream: torch.Generator,
    val: tuple[torch.Tensor, torch.Tensor],
    run: Any = None,
) -> dict[int, dict[str, float]]:
    """Train ``members`` (:func:`build_lora_twins`) together for ``spec.steps`` steps and
    measure them at every checkpoint; logs to ``run`` when given. Returns ``step → metrics``.

    Raises:
        NonFiniteError: a loss or gradient became NaN/inf.
    """
    ensemble = Ensemble(members)
    optimizer = make_twin_optimizer(spec, ensemble)
    scale = next(iter(lora_modules(members[0]).values())).scale
    dtype = getattr(torch, spec.pretrain.dtype)
    block, E = spec.pretrain.corpus.block_size, len(members)
    records: dict[int, dict[str, float]] = {}
    measured = set(spec.checkpoints)
    source = corpus.domain("target")
    lr = spec.learning_rate()  # the base member's rate (member 0 is the one recorded)
    log = FactorLog(
        scale, members={0: ""}, steps=frozenset(s for s in measured if s >= 1),
        tokens_per_step=spec.batch_size * block, step_offset=spec.warmup_steps,
        eval_protocol="training minibatch of the twin phase, mean cross-entropy",
    )  # fmt: skip

    def record(step: int, extra: dict[str, float]) -> None:
        metrics = {**measure(ensemble, *val, scale, dtype), **extra}
        records[step] = {k: v for k, v in metrics.items() if not k.startswith("diag/")}
        if run is not None:
            run.log(step, metrics)

    if 0 in measured:
        record(0, {})

    def update(t: int) -> None:
        step = t + 1
        x, y = source.get_batch("train", spec.batch_size, stream)
        previous = log.before(ensemble, step)
        optimizer.zero_grad(set_to_none=True)
        logits = ensemble(x)  # [E, B, T, V]
        losses = F.cross_entropy(logits.flatten(0, 2), y.flatten().repeat(E), reduction="none")
        losses = losses.view(E, -1).mean(dim=1)  # [E]: members never interact
        require_finite(losses, f"lora twins ({spec.optimizer}): loss at twin step {step}")
        losses.sum().backward()
        optimizer.step()
        if step in measured:
            batch = losses.detach()
            extra = {f"{n}/batch_loss": float(v) for n, v in zip(TWIN_NAMES, batch, strict=True)}
            if previous is not None:
                extra.update(log.metrics(ensemble, optimizer, previous, step, batch, lr))
            record(step, extra)

    fit(update, steps=spec.steps, label=spec.optimizer, run=run)
    return records


def verdicts(records: dict[int, dict[str, float]]) -> dict[str, tuple[str, str]]:
    """Each gauge twin's verdict from the shared triplet engine, with the same identity and
    noise twins: twin → ``(verdict, explanation)``."""
    out = {}
    for twin in GAUGE_TWINS:
        projected = {
            s: {
                "identity/logit_distance": m["identity/logit_distance"],
                "gauge/logit_distance": m[f"{twin}/logit_distance"],
                "noise/logit_distance": m["noise/logit_distance"],
            }
            for s, m in records.items()
            if f"{twin}/logit_distance" in m
        }
        out[twin] = triplet_verdict(projected)
    return out


def train_lora_twins(spec: LoraTwinSpec, run: Any) -> dict[str, Any]:
    """The whole run: warm-up, twins, twin phase, verdicts; records ``result.json`` (kind
    ``result``) when ``run`` is given. Returns the result's content.

    Raises:
        AdmissionError: the pretrain run has not completed in the run's store.
        ArtifactError: its weights file changed since it was written.
        NonFiniteError: a loss or gradient became NaN/inf.
    """
    start = time.perf_counter()
    weights = pretrain_weights(run.store, spec.pretrain)
    with deterministic():
        corpus = load_corpus(spec.pretrain.corpus)
        model = base_model(spec.pretrain, weights, corpus.d_vocab)
        stream = torch.Generator().manual_seed(spec.data_seed)
        warm = warm_adapter(spec, model, corpus, stream)
        val = eval_batches(corpus, spec.pretrain)["target"]
        x_val = torch.cat([x for x, _ in val])[: spec.val_windows]
        y_val = torch.cat([y for _, y in val])[: spec.val_windows]
        norm_b = (
            sum(
                float(layer.lora_B.detach().double().norm() ** 2)
                for layer in lora_modules(model).values()
            )
            ** 0.5
        )
        members = build_lora_twins(spec, model)
        records = run_lora_twin_phase(spec, members, corpus, stream, (x_val, y_val), run)
    result = {
        "optimizer": spec.optimizer,
        "lr": spec.learning_rate(),
        "names": list(TWIN_NAMES),
        "records": {str(s): m for s, m in records.items()},
        "verdicts": {k: list(v) for k, v in verdicts(records).items()},
        "warmup": {"losses": warm, "norm_B": norm_b},
        "seconds": time.perf_counter() - start,
    }
    if run is not None:
        path = run.directory / "result.json"
        path.write_text(json.dumps(result, allow_nan=False, indent=1), encoding="utf-8")
        run.artifact(path, "result")
    return result
