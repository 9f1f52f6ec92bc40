"""LoRA twins: one twin-triplet training step as one ensemble against stepping the members apart.

The five members of ``gaugelab lora twins`` (base adapter, GL(r) gauge twin, scalar twin,
identity twin, noise twin; :func:`gaugelab.experiments.lora_twins.train.build_lora_twins`) on
the LoRA protocol's model (3 blocks, d_model 64, r = 4 on every projection, windows of 64
characters), one training step each: forward on the shared minibatch, backward, optimizer step.
Ours: the members as one :class:`gaugelab.models.Ensemble` with the optimizer over the stacked
factors (``member_dims = 1``), exactly as the twin phase builds them
(:func:`gaugelab.experiments.lora_twins.train.make_twin_optimizer`). The peer: five separate
models, each with its own optimizer of the same rule, stepped one after the other. Rows: adam
and undamped scaled-gd at the protocol's batch of 16, and adam at batch 1 (``--quick``: adam at
16 only). Before timing, the ensemble's first-step member losses must equal the separate models'
to 1e-5 relative, or the benchmark fails. Target ≥ 1.5×. Every side is warmed up and the two
are timed interleaved (:func:`gaugelab.cli.bench.time_calls`).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from gaugelab.cli.bench import ratio_cell, time_calls
from gaugelab.determinism import deterministic
from gaugelab.experiments.lora.diagnostics import lora_pairs
from gaugelab.experiments.lora_twins.spec import LoraTwinSpec
from gaugelab.experiments.lora_twins.train import build_lora_twins, make_twin_optimizer
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.models.lora import inject_lora, lora_modules
from gaugelab.optim import ScaledGD, make_optimizer

TITLE = "LoRA twins: one twin-triplet step (5 members) as one ensemble vs the members one by one"
COLUMNS = ["case", "ensemble ms", "members one by one ms", "ratio (one by one / ensemble)",
           "target"]  # fmt: skip
VOCAB, BLOCK = 100, 64


def _members(spec: LoraTwinSpec) -> list[Transformer]:
    config = TransformerConfig(
        n_layers=3, d_model=64, n_heads=4, d_head=16, d_mlp=256, d_vocab=VOCAB, n_ctx=BLOCK,
        act_fn="gelu", normalization="rmsnorm", norm_placement="pre", positional="learned",
        causal=True, init_std=0.02,
    )  # fmt: skip
    model = Transformer(config, seed=0)
    inject_lora(model, list(spec.targets), spec.rank, spec.alpha(), seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a nonzero B, as after the warm-up
        for layer in lora_modules(model).values():
            layer.lora_B.copy_(0.01 * torch.randn(layer.lora_B.shape, generator=gen))
    return build_lora_twins(spec, model)


def _single_optimizer(spec: LoraTwinSpec, model: Transformer) -> torch.optim.Optimizer:
    factors = [p for layer in lora_modules(model).values() for p in (layer.lora_B, layer.lora_A)]
    if spec.optimizer == "scaled-gd":
        return ScaledGD(factors, lr=spec.learning_rate(), damping=spec.damping, factors="ba")
    return make_optimizer(spec.optimizer, factors, lr=spec.learning_rate())


def _steps(spec: LoraTwinSpec, batch: int):
    members = _members(spec)
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(0, VOCAB, (batch, BLOCK), generator=gen)
    y = torch.randint(0, VOCAB, (batch, BLOCK), generator=gen)
    ensemble = Ensemble([copy.deepcopy(m) for m in members])
    assert lora_pairs(ensemble), "the ensemble should train the LoRA factors"
    opt = make_twin_optimizer(spec, ensemble)
    E = len(members)

    def ensemble_step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        logits = ensemble(x)  # [E, B, T, V]
        losses = F.cross_entropy(logits.flatten(0, 2), y.flatten().repeat(E), reduction="none")
        losses = losses.view(E, -1).mean(dim=1)
        losses.sum().backward()
        opt.step()
        return losses.detach()

    models = [copy.deepcopy(m) for m in members]
    opts = [_single_optimizer(spec, m) for m in models]

    def members_step() -> torch.Tensor:
        losses = []
        for model, o in zip(models, opts, strict=True):
            o.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            o.step()
            losses.append(loss.detach())
        return torch.stack(losses)

    return ensemble_step, members_step


def _row(optimizer: str, batch: int, repeat: int, number: int) -> list:
    spec = LoraTwinSpec(optimizer=optimizer)
    ours, peer = _steps(spec, batch)
    got, want = ours(), peer()  # the first step: checked, untimed
    worst = float(((got - want).abs() / want.abs()).max())
    if worst > 1e-5:
        raise AssertionError(
            f"bench lora-twins: the ensemble's first-step losses {got.tolist()} differ from "
            f"the separate members' {want.tolist()} by {worst:.1e} relative (allowed: 1e-5)"
        )
    times = time_calls({"ensemble": ours, "members": peer}, number=number, repeat=repeat)
    case = f"{optimizer}, batch {batch} × {BLOCK}, 5 twins (r = {spec.rank}, every projection)"
    return [case, times["ensemble"].cell(digits=1), times["members"].cell(digits=1),
            ratio_cell(times["members"], times["ensemble"]), "≥ 1.5×"]  # fmt: skip


def run(*, quick: bool = False, progress=None) -> list[list]:
    cases = [("adam", 16)] if quick else [("adam", 16), ("scaled-gd", 16), ("adam", 1)]
    task = progress.add_task("lora-twins", total=len(cases)) if progress else None
    rows = []
    with deterministic():
        for optimizer, batch in cases:
            rows.append(_row(optimizer, batch, repeat=3 if quick else 5, number=2 if quick else 5))
            if progress:
                progress.advance(task)
    return rows
