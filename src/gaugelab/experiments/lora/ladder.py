"""The evidence ladder of seed 003 §0x04M on a real model: weight, sampled-output and
end-to-end evidence for replacing each module's update by a rank-``r`` truncation.

For every adapted module with update ``ΔW`` (float64) and every rank ``r``:

1. **weight residual** ``‖ΔW − ΔW_r‖_F²`` of the weight-space truncation (formed and summed
   directly; it equals the tail ``Σ_{i>r} σ_i²``), and of the output-weighted one;
2. **output residual** ``(1/N)‖X (ΔW − ΔŴ)ᵀ‖_F²`` on the layer's real inputs ``X`` — captured
   with a forward hook while the fine-tuned model reads the target validation batches — for
   the weight-SVD truncation and for the output-weighted truncation
   (:func:`gaugelab.lowrank.output_weighted_rank_r`), which minimises exactly this;
3. **end-to-end** target validation loss when that module's update alone is replaced
   (per layer), and when every module's update is replaced at once (jointly, with the
   retention loss too).

The same ladder runs on a user's Hugging Face model (:mod:`gaugelab.experiments.lora.hf_ladder`):
there the inputs are streamed into :class:`gaugelab.lowrank.InputMoments` (``XᵀX`` and ``N``,
batch by batch) instead of held as rows, GPT-2's ``Conv1D`` weights are ``[d_in, d_out]``
(the update is added transposed), and without a language-model head, or without a retention
domain, those losses are not computed (``None``).

Every model here holds merged weights ``W₀ + cast(ΔŴ)``: the reference is ``W₀ + cast(ΔW)``,
so a truncation that keeps the whole update gives the reference's loss exactly. The
calibration inputs are those batches themselves (the output-weighted truncation is fitted
in-sample); the joint replacement uses each module's inputs in the unmodified model.

Source: seed 003 §0x04M (the ladder; no arrow reversible), §0x04F–0x04H (output-weighted
truncation), §0x04L (per-layer against joint replacement).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gaugelab.lowrank import (
    InputMoments,
    output_residual,
    output_weighted_rank_r,
    reconstruct_by_rank,
)

Batches = Sequence[tuple[torch.Tensor, torch.Tensor]]
Inputs = torch.Tensor | InputMoments
Update = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
"""A dense ``ΔW [d_out, d_in]``, or its factors ``(B [d_out, r], A [r, d_in])``."""


def dense(update: Update) -> torch.Tensor:
    """``ΔW`` of a dense update or of factors ``(B, A)``: ``B A``."""
    return update[0] @ update[1] if isinstance(update, tuple) else update


@dataclass(frozen=True)
class LadderRow:
    """One module at one rank.

    Attributes:
        module: the module path; rank: ``r``.
        weight_residual: ``‖ΔW − ΔW_r‖_F²`` of the weight-SVD truncation (direct).
        weight_residual_ow: ``‖ΔW − ΔW_{X,r}‖_F²`` of the output-weighted truncation.
        update_energy: ``‖ΔW‖_F²`` (the residual of dropping the update).
        output_residual_svd, output_residual_ow: ``(1/N)‖X(ΔW − ΔŴ)ᵀ‖_F²`` of each.
        output_energy: ``(1/N)‖X ΔWᵀ‖_F²``.
        invisible_energy: ``‖ΔW Q_0‖_F²`` on input directions the captured ``X`` cannot see.
        support_rank: the rank of the inputs' covariance support; support_tol: its eigenvalue
            cut-off (the output-weighted residual exceeds its optimum over the support by at
            most ``support_tol · invisible_energy``); n_samples: ``N``.
        loss_svd, loss_ow: target validation loss with this module's update replaced
            (``None`` when no loss is computed: a model without a language-model head).
    """

    module: str
    rank: int
    weight_residual: float
    weight_residual_ow: float
    update_energy: float
    output_residual_svd: float
    output_residual_ow: float
    output_energy: float
    invisible_energy: float
    support_rank: int
    support_tol: float
    n_samples: int
    loss_svd: float | None
    loss_ow: float | None


@dataclass(frozen=True)
class JointRow:
    """Every module's update replaced at rank ``r`` at once: both domains' validation loss
    (retention ``None`` where there is no retention domain)."""

    rank: int
    target_svd: float
    target_ow: float
    retention_svd: float | None
    retention_ow: float | None


def mean_loss(model: torch.nn.Module, batches: Batches) -> float:
    """Mean cross-entropy (nats per token) of ``model`` over equal-size ``batches``.

    ``model(x)`` returns the logits ``[batch, T, vocab]``, or an output holding them as
    ``.logits`` (a Hugging Face causal LM); ``y`` ``[batch, T]`` are the next tokens.
    """
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            out = model(x)
            logits = getattr(out, "logits", out)
            total += float(F.cross_entropy(logits.flatten(0, 1), y.flatten()).double())
    return total / len(batches)


def _hooked_pass(model: torch.nn.Module, modules: Sequence[str], batches: Batches,
                 record: Callable[[str, torch.Tensor], None]) -> None:  # fmt: skip
    """Run ``batches`` through ``model`` (no gradients), handing each module's input — its first
    positional argument, ``[..., d_in]`` — to ``record(module, input)`` as it passes."""
    hooks = [model.get_submodule(m).register_forward_hook(
        lambda _mod, args, _out, m=m: record(m, args[0].detach())) for m in modules]  # fmt: skip
    try:
        with torch.no_grad():
            for x, _ in batches:
                model(x)
    finally:
        for h in hooks:
            h.remove()


def capture_moments(
    model: torch.nn.Module, modules: Sequence[str], batches: Batches
) -> dict[str, InputMoments]:
    """Module path → the float64 :class:`InputMoments` of its inputs over ``batches``.

    Forward hooks add each batch's inputs to the module's Gram matrix as it passes: no more
    than one batch's activations are held at once. A module's input is its first positional
    argument ``[..., d_in]`` (``nn.Linear`` and GPT-2's ``Conv1D`` alike; every leading axis
    is a row).
    """
    seen: dict[str, InputMoments] = {}

    def record(m: str, x: torch.Tensor) -> None:
        if m not in seen:
            seen[m] = InputMoments.zeros(x.shape[-1])
        seen[m].add(x)

    _hooked_pass(model, modules, batches, record)
    return {m: seen[m] for m in modules}


def capture_inputs(model: torch.nn.Module, modules: Sequence[str], batches: Batches):
    """Module path → ``[N, d_in]`` float64 inputs of that ``nn.Linear`` over ``batches``
    (forward hooks; ``N`` = windows × positions)."""
    seen: dict[str, list[torch.Tensor]] = {m: [] for m in modules}
    _hooked_pass(model, modules, batches,
                 lambda m, x: seen[m].append(x.flatten(0, -2).double()))  # fmt: skip
    return {m: torch.cat(xs) for m, xs in seen.items()}


class Replacer:
    """A model holding ``W₀ + cast(ΔW)`` in every adapted module, whose updates can be swapped
    for others and restored.

    Args:
        model: the model with the base weights ``W₀`` (and any other trained parameters)
            loaded; modified in place.
        deltas: module path → ``ΔW`` ``[d_out, d_in]`` float64, or its factors ``(B, A)``
            (``ΔW = B A``, the scale folded into ``B``; formed one module at a time).
        transposed: the modules whose weight is stored ``[d_in, d_out]`` (GPT-2's ``Conv1D``):
            their ``ΔWᵀ`` is added.
    """

    def __init__(self, model: torch.nn.Module, deltas: Mapping[str, Update],
                 transposed: frozenset[str] = frozenset()) -> None:  # fmt: skip
        self.model = model
        self.weights = {m: model.get_submodule(m).weight for m in deltas}
        self.base = {m: w.detach().clone() for m, w in self.weights.items()}
        self.deltas = dict(deltas)
        self.transposed = frozenset(transposed)
        self.set({})

    def set(self, updates: Mapping[str, Update]) -> None:
        """Every module holds ``W₀ + cast(updates.get(m, ΔW_m))`` (a pair ``(B, A)`` is
        ``B A``)."""
        with torch.no_grad():
            for m, w in self.weights.items():
                delta = dense(updates.get(m, self.deltas[m]))
                delta = delta.mT if m in self.transposed else delta
                w.copy_(self.base[m] + delta.to(w.dtype))


def _output_energy(update: Update, X: Inputs) -> float:
    if isinstance(update, tuple):  # ⟨BᵀB, A C Aᵀ⟩ (C = XᵀX/N)
        B, A = update
        C = X.covariance if isinstance(X, InputMoments) else X.mT @ X / X.shape[0]
        return float(((B.mT @ B) * (A @ C @ A.mT)).sum())
    if isinstance(X, InputMoments):  # tr(ΔW C ΔWᵀ)
        return float(((update @ X.covariance) * update).sum())
    return float(((X @ update.mT) ** 2).sum()) / X.shape[0]


def ladder(
    replacer: Replacer,
    inputs: Mapping[str, Inputs],
    target: Batches | None,
    retention: Batches | None,
    ranks: Sequence[int],
    computed_in: torch.dtype,
) -> tuple[list[LadderRow], list[JointRow]]:
    """The per-module rows (module order, then rank) and the joint rows (rank order).

    A module whose update the replacer holds as factors ``(B, A)`` is decomposed in factor
    space (QR of the factors and an ``r × r`` SVD, :func:`gaugelab.lowrank.factored_svd`); a
    dense one by its dense SVD. The joint rows' truncations are kept as factors and formed
    one module at a time.

    Args:
        replacer: the model and the updates (float64).
        inputs: module → ``[N, d_in]`` float64 captured inputs, or their float64
            :class:`gaugelab.lowrank.InputMoments`.
        target, retention: the validation batches of each domain; ``None``: that loss is not
            computed (no target: no loss column and no joint rows).
        ranks: the truncation ranks.
        computed_in: the dtype the updates were produced in (sets the SVD tie and covariance
            support tolerances, :func:`gaugelab.lowrank.output_weighted_rank_r`).
    """
    rows: list[LadderRow] = []
    svd: dict[int, dict[str, Update]] = {r: {} for r in ranks}
    ow: dict[int, dict[str, Update]] = {r: {} for r in ranks}
    for module, update in replacer.deltas.items():
        X, delta = inputs[module], dense(update)  # [d_out, d_in]
        sweep = reconstruct_by_rank(update, ranks, matrix_id=module, computed_in=computed_in)
        energy = float((delta**2).sum())
        output_energy = _output_energy(update, X)
        for r, row in zip(ranks, sweep.rows, strict=True):
            by_svd = row.B @ row.A  # [d_out, d_in]
            fit = output_weighted_rank_r(update, X, r, matrix_id=module, computed_in=computed_in)
            by_ow = fit.delta_r
            if target is not None:
                svd[r][module], ow[r][module] = (row.B, row.A), (fit.B, fit.A)
            loss_svd = loss_ow = None
            if target is not None:
                replacer.set({module: by_svd})
                loss_svd = mean_loss(replacer.model, target)
                replacer.set({module: by_ow})
                loss_ow = mean_loss(replacer.model, target)
            rows.append(LadderRow(
                module=module, rank=r,
                weight_residual=float(((delta - by_svd) ** 2).sum()),
                weight_residual_ow=float(((delta - by_ow) ** 2).sum()),
                update_energy=energy,
                output_residual_svd=output_residual(
                    update, (row.B, row.A) if isinstance(update, tuple) else by_svd, X).direct,
                output_residual_ow=fit.residual.direct,
                output_energy=output_energy,
                invisible_energy=fit.invisible_update_energy,
                support_rank=fit.support.rank, support_tol=fit.support.support_tol,
                n_samples=X.shape[0],
                loss_svd=loss_svd, loss_ow=loss_ow,
            ))  # fmt: skip
    replacer.set({})
    joint = []
    for r in ranks if target is not None else ():
        losses = {}
        for name, updates in (("svd", svd[r]), ("ow", ow[r])):
            replacer.set(updates)
            kept = None if retention is None else mean_loss(replacer.model, retention)
            losses[name] = (mean_loss(replacer.model, target), kept)
        joint.append(JointRow(r, losses["svd"][0], losses["ow"][0], losses["svd"][1],
                              losses["ow"][1]))  # fmt: skip
    replacer.set({})
    return rows, joint
