"""``inspect_lora``: what one adapter's updates are — rank policies, truncation, evidence ladder.

A source is a stored fine-tuning run (an identity prefix: its adapter, or for full fine-tuning
its dense deltas, read after the sha256 check) or a PEFT adapter folder. Per adapted module it
reports the configured rank, every rank policy (seed 003 §0x04I, plus §0x0BE's 90%-energy
rank), the spectrum and the weight-space truncation table (§0x04D) — all from the factors
alone, in factor space — and, when gaugelab knows the base model and its data (a stored run, or
an adapter whose ``base_model_name_or_path`` names a pretrain run in the store), the evidence
ladder of §0x04M (:mod:`gaugelab.experiments.lora.ladder`). An adapter of a Hugging Face model
gets the same ladder on the user's own base folder and data
(:mod:`gaugelab.experiments.lora.hf_ladder`). What could not be computed is listed, with why.

Source: seed 003 §0x04 (reconstruction), §0x04I (policies), §0x04M (ladder), §0x0BE–0x0BF.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from gaugelab.adapters.checkpoint import BaseCheckpoint
from gaugelab.adapters.names import module_order, parse_module_name
from gaugelab.experiments.lora.data import base_model, eval_batches, finetune_corpus
from gaugelab.experiments.lora.hf_ladder import HFEvidence, hf_ladder
from gaugelab.experiments.lora.ladder import (
    JointRow,
    LadderRow,
    Replacer,
    capture_inputs,
    ladder,
    mean_loss,
)
from gaugelab.experiments.lora.sources import Source, check_base_shapes, find, open_store
from gaugelab.lowrank import RankReport, energy_rank, rank_policies, reconstruct_by_rank
from gaugelab.study.store.db import DEFAULT_STORE_PATH, RunStore


@dataclass(frozen=True)
class ModuleReport:
    """One adapted module's update ``ΔW`` ``[d_out, d_in]``.

    Attributes:
        module: its path; layer: the block index (``None`` outside the blocks); family:
            ``attention``, ``mlp`` or ``other``.
        shape: ``(d_out, d_in)``; configured: the LoRA rank (``None`` for a dense update);
            scale: ``s`` (``None`` for a dense update).
        policies: every rank policy (:func:`gaugelab.lowrank.rank_policies`, 99% energy).
        energy90: §0x0BE's rank: the smallest ``k`` with 90% of ``‖ΔW‖_F²``.
        sigma: the singular values, non-increasing.
        truncation: one :class:`gaugelab.lowrank.TruncationRow` per rank (factors dropped).
        ladder: one :class:`LadderRow` per rank (empty when the ladder was not computed).
    """

    module: str
    layer: int | None
    family: str
    shape: tuple[int, int]
    configured: int | None
    scale: float | None
    policies: tuple[RankReport, ...]
    energy90: int
    sigma: list[float]
    truncation: list[dict[str, float | int | bool]]
    ladder: list[LadderRow] = field(default_factory=list)

    def policy(self, name: str) -> int | float | None:
        """The value of the first policy whose id starts with ``name`` (``None`` if absent)."""
        return next((p.value for p in self.policies if p.policy_id.startswith(name)), None)


@dataclass
class InspectResult:
    """What :func:`inspect_lora` found.

    Attributes:
        source: what was inspected (a path, or ``run <identity[:12]>``); label: its candidate
            (``lora r=4``, ``full``, or ``adapter``); method: ``lora`` or ``full``; seed: the
            ensemble member inspected (``None`` for a folder).
        ranks: the truncation ranks; modules: one :class:`ModuleReport` per module.
        reference: target / retention validation loss of the model with the whole update
            (``target``, ``retention``), without it (``base_target``, ``base_retention``),
            and as the run logged them (``logged_target``, ``logged_retention``), where known.
        joint: one :class:`JointRow` per rank (empty without the ladder).
        not_computed: what could not be computed, and why.
        other_updates: parameters the update also changed that are not analysed (dense).
        data: what the ladder read (``None``: the study's target validation batches; for a
            Hugging Face base, the data file, windows and head).
    """

    source: str
    label: str
    method: str
    seed: int | None
    ranks: tuple[int, ...]
    modules: list[ModuleReport]
    reference: dict[str, float] = field(default_factory=dict)
    joint: list[JointRow] = field(default_factory=list)
    not_computed: list[str] = field(default_factory=list)
    other_updates: list[str] = field(default_factory=list)
    data: str | None = None

    @property
    def has_ladder(self) -> bool:
        """Whether the evidence ladder was computed."""
        return any(m.ladder for m in self.modules)


def _module_report(module: str, update: object, configured: int | None, scale: float | None,
                   shape: tuple[int, int], ranks: Sequence[int], dtype: torch.dtype,
                   rtol: float | None = None):  # fmt: skip
    policies = rank_policies(update, matrix_id=module, configured=configured, computed_in=dtype,
                             rtol=rtol)  # fmt: skip
    sweep = reconstruct_by_rank(update, ranks, matrix_id=module, computed_in=dtype)
    rows = [{"rank": r.rank, "retained_energy": r.retained_energy,
             "retained_mass": r.retained_mass, "frobenius_squared": r.frobenius_squared,
             "spectral": r.spectral, "non_unique": r.non_unique} for r in sweep.rows]  # fmt: skip
    name = parse_module_name(module)
    return ModuleReport(
        module=module, layer=name.layer, family=name.family,
        shape=shape, configured=configured, scale=scale, policies=policies,
        energy90=int(energy_rank(update, matrix_id=module, rho=0.9).value),
        sigma=sweep.sigma.tolist(), truncation=rows,
    )  # fmt: skip


def inspect_lora(
    source: str | os.PathLike[str],
    *,
    store: str | os.PathLike[str] | RunStore = DEFAULT_STORE_PATH,
    ranks: Sequence[int] = (1, 4, 16),
    seed: int | None = None,
    study: str | None = None,
    evidence: bool = True,
    base: str | os.PathLike[str] | None = None,
    hf: HFEvidence | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> InspectResult:
    """Inspect an adapter: per module, rank policies, spectrum, truncation and evidence ladder.

    Args:
        source: a PEFT adapter folder (or a file in it); a candidate label, ``full`` or
            ``lora r=<r>``, of a fine-tuning study in ``store``; or the identity (a prefix of
            4 or more hex characters) of a ``lora-finetune`` run in ``store``. An existing
            path wins.
        store: the run store (a path or an open :class:`RunStore`); a missing store file is
            fine for a folder (the ladder is then not computed).
        ranks: truncation ranks, integers ≥ 0.
        seed: which seed of a run's ensemble (default: its first).
        study: where a candidate label is looked up (default: the newest fine-tuning study
            of the store that has it).
        evidence: compute the evidence ladder when base model and data are known.
        base: the base model's checkpoint for an adapter folder (a ``.safetensors`` file or a
            Hugging Face folder, :class:`~gaugelab.adapters.checkpoint.BaseCheckpoint`):
            every module is checked against it, and a DoRA adapter is analysed through its
            effective update (:func:`~gaugelab.adapters.dora.dora_delta`), which needs it.
        hf: a Hugging Face base folder and data for the ladder of an adapter folder
            (:class:`~gaugelab.experiments.lora.hf_ladder.HFEvidence`).
        progress: called as ``progress("inspecting", i, n)`` after each of the ``n`` modules.

    Returns:
        The :class:`InspectResult`. Every decomposition runs in float64 with the tolerances of
        the dtype the update was produced in.

    Raises:
        ValueError: ``source`` is neither an adapter folder nor a candidate or run of the
            store (an ambiguous prefix); a run that
            is not a fine-tuning run, not completed, or has no such ``seed``; bad ``ranks``;
            an unreadable adapter (as :meth:`gaugelab.adapters.Adapter.load`); an adapter
            module whose shape differs from its base model's, or that the ``base``
            checkpoint lacks (one line naming both); a DoRA adapter without ``base``; a
            ``base`` that is not a safetensors checkpoint, or given for a stored run; ``hf``
            for a source that is not an adapter, or a refusal of
            :func:`~gaugelab.experiments.lora.hf_ladder.hf_ladder`.
        ArtifactError: a file the run recorded changed since it was written.

    Source: seed 003 §0x04I, §0x04K, §0x04M, §0x0BE.
    """
    ranks = tuple(ranks)
    if not ranks or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in ranks):
        raise ValueError(f"inspect_lora: ranks={list(ranks)}; allowed: integers >= 0")
    checkpoint = None if base is None else BaseCheckpoint.open(base)
    with open_store(store) as db:
        found = find(str(source), db, seed, study, "inspect_lora", base=checkpoint)
        return _inspect(found.source, ranks, evidence, hf, progress)


def _inspect(found: Source, ranks: tuple[int, ...], evidence: bool, hf: HFEvidence | None,
             progress: Callable[[str, int, int], None] | None) -> InspectResult:  # fmt: skip
    f64 = torch.float64
    modules = []
    total = len(found.factors) + len(found.dense)
    for m, (B, A, s) in found.factors.items():  # in factor space: no [d_out, d_in] matrix
        factors = (B.to(f64), A.to(f64), s)
        modules.append(_module_report(m, factors, A.shape[0], s, (B.shape[0], A.shape[1]),
                                      ranks, found.dtype))  # fmt: skip
        if progress is not None:
            progress("inspecting", len(modules), total)
    for m, delta in found.dense.items():
        modules.append(_module_report(m, delta.to(f64), None, None, tuple(delta.shape), ranks,
                                      found.dtype, found.rtol.get(m)))  # fmt: skip
        if progress is not None:
            progress("inspecting", len(modules), total)
    modules.sort(key=lambda m: module_order(m.module))
    result = InspectResult(found.source, found.label, found.method, found.seed, ranks, modules,
                           dict(found.logged), not_computed=list(found.missing),
                           other_updates=sorted(found.others))  # fmt: skip
    if hf is not None:
        return _on_hf_base(result, found, hf, evidence)
    if found.pretrain is None or found.weights is None:
        return result
    if not evidence:
        result.not_computed.append(_NOT_ASKED)
        return result
    deltas = {m: (B.to(torch.float64) @ A.to(torch.float64)) * s  # the ladder swaps ΔW in
              for m, (B, A, s) in found.factors.items()}  # fmt: skip
    deltas.update({m: d.to(torch.float64) for m, d in found.dense.items()})
    corpus = finetune_corpus(found.pretrain, found.target_corpus)
    val = eval_batches(corpus, found.pretrain)
    model = base_model(found.pretrain, found.weights, corpus.d_vocab)
    check_base_shapes(found, found.source, model, "inspect_lora")
    result.reference["base_target"] = mean_loss(model, val["target"])
    result.reference["base_retention"] = mean_loss(model, val["retention"])
    with torch.no_grad():
        params = dict(model.named_parameters())
        for key, value in found.others.items():
            params[key] += value.to(params[key].dtype)
    replacer = Replacer(model, deltas)
    result.reference["target"] = mean_loss(model, val["target"])
    result.reference["retention"] = mean_loss(model, val["retention"])
    inputs = capture_inputs(model, list(deltas), val["target"])
    rows, result.joint = ladder(replacer, inputs, val["target"], val["retention"], ranks,
                                found.dtype)  # fmt: skip
    return _attach(result, rows)


_NOT_ASKED = "evidence ladder: not asked for (--no-evidence; evidence=False)"


def _on_hf_base(result: InspectResult, found: Source, hf: HFEvidence,
                evidence: bool) -> InspectResult:  # fmt: skip
    if found.adapter is None:
        raise ValueError(f"inspect_lora: --base {hf.base}: {found.source} is a full fine-tuning "
                         "run; allowed: a LoRA adapter of that Hugging Face model")  # fmt: skip
    result.not_computed = [n for n in result.not_computed if not n.startswith("evidence ladder")]
    if not evidence:
        result.not_computed.append(_NOT_ASKED)
        return result
    run = hf_ladder(found.adapter, hf, result.ranks, found.dtype)
    result.reference.update(run.reference)
    result.joint = run.joint
    result.not_computed.extend(run.notes)
    result.data = (f"{hf.data}: {run.n_windows} window(s) of {run.window} token(s), base "
                   f"{hf.base} (head {run.head})")  # fmt: skip
    return _attach(result, run.rows)


def _attach(result: InspectResult, rows: list[LadderRow]) -> InspectResult:
    """``result`` with each module's ladder rows."""
    by_module: dict[str, list[LadderRow]] = {}
    for row in rows:
        by_module.setdefault(row.module, []).append(row)
    result.modules = [ModuleReport(**{**m.__dict__, "ladder": by_module.get(m.module, [])})
                      for m in result.modules]  # fmt: skip
    return result


def to_json(result: InspectResult) -> str:
    """The result as JSON (policies as ``{policy_id: value}``)."""
    modules = []
    for m in result.modules:
        data = {k: v for k, v in m.__dict__.items() if k not in ("policies", "ladder")}
        data["policies"] = {p.policy_id: p.value for p in m.policies}
        data["ladder"] = [row.__dict__ for row in m.ladder]
        modules.append(data)
    payload = {**{k: v for k, v in result.__dict__.items() if k not in ("modules", "joint")},
               "modules": modules, "joint": [j.__dict__ for j in result.joint]}  # fmt: skip
    return json.dumps(payload, indent=1, allow_nan=True)


__all__ = ["InspectResult", "ModuleReport", "inspect_lora", "to_json"]
