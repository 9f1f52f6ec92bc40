"""The learning–forgetting decision: validation-only records, gates, selection, the sealed test.

The order is the seed's contract (§0x0BU, §0x0CL): the design is declared and hashed before
any outcome; the base model is evaluated once per block; each completed cell's checkpoint is
chosen on validation alone (:func:`gaugelab.study.release.selection.select_checkpoint`, monitor: the
target validation loss); the typed records
(:class:`gaugelab.study.release.selection.CandidateRecord`)
are validated (fail closed), turned into points, and passed to the Pareto front and the
constraint-feasible selection of :mod:`gaugelab.study.stats.compare`; an empty feasible set records
"no release" and leaves the test sealed; otherwise the chosen candidate and checkpoint are
frozen, the test splits opened once (:class:`gaugelab.study.release.sealed.SealedTestStore`), and
the
selected candidate, the base and the full fine-tuning reference are evaluated on them. The
selection never runs again on test.

Source: seed 003 §0x0BB–0x0BU, §0x0CE–0x0CL; biderman2024lora.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gaugelab.determinism import deterministic
from gaugelab.experiments.learn_forget.cells import Cell, read_state
from gaugelab.experiments.learn_forget.design import (
    METRIC_DIRECTIONS,
    base_manifest,
    candidate_manifest,
    design_manifest,
    metric_declarations,
    split_ids,
)
from gaugelab.experiments.learn_forget.measure import (
    base_ensemble,
    energy_ranks,
    evaluate,
    factor_summary,
    full_deltas,
    lora_deltas,
    module_path,
    relative_tail,
    update_overlap,
)
from gaugelab.experiments.learn_forget.spec import LearnForgetSpec
from gaugelab.experiments.learn_forget.train import DOMAINS3, cell_ensemble, domain_batches
from gaugelab.experiments.lora.data import base_model, load_corpus, pretrain_weights
from gaugelab.study.release import selection as sel
from gaugelab.study.release.design import check_unchanged
from gaugelab.study.release.sealed import SealedTestSpec, SealedTestStore
from gaugelab.study.stats.compare import feasible_selection, pareto_front
from gaugelab.study.store.db import RunStore

__all__ = [
    "Decision",
    "Measured",
    "decide",
    "measure",
    "open_test",
    "recorded_design",
    "sealed_store",
]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


@dataclass
class Measured:
    """Everything measured on validation for one block (nothing read from test).

    Attributes:
        block: the block; base: domain → the base model's validation loss (one record).
        checkpoints: candidate → ``[(step, {domain: mean over seeds})]`` at the declared steps.
        chosen: candidate → the validation-chosen step; records: the typed records, in
            candidate-id order (the final tie-break); per_seed: candidate → domain → ``[E]`` at
            the chosen step.
        energy: declared step → projection path → mean 90%-energy rank of the full update
            over seeds; tails: candidate → ``[E]`` relative tail of the full update at its rank.
        overlaps: candidate → (mean row overlap, mean column overlap) with the full update.
        incomplete: cells that are not complete (their candidates have no record).
    """

    block: str
    base: dict[str, float]
    checkpoints: dict[str, list[tuple[int, dict[str, float]]]] = field(default_factory=dict)
    chosen: dict[str, int] = field(default_factory=dict)
    records: list[sel.CandidateRecord] = field(default_factory=list)
    per_seed: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    energy: dict[int, dict[str, float]] = field(default_factory=dict)
    tails: dict[str, list[float]] = field(default_factory=dict)
    overlaps: dict[str, tuple[float, float]] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)


@dataclass
class Decision:
    """The frozen validation decision on the primary block.

    Attributes:
        ids: candidate ids of the points, ``"base"`` first, then the records' order.
        points: the plain metric points :mod:`gaugelab.study.stats.compare` consumed.
        frontier: ids on the Pareto front (target gain, forgetting, stress gain, cost).
        feasible: ids meeting every gate; chosen: the selected id or ``None``; reason: why
            none; violations: id → the gates it violates.
        constraints: the gates as ``(lo, hi)`` bounds; order: the tie-break.
    """

    ids: list[str]
    points: list[dict[str, float]]
    frontier: list[str]
    feasible: list[str]
    chosen: str | None
    reason: str | None
    violations: dict[str, tuple[str, ...]]
    constraints: dict[str, tuple[float | None, float | None]]
    order: list[tuple[str, str]]


def _checkpoint_id(cell: Cell, step: int) -> str:
    return f"{cell.state.identity[:16]}@step{step}:{cell.states[step].sha256[:16]}"


def measure(store: RunStore, spec: LearnForgetSpec, cells: list[Cell], block: str) -> Measured:
    """Measure one block on validation (see the module docstring).

    Raises:
        AdmissionError, ArtifactError: the pretrain run is missing or its weights changed.
        SelectionError: a record fails closed (NaN, missing metric, duplicate id, …).
    """
    ft = spec.finetune
    run_spec = spec.model_copy(update={"block": block})
    weights = pretrain_weights(store, ft.pretrain)
    with deterministic():
        corpus = load_corpus(ft.pretrain.corpus)
        base = base_model(ft.pretrain, weights, corpus.d_vocab)
        val = domain_batches(run_spec, "val")
        base_val = {d: v[0] for d, v in evaluate(base_ensemble(base), val).items()}
    out = Measured(block, base_val)
    mine = [c for c in cells if c.block == block]
    out.incomplete = [c.candidate for c in mine if not c.complete]
    done = {c.candidate: c for c in mine if c.complete}
    declarations = metric_declarations(spec, block)
    for cid, cell in done.items():
        scores = []
        for step in spec.checkpoint_steps():
            means = {d: _mean(cell.validation(d, step)) for d in DOMAINS3}
            out.checkpoints.setdefault(cid, []).append((step, means))
            scores.append(
                sel.CheckpointScores(
                    step=step,
                    checkpoint_id=_checkpoint_id(cell, step),
                    split="validation",
                    scores=means,
                )
            )
        chosen = sel.select_checkpoint(scores, "target", METRIC_DIRECTIONS["target"])
        out.chosen[cid] = chosen.step
        out.per_seed[cid] = {d: cell.validation(d, chosen.step) for d in DOMAINS3}
    full = done.get("full")
    full_delta = None
    if full is not None:
        with deterministic():
            for step in spec.checkpoint_steps():
                deltas = full_deltas(spec, base, read_state(full.states[step]))
                ranks = energy_ranks(deltas)
                out.energy[step] = {p: _mean([float(v) for v in r]) for p, r in ranks.items()}
                if step == out.chosen["full"]:
                    full_delta = deltas
    manifests = []
    for cid in ["base", *(c for c in spec.candidate_ids() if c in done)]:
        cell = done.get(cid)
        reconstruction = subspace = trajectory = None
        if cell is None:  # the base: no update, its whole full-update energy is the tail
            manifest = base_manifest(spec, block)
            means, checkpoint_id, seconds = base_val, f"pretrain:{ft.pretrain.identity()[:16]}", 0.0
            if full_delta is not None:
                reconstruction = sel.Reconstruction(
                    rank=0, tail_energy=1.0, source_digest=full.states[out.chosen["full"]].sha256
                )
        else:
            step = out.chosen[cid]
            manifest = candidate_manifest(cell.spec, cell.trainable_parameters or 0)
            means = {d: _mean(out.per_seed[cid][d]) for d in DOMAINS3}
            checkpoint_id, seconds = _checkpoint_id(cell, step), float(cell.seconds or 0.0)
            if cell.rank is not None:
                with deterministic():
                    ensemble = cell_ensemble(cell.spec, base, read_state(cell.states[step]))
                    delta = lora_deltas(ensemble)
                    summary = factor_summary(cell.spec, ensemble, step, means["target"])
                trajectory = sel.Trajectory(summary=summary)
                if full_delta is not None:
                    reconstruction, subspace = _against_full(
                        out,
                        spec,
                        cid,
                        cell.rank,
                        delta,
                        full_delta,
                        full.states[out.chosen["full"]].sha256,
                    )
            elif full_delta is not None:  # full fine-tuning is its own full update: no tail
                reconstruction = sel.Reconstruction(
                    rank=None, tail_energy=0.0, source_digest=cell.states[step].sha256
                )
        manifests.append(manifest)
        trainable = manifest.trainable_parameters
        out.records.append(
            sel.CandidateRecord.from_manifest(
                manifest,
                checkpoint_id=checkpoint_id,
                revisions={d.name: d.revision for d in declarations},
                operational=sel.operational_scores(means, base_val, declarations),
                cost=sel.Cost(
                    trainable_parameters=trainable,
                    optimizer_state_numel=manifest.optimizer_state_numel,
                    wall_seconds=seconds,
                    peak_mib=None,
                ),
                reconstruction=reconstruction,
                subspace=subspace,
                trajectory=trajectory,
            )
        )
    sel.validate_records(out.records, declarations, manifests=manifests)
    return out


def _against_full(out, spec, cid, rank, delta, full_delta, digest):
    """The reconstruction tail and the update overlap of a LoRA candidate (mean over seeds)."""
    ft = spec.finetune
    paths = [module_path(layer, n) for layer in range(ft.pretrain.n_layers) for n in ft.targets]
    out.tails[cid] = relative_tail(full_delta, paths, rank)
    overlaps = update_overlap(delta, full_delta, rank)
    row = _mean([_mean(r) for r, _ in overlaps.values()])
    col = _mean([_mean(c) for _, c in overlaps.values()])
    out.overlaps[cid] = (row, col)
    reconstruction = sel.Reconstruction(
        rank=rank, tail_energy=min(1.0, max(0.0, _mean(out.tails[cid]))), source_digest=digest
    )
    subspace = sel.SubspaceOverlap(
        summary=(row + col) / 2,
        source_digest=digest,
        per_module={p: (_mean(r) + _mean(c)) / 2 for p, (r, c) in overlaps.items()},
    )
    return reconstruction, subspace


def policy(spec: LearnForgetSpec, block: str = "a") -> sel.GatePolicy:
    """The declared gates and tie-break as a :class:`~gaugelab.study.release.selection.GatePolicy`:
    target gain ≥ ``min_target_gain``, forgetting ≤ ``max_forgetting``, stress gain ≥
    ``min_stress_gain`` (oriented, nats per character), the tail gate when declared; cost =
    trainable parameters, then configured rank, then id."""
    return sel.GatePolicy(
        declarations=metric_declarations(spec, block),
        floors={
            "target_gain": (spec.min_target_gain, None),
            "forgetting": (None, spec.max_forgetting),
            "stress_gain": (spec.min_stress_gain, None),
        },
        max_tail=spec.max_tail,
        require_kernel_gate=True,
    )


def decide(spec: LearnForgetSpec, measured: Measured) -> Decision:
    """Pareto front and gated selection over the measured records (validation only).

    The base is on the frontier's ground (its record is the reference of every gain and
    forgetting) but is never released: the study chooses among trained candidates, and an
    empty feasible set is "no release", not "keep the base" (declared in the design)."""
    gates = policy(spec, measured.block)
    points = sel.selection_points(measured.records, gates)
    ids = [r.candidate_id for r in measured.records]
    front = pareto_front(points, gates.objectives())
    constraints = gates.constraints()
    order = gates.tie_break()
    trained = [i for i, r in enumerate(measured.records) if r.method != "base"]
    selection = feasible_selection([points[i] for i in trained], constraints, order)
    return Decision(
        ids=ids,
        points=points,
        frontier=[ids[i] for i in front],
        feasible=[ids[trained[i]] for i in selection.feasible],
        chosen=None if selection.chosen is None else ids[trained[selection.chosen]],
        reason=selection.reason,
        violations={ids[trained[i]]: v for i, v in enumerate(selection.violations)},
        constraints=dict(constraints),
        order=[(k, str(d)) for k, d in order],
    )


def recorded_design(store: RunStore, study: str) -> str | None:
    """The design digest the study's seal was registered under, or ``None`` (no seal yet)."""
    for run in store.runs(study):
        if run.kind == SealedTestSpec.kind:
            return str(run.spec["design_digest"])
    return None


def sealed_store(
    store: RunStore, study: str, spec: LearnForgetSpec, design_digest: str | None = None
) -> SealedTestStore:
    """The sealed test splits of the primary block (target, retention, stress), under
    ``design_digest`` (default: the spec's design manifest's digest)."""
    run_spec = spec.model_copy(update={"block": "a"})

    def load() -> dict[str, list]:
        with deterministic():
            return domain_batches(run_spec, "test")

    return SealedTestStore(
        store,
        study=study,
        design_digest=design_digest or design_manifest(spec).digest(),
        test_splits=split_ids(spec, "a", "test"),
        loader=load,
    )


def open_test(
    store: RunStore,
    study: str,
    spec: LearnForgetSpec,
    cells: list[Cell],
    measured: Measured,
    decision: Decision,
) -> dict[str, Any] | None:
    """Freeze the chosen candidate and checkpoint, open the test once, evaluate, record.

    With an empty feasible set: records "no release" (once) and returns ``None``; the test
    stays sealed. A study whose test was opened already returns the recorded report without
    opening it again.

    Returns:
        The test report (:func:`recorded_test`'s form).
    """
    design = design_manifest(spec)
    declared = recorded_design(store, study) or design.digest()
    sealed = sealed_store(store, study, spec, declared)
    status = sealed.status()
    if status.report is not None or status.opened:
        return recorded_test(sealed)
    if status.no_release is not None:
        return None
    check_unchanged(declared, design)  # a design changed after outcomes is a new study
    if decision.chosen is None:
        sealed.record_no_release(decision.reason or "the feasible set is empty")
        return None
    record = next(r for r in measured.records if r.candidate_id == decision.chosen)
    frozen = sealed.freeze(record.candidate_id, record.checkpoint_id, record.manifest_digest)
    batches = sealed.open_once()
    by_id = {c.candidate: c for c in cells if c.block == "a" and c.complete}
    weights = pretrain_weights(store, spec.finetune.pretrain)
    results: dict[str, float] = {}
    with deterministic():
        corpus = load_corpus(spec.finetune.pretrain.corpus)
        base = base_model(spec.finetune.pretrain, weights, corpus.d_vocab)
        roles = {"base": (base_ensemble(base), 0)}
        for role, cid in (("selected", decision.chosen), ("full reference", "full")):
            cell = by_id.get(cid)  # the selection is a trained candidate (decide)
            if cell is not None:
                step = measured.chosen[cid]
                roles[role] = (cell_ensemble(cell.spec, base, read_state(cell.states[step])), step)
        for role, (ensemble, step) in roles.items():
            results[f"{role}|step"] = float(step)
            for domain, losses in evaluate(ensemble, batches).items():
                for e, value in enumerate(losses):
                    results[f"{role}|{domain}|{e}"] = value
    sealed.report(frozen, results)
    return recorded_test(sealed)


def recorded_test(sealed: SealedTestStore) -> dict[str, Any] | None:
    """The test report recorded in the store, or ``None`` (never opens the test).

    Returns:
        ``{"frozen": digest, "<role>": {"candidate", "step", "<domain>": [E] losses}}`` for the
        roles ``base``, ``selected`` and ``full reference``.
    """
    event = next((e for e in sealed.access_log() if e["event"] == "report" and e["accepted"]), None)
    if event is None:
        return None
    chosen = event["frozen"]["candidate_id"]
    out: dict[str, Any] = {"frozen": event["frozen_digest"]}
    ids = {"base": "base", "selected": chosen, "full reference": "full"}
    for key, value in sorted(event["results"].items()):
        role, *rest = key.split("|")
        entry = out.setdefault(role, {"candidate": ids[role]})
        if rest == ["step"]:
            entry["step"] = int(value)
        else:
            entry.setdefault(rest[0], []).append((int(rest[1]), value))
    for role in ids:
        for domain in DOMAINS3:
            if role in out and domain in out[role]:
                out[role][domain] = [v for _, v in sorted(out[role][domain])]
    return out
