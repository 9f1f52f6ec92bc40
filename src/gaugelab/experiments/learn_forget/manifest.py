"""The learning–forgetting study's own low-rank study manifest (seed 003 §0x00F–0x00K).

:func:`study_manifest` declares the study's objects through
:class:`gaugelab.study.release.study_manifest.LowRankStudyManifest` before any run (the plan
builds it, so an invalid one refuses the study):

* **parameters** — the schema is the adapted projections' weights, row-major, in the order
  ``blocks.<l>.attn.{q,k,v,o}_proj, blocks.<l>.mlp.{fc_in,fc_out}``: the coordinates of every
  update the study measures. Full fine-tuning also trains the embeddings, positions and norms;
  they are outside this schema (nothing measures them). ``theta_0`` is the pretrained model;
  per block, ``theta_full`` and ``delta_theta_full``;
* **matrices** — per projection ``W_0``; per block ``W_full`` and ``delta_W_full``; per block,
  LoRA candidate and adapted projection ``A``, ``B`` and ``delta_W_lora = s·B A``;
* **functions** — ``f_theta``, the character model (one window in, the per-position
  next-character cross-entropy out);
* **splits** — chunk-level: a row is one chunk of a domain's text, its sample id the text's
  digest, the chunking and the chunk index, so a chunk can never be two splits' row. Per block
  ``train_v1`` and ``eval_v1`` (the target domain's train and validation chunks); once
  ``retention_v1`` (the retention domain's validation chunks) and ``stress_v1`` (the stress
  domain's); and the sealed ``test_v1`` chunks of all three;
* **rank policies** — ``configured`` per LoRA candidate; ``energy`` (``ρ = 0.9``) on the full
  update;
* **envelopes** — ``full_update_v1``, ``lora_v1`` (and ``lora_v1.rslora``),
  ``svd_reconstruction_v1`` (the tail gate), ``subspace_overlap_v1`` (update overlap),
  ``retention_v1`` (the study's decision);
* **ledger** — declared from the spec's widths, ranks and chunk counts, and checked against the
  one the objects imply.

A target domain that is the retention text, or a second block whose target is the first
block's, is refused here: their splits share rows.

Source: seed 003 §0x00F–0x00K; §0x0BE (``ρ = 0.9``), §0x0BM (the tail is a gate), §0x0BN
(overlap is admissibility evidence, not retention); biderman2024lora.
"""

from __future__ import annotations

import torch

from gaugelab.experiments.learn_forget.design import split_ids
from gaugelab.experiments.learn_forget.measure import RHO, module_path
from gaugelab.experiments.learn_forget.spec import LearnForgetSpec
from gaugelab.experiments.lora.spec import ALL_TARGETS
from gaugelab.study.release.study_manifest import (
    AnalysisRecord,
    DatasetSplit,
    FunctionObject,
    LowRankStudyManifest,
    MatrixObject,
    ParameterObject,
    ParameterSchema,
    ProtocolEnvelope,
    RankPolicyRecord,
    TrainingRecord,
)
from gaugelab.tasks import TwoDomainSpec

__all__ = ["study_manifest"]

CHECKPOINT_RULE = "min target validation loss among the declared steps, ties earliest"
_DELTA_RULE = "W_ft - W_0 per projection, float64 from the recorded state"


def _shapes(spec: LearnForgetSpec) -> dict[str, tuple[int, int]]:
    d, h = spec.finetune.pretrain.d_model, spec.finetune.pretrain.d_mlp
    return {**{n: (d, d) for n in ("q_proj", "k_proj", "v_proj", "o_proj")},
            "fc_in": (h, d), "fc_out": (d, h)}  # fmt: skip


def _paths(spec: LearnForgetSpec, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(path, module name)`` of ``names`` in every block, in schema order."""
    layers = range(spec.finetune.pretrain.n_layers)
    return [(module_path(layer, n), n) for layer in layers for n in names]


def _split(split_id: str, role: str, corpus: TwoDomainSpec, domain: str, split: str,
           payload_id: str, purpose: str, revision: str) -> DatasetSplit:  # fmt: skip
    source = getattr(corpus, domain)
    digest = source.sha256[:16]
    chunks = corpus.chunk_layout()[domain][split]
    return DatasetSplit(
        split_id=split_id, role=role, dataset_id=f"text:{digest}", purpose=purpose,  # type: ignore[arg-type]
        sample_ids=tuple(f"text:{digest}/{corpus.n_chunks}:{k}" for k in chunks),
        payload_id=payload_id, labels_id=f"next-character targets of {payload_id}",
        revision=revision,
    )  # fmt: skip


def _splits(spec: LearnForgetSpec) -> tuple[DatasetSplit, ...]:
    ft, p = spec.finetune, spec.finetune.pretrain
    metric = f"member_losses:cross-entropy:{p.dtype}:seed{p.eval_seed}x{p.val_batches}x" \
             f"{p.val_batch_size} windows"  # fmt: skip
    transform = (f"windows of {p.corpus.block_size} characters, {ft.batch_size} per step, "
                 "drawn by each seed's generator")  # fmt: skip
    base = p.corpus
    out = []
    for b in spec.blocks():
        corpus = spec.block_corpus(b)
        val, test = split_ids(spec, b, "val"), split_ids(spec, b, "test")
        train_id = (f"target:train:{corpus.target.sha256[:16]}:{corpus.n_chunks}chunks:"
                    f"seed{corpus.seed}")  # fmt: skip
        out += [
            _split(f"train_v1:{b}", "train", corpus, "target", "train", train_id,
                   "optimizer updates and train loss", transform),
            _split(f"eval_v1:{b}", "eval", corpus, "target", "val", val[0],
                   "checkpoint selection and target score", metric),
            _split(f"test_v1:target:{b}", "test", corpus, "target", "test", test[0],
                   "sealed target test, opened once after the release", metric),
        ]  # fmt: skip
    val, test = split_ids(spec, "a", "val"), split_ids(spec, "a", "test")
    out += [
        _split("retention_v1", "retention", base, "retention", "val", val[1],
               "non-target behaviour: forgetting", metric),
        _split("stress_v1", "stress", spec.stress, "target", "val", val[2],
               "held-out stress package: stress gain", metric),
        _split("test_v1:retention", "test", base, "retention", "test", test[1],
               "sealed retention test", metric),
        _split("test_v1:stress", "test", spec.stress, "target", "test", test[2],
               "sealed stress test", metric),
    ]  # fmt: skip
    return tuple(out)


def _training(spec: LearnForgetSpec, hyperparameters: str) -> TrainingRecord:
    """The fine-tuning protocol's record (the spec's optimizer, schedule, budget, seeds)."""
    ft, p = spec.finetune, spec.finetune.pretrain
    tokens = ft.steps * ft.batch_size * p.corpus.block_size
    return TrainingRecord(
        optimizer="AdamW", optimizer_revision=f"torch {torch.__version__}",
        hyperparameters=f"{hyperparameters}; torch's default betas and eps",
        schedule=f"linear warm-up {ft.warmup} steps, cosine decay to 0.1 of the peak",
        budget=f"{ft.steps} steps, {tokens} tokens", precision=p.dtype,
        batching=f"{ft.batch_size} windows of {p.corpus.block_size} characters per step",
        clipping="none", regularization="none: no weight decay, no dropout",
        seed_roles=", ".join(f"{k}={v}" for k, v in spec.seed_roles().items()),
        eval_cadence=f"every {ft.eval_every} steps and the last",
        checkpoint_rule=f"steps {list(spec.checkpoint_steps())}: {CHECKPOINT_RULE}",
    )  # fmt: skip


def study_manifest(spec: LearnForgetSpec) -> LowRankStudyManifest:
    """The study's objects, splits, rank policies and envelopes (see the module docstring).

    Args:
        spec: the study (its ``block`` and ``candidate`` are not read: every block and
            candidate is declared).

    Returns:
        The validated manifest, ``manifest_id = "learn-forget-<identity[:12]>"``.

    Raises:
        SplitSeparationError: two splits share a chunk, or the retention or stress split is
            cut from a target text (e.g. a target domain that is the retention text).
        StudyManifestError: any other rule of
            :func:`gaugelab.study.release.study_manifest.validate_study_manifest`.

    Source: seed 003 §0x00F–0x00K.
    """
    p, shapes = spec.finetune.pretrain, _shapes(spec)
    paths = _paths(spec, ALL_TARGETS)
    schema = ParameterSchema("row-major", tuple((f"{q}.weight", shapes[n]) for q, n in paths))
    base = ParameterObject(
        object_id="theta_0", kind="base", schema=schema.text(), dim=schema.ambient(),
        base_revision=f"pretrain:{p.identity()[:16]}", dtype_role=f"{p.dtype} pretrained weights",
    )  # fmt: skip
    bases = [
        MatrixObject(object_id=f"W_0:{q}", kind="base", layer_id=q, shape=shapes[n],
                     axes=("out", "in"), tensor=f"{q}.weight", parameter_id="theta_0")
        for q, n in paths
    ]  # fmt: skip
    full = _Full(spec, base, shapes) if spec.finetune.full else None
    lora = _Lora(spec, shapes)
    envelopes = ([full.envelope] if full else []) + lora.envelopes
    policies = list(lora.policies)
    if full:
        policies.append(full.energy)
        envelopes += _analyses(full, lora)
    envelopes.append(_retention(spec, full, lora))
    window = p.corpus.block_size
    model = FunctionObject(object_id="f_theta", kind="model", parameter_id="theta_0",
                           input_dim=window, outputs=window)  # fmt: skip
    return LowRankStudyManifest(
        manifest_id=f"learn-forget-{spec.identity()[:12]}",
        parameter_schema=schema,
        parameter_objects=(base, *(full.params if full else ())),
        matrix_objects=(*bases, *(full.matrices if full else ()), *lora.matrices),
        function_objects=(model,),
        dataset_objects=_splits(spec),
        rank_policies=tuple(policies),
        protocols=tuple(envelopes),
        ledger=_ledger(spec),
    )


class _Full:
    """Full fine-tuning's objects: per block ``theta_full``, ``delta_theta_full`` and, per
    projection, ``W_full`` and ``delta_W_full``; its envelope; the energy-rank policy."""

    def __init__(self, spec: LearnForgetSpec, base: ParameterObject, shapes: dict) -> None:
        ft, blocks = spec.finetune, spec.blocks()
        same = {"schema": base.schema, "dim": base.dim, "base_id": "theta_0"}
        revision = {"base_revision": base.base_revision, "dtype_role": base.dtype_role}
        self.thetas = tuple(f"theta_full:{b}" for b in blocks)
        self.params = [o for b in blocks for o in (
            ParameterObject(object_id=f"theta_full:{b}", kind="trained",
                            produced_by="full_update_v1", **revision, **same),
            ParameterObject(object_id=f"delta_theta_full:{b}", kind="delta",
                            trained_id=f"theta_full:{b}", **same),
        )]  # fmt: skip
        self.matrices, deltas = [], []
        for b in blocks:
            for q, n in _paths(spec, ALL_TARGETS):
                common = {"layer_id": q, "shape": shapes[n], "axes": ("out", "in")}
                self.matrices += [
                    MatrixObject(object_id=f"W_full:{b}:{q}", kind="trained", tensor=f"{q}.weight",
                                 parameter_id=f"theta_full:{b}", **common),
                    MatrixObject(object_id=f"delta_W_full:{b}:{q}", kind="delta",
                                 base_id=f"W_0:{q}", trained_id=f"W_full:{b}:{q}", **common),
                ]  # fmt: skip
                deltas.append(f"delta_W_full:{b}:{q}")
        self.deltas = tuple(deltas)
        self.envelope = ProtocolEnvelope(
            envelope_id="full_update_v1", protocol="full_update_v1", trainable=self.thetas,
            fixed=("theta_0", *_trains(spec)),
            sweep=f"seed replication: seeds {list(ft.seeds)}, one ensemble",
            result_contract="checkpoint ID, score, and aligned dense delta",
            training=_training(spec, f"peak lr {ft.full_lr:g}"),
        )  # fmt: skip
        self.energy = RankPolicyRecord(
            policy_id="energy", matrices=self.deltas,
            fields={"sort_order": "descending singular values", "energy_threshold": f"{RHO:g}"},
        )  # fmt: skip


class _Lora:
    """The LoRA and rsLoRA candidates' objects: per block, candidate and adapted projection
    ``A``, ``B`` and ``delta_W_lora``; one envelope per scale rule; one configured-rank policy
    per block and candidate."""

    def __init__(self, spec: LearnForgetSpec, shapes: dict) -> None:
        ft = spec.finetune
        adapted = _paths(spec, tuple(ft.targets))
        self.matrices: list[MatrixObject] = []
        self.policies: list[RankPolicyRecord] = []
        self.envelopes: list[ProtocolEnvelope] = []
        self.products: list[str] = []
        self.factors: list[str] = []
        for method, eid, scale in (("lora", "lora_v1", "alpha/r"),
                                   ("rslora", "lora_v1.rslora", "alpha/sqrt(r) (rsLoRA)")):
            cands = [(cid, r) for (m, r), cid in zip(spec.methods(), spec.candidate_ids(),
                                                     strict=True) if m == method]
            if not cands:
                continue
            trained = []
            for b in spec.blocks():
                for cid, r in cands:
                    mine = []
                    for q, n in adapted:
                        (out, inp), key = shapes[n], f"{b}:{cid}:{q}"
                        s = ft.alpha(r) / (r**0.5 if method == "rslora" else r)
                        lora = {"layer_id": q, "target_id": f"W_0:{q}", "rank": r, "scale": s}
                        self.matrices += [
                            MatrixObject(object_id=f"A:{key}", kind="factor_A", shape=(r, inp),
                                         axes=("rank", "in"), init=ft.init, produced_by=eid,
                                         **lora),
                            MatrixObject(object_id=f"B:{key}", kind="factor_B", shape=(out, r),
                                         axes=("out", "rank"), init=ft.init, produced_by=eid,
                                         **lora),
                            MatrixObject(object_id=f"delta_W_lora:{key}", kind="product",
                                         shape=(out, inp), axes=("out", "in"),
                                         factor_ids=(f"B:{key}", f"A:{key}"), **lora),
                        ]  # fmt: skip
                        trained += [f"A:{key}", f"B:{key}"]
                        mine.append(f"delta_W_lora:{key}")
                    self.policies.append(RankPolicyRecord(
                        policy_id="configured", matrices=tuple(mine),
                        fields={"factor_orientation": "B[d_out,r] A[r,d_in], dW = s B A",
                                "rank": str(r)},
                    ))  # fmt: skip
                    self.products += mine
            self.factors += trained
            self.envelopes.append(ProtocolEnvelope(
                envelope_id=eid, protocol="lora_v1", trainable=tuple(trained),
                fixed=("theta_0", *(f"W_0:{q}" for q, _ in adapted), *_trains(spec)),
                settings={"scale": f"s = {scale}, alpha = {ft.alpha_ratio:g} r", "init": ft.init},
                sweep=f"rank and seed sweep: ranks {[r for _, r in cands]} x seeds "
                      f"{list(ft.seeds)}",
                result_contract="checkpoint ID, score, and product delta",
                training=_training(spec, f"peak lr {ft.lr:g}, alpha = {ft.alpha_ratio:g} r"),
            ))  # fmt: skip


def _trains(spec: LearnForgetSpec) -> tuple[str, ...]:
    return tuple(f"train_v1:{b}" for b in spec.blocks())


def _analyses(full: _Full, lora: _Lora) -> list[ProtocolEnvelope]:
    """The reconstruction envelope (energy ranks, the tail gate) and, with LoRA candidates, the
    update-overlap envelope."""
    used = ("configured", "energy") if lora.products else ("energy",)
    out = [ProtocolEnvelope(
        envelope_id="svd_reconstruction_v1", protocol="svd_reconstruction_v1", trainable=(),
        fixed=full.deltas,
        sweep="energy rank at every declared checkpoint; tail at each LoRA candidate's rank",
        result_contract="energy ranks and relative energy tails, a gate, never task quality",
        analysis=AnalysisRecord(checkpoint_ids=full.thetas, extraction_rule=_DELTA_RULE,
                                rank_policies=used, backend="torch.linalg.svdvals, float64"),
    )]  # fmt: skip
    if lora.products:
        out.append(ProtocolEnvelope(
            envelope_id="subspace_overlap_v1", protocol="subspace_overlap_v1", trainable=(),
            fixed=(*full.deltas, *lora.products),
            settings={"retained_dimensions": "the candidate's configured rank r",
                      "normalization": "min-rank overlap sum cos^2 / r, row and column spaces"},
            sweep="each LoRA candidate against the full update of its block and seed",
            result_contract="row and column overlaps: admissibility evidence, not retention",
            analysis=AnalysisRecord(checkpoint_ids=(*full.thetas, *lora.factors),
                                    extraction_rule=f"{_DELTA_RULE}; s B A per LoRA module",
                                    rank_policies=("configured",),
                                    backend="torch.linalg.svd, float64"),
        ))  # fmt: skip
    return out


def _retention(spec: LearnForgetSpec, full: _Full | None, lora: _Lora) -> ProtocolEnvelope:
    """The study's own envelope: every candidate, matched budgets, one checkpoint rule, target
    gain, forgetting and stress gain reported together."""
    ft, p = spec.finetune, spec.finetune.pretrain
    tokens = ft.steps * ft.batch_size * p.corpus.block_size
    return ProtocolEnvelope(
        envelope_id="retention_v1", protocol="retention_v1",
        trainable=(*(full.thetas if full else ()), *lora.factors),
        fixed=(*(f"eval_v1:{b}" for b in spec.blocks()), "retention_v1", "stress_v1",
               *_trains(spec)),
        settings={"budget_matching": f"{ft.steps} steps and {tokens} tokens per candidate",
                  "checkpoint_rule": CHECKPOINT_RULE},
        sweep=f"method/rank/seed: {spec.candidate_ids()} x seeds {list(ft.seeds)}",
        result_contract="target gain, forgetting and stress gain together, per block",
        training=_training(spec, f"peak lr {ft.lr:g} (LoRA, alpha = {ft.alpha_ratio:g} r), "
                                 f"{ft.full_lr:g} (full fine-tuning)"),
    )  # fmt: skip


def _ledger(spec: LearnForgetSpec) -> dict[str, int | tuple[int, ...]]:
    """The ledger from the spec's widths, ranks and chunk counts (not from the objects)."""
    ft, p = spec.finetune, spec.finetune.pretrain
    d, h = p.d_model, p.d_mlp
    size = {"fc_in": h * d, "fc_out": d * h}
    width = {"fc_in": h + d, "fc_out": d + h}
    out: dict[str, int | tuple[int, ...]] = {"D": p.n_layers * (4 * d * d + 2 * d * h)}
    for path, n in _paths(spec, ALL_TARGETS):
        out[f"dense[W_0:{path}]"] = size.get(n, d * d)
    for b in spec.blocks():
        for r, cid in ((r, c) for (_, r), c in zip(spec.methods(), spec.candidate_ids(),
                                                      strict=True) if r is not None):
            for path, n in _paths(spec, tuple(ft.targets)):
                m_plus_n, key = width.get(n, 2 * d), f"delta_W_lora:{b}:{cid}:{path}"
                out[f"factors[{key}]"] = r * m_plus_n
                out[f"manifold[{key}]"] = r * (m_plus_n - r)  # r <= min(d_in, d_out): the spec
                out[f"gauge[{key}]"] = r * r
    n_train, n_val, n_test = p.corpus.chunk_counts()
    for b in spec.blocks():
        out |= {f"rows[train_v1:{b}]": n_train, f"rows[eval_v1:{b}]": n_val,
                f"rows[test_v1:target:{b}]": n_test}  # fmt: skip
    out |= {"rows[retention_v1]": n_val, "rows[stress_v1]": n_val,
            "rows[test_v1:retention]": n_test, "rows[test_v1:stress]": n_test}  # fmt: skip
    return out
