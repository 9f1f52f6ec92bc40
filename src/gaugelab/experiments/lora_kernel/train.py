"""The kernel protocol's run: the matched LoRA paths trained side by side and diagnosed.

Every path is a :class:`_Path` over one copy of the pretrained model with the same LoRA
factors. At each step one minibatch is drawn from the run's stream and every path takes one
step of the run's optimizer on it (so data order, batches and steps match by construction). At
every checkpoint each path records ``R_lin``, ``D_J``, ``D_K``, ``A_K`` (probe estimates with
their jackknife errors, :class:`gaugelab.lowrank.kernels.explanation.KernelProbes`), the parameter
distance
and output change, and target and retention validation loss; the linearized path also records
how well its outputs predict the nonlinear path's (the prediction gap).

Attention runs its plain-ops path in every model here: torch's fused CPU attention has no
forward-mode AD, and the linearized path and the JVPs need it. The first JVP detects this and
the run records it (``forward_mode``, ``fallback``).

Source: seed 003 §0x09J–0x09L; docs/commands/lora-kernel.md.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import safetensors.torch
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, jvp

from gaugelab.determinism import deterministic
from gaugelab.errors import NonFiniteError
from gaugelab.experiments.lora.data import (
    DOMAINS,
    base_model,
    eval_batches,
    load_corpus,
    pretrain_weights,
)
from gaugelab.experiments.lora_kernel.spec import KernelSpec
from gaugelab.lowrank.kernels.explanation import (
    KernelProbes,
    Metric,
    StackedOutputs,
    adam_metric,
    linearized_outputs,
)
from gaugelab.models.lora import inject_lora, lora_modules
from gaugelab.optim import make_optimizer
from gaugelab.study.train import fit, require_finite

EPS = 1e-12
METRICS = {
    "gd": "plain SGD: M = I",
    "adam": "Adam at step t: M_t = diag(1/(sqrt(v_hat_t) + eps)) of each path's own optimizer "
    "(the linearized path: the nonlinear path's), for K_0 and K_t alike (D_K: feature drift "
    "under M_t); momentum and lr dropped",
}
"""The declared metric of each optimizer's kernels (seed 003 §0x09K: a declared approximation)."""


def plain_attention(model: nn.Module) -> None:
    """Switch every module with a ``use_sdpa`` flag to its plain-ops path (in place)."""
    for module in model.modules():
        if getattr(module, "use_sdpa", False):
            module.use_sdpa = False


@dataclass
class _Path:
    """One trained path: its model, trained tensors, optimizer and diagnostic base."""

    name: str
    model: nn.Module
    params: dict[str, torch.Tensor]  # the trained leaves (parameters, or δ for linearized)
    optimizer: torch.optim.Optimizer
    outputs: StackedOutputs
    probes: KernelProbes
    theta0: dict[str, torch.Tensor]
    fixed: dict[str, torch.Tensor] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def linear(self) -> bool:
        return self.name == "linearized"

    def theta(self) -> dict[str, torch.Tensor]:
        """The path's point in the nonlinear model's coordinates (``θ_0 + δ`` if linearized)."""
        if self.linear:
            return {k: self.theta0[k] + self.params[k].detach() for k in self.theta0}
        return {k: p.detach().clone() for k, p in self.params.items()}

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, V]``: the path's model on ``x`` (linearized: ``f(θ_0) + J_0 δ``)."""
        if not self.linear:
            return self.model(x)
        fn = lambda th: functional_call(self.model, {**self.fixed, **th}, (x,))  # noqa: E731
        f0, jv = jvp(fn, (self.theta0,), (self.params,))
        return f0 + jv

    def metric(self, optimizer: str) -> Metric:
        if optimizer == "gd" or not self.optimizer.state:
            return Metric.identity()
        return adam_metric(self.optimizer, self.params)


def _loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def _val_loss(path: _Path, batches) -> float:
    total = 0.0
    for x, y in batches:
        with torch.no_grad():
            total += float(_loss(path.logits(x), y))
    return total / len(batches)


def _build(spec: KernelSpec, base: nn.Module, probe_x: torch.Tensor, optimizer: str):
    """The paths of ``spec`` from the pretrained ``base`` (plain attention everywhere)."""
    r, lr = spec.rank, spec.lr(optimizer)
    start = copy.deepcopy(base)
    inject_lora(
        start, list(spec.targets), r, spec.alpha_ratio * r, init="peft-default", seed=spec.seed
    )
    detect = StackedOutputs(start, probe_x[:1])  # SDPA: the first JVP records the fallback
    detect.jvp(detect.theta(), {k: torch.zeros_like(v) for k, v in detect.theta().items()})
    axes = {"forward_mode": detect.forward_mode, "fallback": detect.fallback}
    plain_attention(start)
    trained = {}  # module → the factor the fixed-feature path trains: the zero one
    for module, layer in lora_modules(start).items():
        zero = layer.record.zero_factor
        if zero not in ("up", "down"):
            raise ValueError(
                f"lora kernel: module {module!r} starts with zero factor {zero!r}; the "
                "fixed-feature path needs exactly one zero factor (init standard or reversed)"
            )
        trained[module] = "lora_B" if zero == "up" else "lora_A"
    factor_names = [n for n, p in start.named_parameters() if p.requires_grad]
    kinds = {"nonlinear": factor_names, "linearized": factor_names}
    kinds["fixed-features"] = [n for n in factor_names
                               if n.rsplit(".", 1)[1] == trained[n.rsplit(".", 1)[0]]]  # fmt: skip
    shared: dict[tuple[str, ...], tuple[StackedOutputs, KernelProbes]] = {}

    def base_of(model: nn.Module, names: list[str]):
        key = tuple(names)
        if key not in shared:
            out = StackedOutputs(copy.deepcopy(model), probe_x, parameters=names,
                                 selector="last-position logits")  # fmt: skip
            probes = KernelProbes(out, out.theta(), probes=spec.probes, seed=spec.estimator_seed)
            shared[key] = (out, probes)
        return shared[key]

    paths = []
    for name in spec.paths():
        if name == "full":
            model = copy.deepcopy(base)
            plain_attention(model)
            names = [n for n, _ in model.named_parameters()]
        else:
            model = copy.deepcopy(start)
            names = kinds[name]
        named = dict(model.named_parameters())
        for n, p in named.items():
            p.requires_grad_(n in names and name != "linearized")
        out, probes = base_of(model, names)
        theta0 = {n: named[n].detach().clone() for n in names}
        if name == "linearized":
            params = {n: torch.zeros_like(v, requires_grad=True) for n, v in theta0.items()}
            fixed = {n: p.detach() for n, p in named.items() if n not in names}
        else:
            params, fixed = {n: named[n] for n in names}, {}
        opt = make_optimizer(optimizer, list(params.values()), lr=lr)
        paths.append(_Path(name, model, params, opt, out, probes, theta0, fixed))
    return paths, axes


def _diagnose(spec: KernelSpec, paths: list[_Path], step: int, val, optimizer: str, run) -> None:
    by_name = {p.name: p for p in paths}
    nonlinear_F = None
    if "nonlinear" in by_name:
        p = by_name["nonlinear"]
        with torch.no_grad():
            nonlinear_F = p.outputs(p.theta())
    metrics: dict[str, float] = {}
    for path in paths:
        # the linearized path is diagnosed on the nonlinear model at θ_0 + δ_t: under Adam with
        # the nonlinear path's metric (its own never moves the factor whose J_0 block is zero,
        # which leaves 1/ε there)
        source = by_name.get("nonlinear", path) if path.linear else path
        est = path.probes.estimate(path.theta(), metric=source.metric(optimizer))
        row: dict[str, Any] = {
            "step": step, "r_lin": est.r_lin, "d_j": est.d_j.value, "d_j_se": est.d_j.stderr,
            "d_k": est.d_k.value, "d_k_se": est.d_k.stderr, "a_k": est.a_k.value,
            "a_k_se": est.a_k.stderr, "distance": est.parameter_distance,
            "output_change": est.output_change, "metric": est.metric,
            "target": _val_loss(path, val["target"]),
            "retention": _val_loss(path, val["retention"]), "prediction_gap": None,
        }  # fmt: skip
        if path.linear and nonlinear_F is not None:
            f0, f_lin = linearized_outputs(path.outputs, path.theta0, path.theta())
            change = float(torch.linalg.vector_norm((nonlinear_F - f0).double()))
            gap = float(torch.linalg.vector_norm((nonlinear_F - f_lin).double()))
            row["prediction_gap"] = gap / max(change, EPS)
        for key in ("r_lin", "d_j", "d_k", "a_k", "target", "retention"):
            if not math.isfinite(row[key]):
                raise NonFiniteError(
                    f"kernel {optimizer}: path {path.name}: {key} = {row[key]} at step {step}"
                )
            metrics[f"{key}/{path.name}"] = row[key]
        path.rows.append(row)
    if run is not None:
        run.log(step, metrics)


def train_paths(spec: KernelSpec, run: Any = None, weights: dict | None = None) -> dict[str, Any]:
    """Train and diagnose every path of ``spec`` (one optimizer); record ``result.json``
    (kind ``result``), the trained tensors ``paths.safetensors`` (kind ``factors``) and the
    probe set with its output probes ``probes.safetensors`` (kind ``probes``).

    Args:
        spec: a run's :class:`KernelSpec` (one optimizer).
        run: a run context, or ``None`` (then ``weights`` is the pretrain's state dict).

    Returns:
        The result (as written to ``result.json``).

    Raises:
        AdmissionError: the pretrain run has not completed in the run's store.
        NonFiniteError: a training loss became NaN/inf.
    """
    start = time.perf_counter()
    optimizer = spec.optimizer
    if weights is None:
        weights = pretrain_weights(run.store, spec.pretrain)
    with deterministic():
        corpus = load_corpus(spec.pretrain.corpus)
        base = base_model(spec.pretrain, weights, corpus.d_vocab)
        val_all = eval_batches(corpus, spec.pretrain)
        val = {d: val_all[d][: spec.val_batches] for d in DOMAINS}
        gen = torch.Generator().manual_seed(spec.probe_seed)
        probe_x, _ = corpus.domain("target").get_batch("val", spec.probe_examples, gen)
        paths, axes = _build(spec, base, probe_x, optimizer)
        stream = torch.Generator().manual_seed(spec.seed)
        source = corpus.domain("target")
        marks = set(spec.checkpoints)
        label = f"kernel {optimizer}"

        def update(t: int) -> None:
            if t in marks:
                _diagnose(spec, paths, t, val, optimizer, run)
            x, y = source.get_batch("train", spec.batch_size, stream)
            for path in paths:
                path.optimizer.zero_grad(set_to_none=True)
                loss = _loss(path.logits(x), y)
                require_finite(loss, f"{label}: path {path.name}: training loss at step "
                                     f"{t + 1} (lr={spec.lr(optimizer)})")  # fmt: skip
                loss.backward()
                path.optimizer.step()

        fit(update, steps=spec.steps, label=label, run=run)
        if spec.steps in marks:
            _diagnose(spec, paths, spec.steps, val, optimizer, run)
    first = paths[0].outputs
    result = {
        "optimizer": optimizer, "lr": spec.lr(optimizer), "paths": {p.name: p.rows for p in paths},
        "trainable": {p.name: p.outputs.n_parameters for p in paths},
        "axes": {**first.axes(), **axes, "parameters": None, "metric": METRICS[optimizer]},
        "probes": spec.probes, "estimator": "rademacher output probes, jackknife errors",
        "seconds": time.perf_counter() - start,
    }  # fmt: skip
    if run is not None:
        tensors = {f"{p.name}/{n}": v.detach().contiguous() for p in paths
                   for n, v in p.theta().items()}  # fmt: skip
        path = run.directory / "paths.safetensors"
        safetensors.torch.save_file(tensors, str(path))
        run.artifact(path, "factors")
        probe_file = run.directory / "probes.safetensors"
        probe_tensors = {"inputs": probe_x.contiguous(), "z": paths[0].probes.z.contiguous()}
        safetensors.torch.save_file(probe_tensors, str(probe_file))
        run.artifact(probe_file, "probes")
        out = run.directory / "result.json"
        out.write_text(json.dumps(result, allow_nan=False, indent=1), encoding="utf-8")
        run.artifact(out, "result")
    return result


__all__ = ["plain_attention", "train_paths"]
