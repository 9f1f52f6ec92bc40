"""What the learning–forgetting decision measures on the recorded states.

* :func:`evaluate` — each member's mean cross-entropy on the three domains' fixed batches of a
  split (validation for selection, test only through the sealed store);
* :func:`full_deltas` / :func:`lora_deltas` — the per-seed updates ``ΔW`` of every adapted
  projection (full fine-tuning: trained − pretrained; LoRA: ``s·B A``);
* :func:`energy_ranks` — the full update's 90%-energy rank per layer and projection (the
  Biderman Fig. 6 analog, §0x0BE–0x0BF);
* :func:`relative_tail` — the full update's energy beyond rank ``r``, a reconstruction gate;
* :func:`update_overlap` — the subspace overlap of a LoRA update with the full update's leading
  rank-``r`` subspaces (row and column, gauge-free).

Everything runs in float64 from the float32 states.

Source: biderman2024lora, Fig. 6; seed 003 §0x0BE (``r_ρ``, ρ = 0.9), §0x0BM (the tail is a
gate), §0x06G (min-rank overlap), §0x0BN (overlap is admissibility evidence, not retention).
"""

from __future__ import annotations

import math

import torch

from gaugelab.experiments.learn_forget.spec import LearnForgetSpec
from gaugelab.experiments.learn_forget.train import DOMAINS3
from gaugelab.experiments.lora.spec import ALL_TARGETS
from gaugelab.experiments.lora.train import lr_factor, member_losses
from gaugelab.lowrank.dynamics.diagnostics import factor_diagnostics
from gaugelab.lowrank.spectra.ranks import energy_rank
from gaugelab.lowrank.subspaces.compare import compare_updates
from gaugelab.models import Ensemble, Transformer
from gaugelab.models.lora import lora_modules

__all__ = [
    "energy_ranks",
    "evaluate",
    "factor_summary",
    "full_deltas",
    "lora_deltas",
    "module_path",
    "relative_tail",
    "update_overlap",
]

RHO = 0.9
"""The source's energy fraction for the full-update rank (biderman2024lora, §0x0BE)."""


def module_path(layer: int, name: str) -> str:
    """``blocks.<layer>.attn.<name>`` or ``blocks.<layer>.mlp.<name>``."""
    return f"blocks.{layer}.{'mlp' if name.startswith('fc_') else 'attn'}.{name}"


def evaluate(ensemble: Ensemble, batches: dict[str, list]) -> dict[str, list[float]]:
    """Domain → ``[E]`` mean cross-entropy (nats per character) of every member."""
    return {d: member_losses(ensemble, batches[d]).tolist() for d in DOMAINS3 if d in batches}


def base_ensemble(base: Transformer) -> Ensemble:
    """The pretrained model alone (the base candidate, one deterministic record)."""
    return Ensemble([base], sdpa=True)


def full_deltas(
    spec: LearnForgetSpec, base: Transformer, state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Projection path → ``[E, d_out, d_in]`` float64 ``W_ft − W_0`` of a full fine-tuning state,
    for every projection of :data:`~gaugelab.experiments.lora.run.ALL_TARGETS` in every layer."""
    weights = dict(base.named_parameters())
    out = {}
    for layer in range(spec.finetune.pretrain.n_layers):
        for name in ALL_TARGETS:
            path = module_path(layer, name)
            key = f"{path}.weight"
            out[path] = state[key].double() - weights[key].detach().double()
    return out


def lora_deltas(ensemble: Ensemble) -> dict[str, torch.Tensor]:
    """Projection path → ``[E, d_out, d_in]`` float64 ``s·B A`` of a LoRA cell's ensemble
    (:func:`~gaugelab.experiments.learn_forget.train.cell_ensemble` with its state)."""
    per_member = []
    for e in range(ensemble.n_members):
        layers = lora_modules(ensemble.member(e))
        per_member.append(
            {
                n: (layer.lora_B.double() @ layer.lora_A.double()) * layer.scale
                for n, layer in layers.items()
            }
        )
    return {n: torch.stack([m[n] for m in per_member]).detach() for n in per_member[0]}


def factor_summary(
    spec: LearnForgetSpec, ensemble: Ensemble, step: int, loss: float
) -> dict[str, float]:
    """The §0x08L factor record (:func:`gaugelab.lowrank.dynamics.diagnostics.factor_diagnostics`)
    of every adapted module and seed of a LoRA cell's ensemble at ``step``, summarised:
    ``norm_A``, ``norm_B``, ``norm_update`` (root of the summed squares over modules, mean
    over seeds) and ``numerical_rank`` (mean over modules and seeds) — trajectory evidence,
    not feature learning (§0x0BJ)."""
    ft = spec.run_finetune()
    lr = ft.lr * lr_factor(step - 1, ft.steps, ft.warmup)
    tokens = step * ft.batch_size * ft.pretrain.corpus.block_size
    totals = {"norm_A": [], "norm_B": [], "norm_update": [], "numerical_rank": []}
    for e in range(ensemble.n_members):
        records = [
            factor_diagnostics(
                A=layer.lora_A.detach().double(),
                B=layer.lora_B.detach().double(),
                scale=layer.scale,
                step=step,
                tokens=tokens,
                loss=loss,
                lr_A=lr,
                lr_B=lr,
            )
            for layer in lora_modules(ensemble.member(e)).values()
        ]
        for key in ("norm_A", "norm_B", "norm_update"):
            totals[key].append(math.sqrt(sum(getattr(r, key) ** 2 for r in records)))
        totals["numerical_rank"].append(sum(r.numerical_rank for r in records) / len(records))
    return {k: sum(v) / len(v) for k, v in totals.items()}


def energy_ranks(deltas: dict[str, torch.Tensor], rho: float = RHO) -> dict[str, list[int]]:
    """Projection path → ``[E]`` 90%-energy rank ``r_ρ`` of each seed's update (§0x0BE: not
    algebraic, numerical or stable rank, nor a configured LoRA rank)."""
    out = {}
    for path, delta in deltas.items():
        reports = energy_rank(delta, matrix_id=path, rho=rho)
        out[path] = [int(r.value) for r in reports]
    return out


def relative_tail(deltas: dict[str, torch.Tensor], paths: list[str], rank: int) -> list[float]:
    """``[E]`` the energy of the full update beyond rank ``rank`` over ``paths``, relative to its
    total: ``Σ_m Σ_{j>r} σ_j(ΔW_m)² / Σ_m ‖ΔW_m‖_F²`` per seed (Eckart–Young: the best rank-``r``
    approximation's squared residual, pooled over the adapted projections)."""
    tail = total = None
    for path in paths:
        sigma2 = torch.linalg.svdvals(deltas[path]) ** 2  # [E, q]
        t, s = sigma2[:, rank:].sum(-1), sigma2.sum(-1)
        tail, total = (t, s) if tail is None else (tail + t, total + s)
    assert tail is not None and total is not None
    return (tail / torch.where(total > 0, total, 1.0)).tolist()


def update_overlap(
    lora: dict[str, torch.Tensor], full: dict[str, torch.Tensor], rank: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Projection path → ``([E] row, [E] column)`` min-rank overlaps ``Ω_min = Σ cos²θ / p``
    between the LoRA update and the full update (same seed), each at its leading rank-``rank``
    subspaces (rank policy: the integer ``rank``); the Haar baseline is ``rank / d``."""
    out = {}
    for path, delta in lora.items():
        report = compare_updates(delta, full[path], policy=rank, factor_spans=False)
        out[path] = (report.row.min_rank_overlap.tolist(), report.column.min_rank_overlap.tolist())
    return out
