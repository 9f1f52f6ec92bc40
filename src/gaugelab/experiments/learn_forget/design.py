"""The learning–forgetting study as a declared design and as candidate manifests.

:func:`design_manifest` turns a :class:`LearnForgetSpec` into the
:class:`gaugelab.study.release.design.DesignManifest` (content-hashed before any outcome: the
question, estimands and non-claims, candidates, blocks, nuisance tuples, checkpoints, metric
directions, gates and tie-break, revisions); :func:`candidate_manifest` into each candidate's
:class:`gaugelab.study.release.selection.CandidateManifest` (§0x0BG). Split ids carry the digests of
the text they are cut from, so a validation id can never equal a test id.

Source: seed 003 §0x0BG, §0x0CE, §0x0CJ; biderman2024lora.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from gaugelab.experiments.learn_forget.spec import LearnForgetSpec
from gaugelab.study.release.design import Block, CandidatePipeline, DesignManifest, NuisanceTuple
from gaugelab.study.release.selection import (
    PEAK_MEMORY_NOT_MEASURED,
    CandidateManifest,
    MetricDeclaration,
)
from gaugelab.tasks import TwoDomainSpec

__all__ = [
    "METRIC_DIRECTIONS",
    "base_manifest",
    "candidate_manifest",
    "design_manifest",
    "metric_declarations",
    "metric_revision",
    "nuisance_tuples",
    "split_ids",
]

METRIC_DIRECTIONS = {"target": "min", "retention": "min", "stress": "min"}
"""The raw validation metrics: mean cross-entropy (nats per character), lower is better;
oriented before any difference (§0x0BB)."""

QUESTION = (
    "Does LoRA learn less and forget less than full fine-tuning when the character model "
    "pretrained on tiny-shakespeare is adapted to Python standard-library source, how do both "
    "move with rank, and which trained candidate do the declared gates select (the "
    "pretrained base is the reference of every gain and forgetting, never released)?"
)
ESTIMANDS = (
    "target gain per candidate: L_base − L_candidate on the target validation split",
    "forgetting per candidate: L_candidate − L_base on the retention validation split",
    "stress gain per candidate: L_base − L_candidate on the held-out stress package",
    "paired contrasts candidate − full fine-tuning over the shared nuisance tuples",
)
NON_CLAIMS = (
    "no universal LoRA rank",
    "no reproduction of biderman2024lora's Llama-2-7B benchmarks",
    "the full update's energy rank is not a recommended LoRA rank",
    "two seeds give a range, not a confidence interval",
    "overlap with the full update is geometry, not retention",
)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _corpus_digest(corpus: TwoDomainSpec, domain: str) -> str:
    source = getattr(corpus, domain)
    fixed = (
        corpus.val_fraction,
        corpus.test_fraction,
        corpus.n_chunks,
        corpus.seed,
        corpus.block_size,
    )
    return _digest(source.model_dump_json() + repr(fixed))


def split_ids(spec: LearnForgetSpec, block: str, split: str) -> tuple[str, str, str]:
    """``(target, retention, stress)`` ids of ``split`` (``"val"`` or ``"test"``) in ``block``:
    ``<domain>:<split>:<digest of the text and its split rule, 16 hex>:<evaluation batches>``."""
    p = spec.finetune.pretrain
    batches = f"seed{p.eval_seed}x{p.val_batches}x{p.val_batch_size}"
    corpus = spec.block_corpus(block)
    digests = {
        "target": _corpus_digest(corpus, "target"),
        "retention": _corpus_digest(corpus, "retention"),
        "stress": _corpus_digest(spec.stress, "target"),
    }
    return tuple(f"{d}:{split}:{digests[d][:16]}:{batches}" for d in METRIC_DIRECTIONS)  # type: ignore[return-value]


def metric_revision(spec: LearnForgetSpec) -> str:
    """The revision of the three validation metrics (the same loss on every split)."""
    return f"member_losses:cross-entropy:{spec.finetune.pretrain.dtype}"


def metric_declarations(spec: LearnForgetSpec, block: str) -> tuple[MetricDeclaration, ...]:
    """The three validation metrics of ``block`` with their directions and revisions."""
    ids = split_ids(spec, block, "val")
    revision = metric_revision(spec)
    return tuple(
        MetricDeclaration(
            name=d, direction=METRIC_DIRECTIONS[d], split=i, revision=revision, unit="nats/char"
        )
        for d, i in zip(METRIC_DIRECTIONS, ids, strict=True)
    )


def nuisance_tuples(spec: LearnForgetSpec) -> tuple[NuisanceTuple, ...]:
    """One tuple per seed: the seed draws the LoRA factors (initialisation) and the minibatch
    stream (data order); no dropout in this pipeline."""
    return tuple(
        NuisanceTuple(init_seed=s, order_seed=s, dropout_seed=None) for s in spec.finetune.seeds
    )


def _scale(spec: LearnForgetSpec, method: str, rank: int | None) -> float | None:
    if rank is None:
        return None
    alpha = spec.finetune.alpha(rank)
    return alpha / math.sqrt(rank) if method == "rslora" else alpha / rank


def design_manifest(spec: LearnForgetSpec) -> DesignManifest:
    """The study's design, declared before outcomes (its digest names what was decided)."""
    ft, p = spec.finetune, spec.finetune.pretrain
    schedule = f"adamw, warm-up {ft.warmup}, cosine to 0.1, {ft.steps} steps"
    candidates = tuple(
        CandidatePipeline(
            candidate_id=cid,
            method=method,
            rank=rank,
            targets=("all",) if method == "full" else tuple(ft.targets),
            scale=_scale(spec, method, rank),
            optimizer=f"{schedule}, lr {ft.full_lr if method == 'full' else ft.lr:g}",
            init="pretrained" if method == "full" else ft.init,
            base_representation=p.dtype,
        )
        for (method, rank), cid in zip(spec.methods(), spec.candidate_ids(), strict=True)
    )
    tokens = ft.steps * ft.batch_size * p.corpus.block_size
    blocks = tuple(
        Block(
            name=b,
            domain="python source" if b == "a" else "second target",
            regime="continued pretraining (next character)",
            data_budget=tokens,
            target_surface=tuple(ft.targets),
            data_revision=_corpus_digest(spec.block_corpus(b), "target")[:16],
            tokenizer_revision=_corpus_digest(p.corpus, "retention")[:16],
            base_checkpoint=p.identity()[:16],
            evaluator_revision=f"member_losses:{p.dtype}:eval_seed={p.eval_seed}",
        )
        for b in spec.blocks()
    )
    gates = {
        "target_gain": (spec.min_target_gain, None),
        "forgetting": (None, spec.max_forgetting),
        "stress_gain": (spec.min_stress_gain, None),
    }
    if spec.max_tail is not None:
        gates["tail"] = (None, spec.max_tail)
    return DesignManifest(
        question=QUESTION,
        estimands=ESTIMANDS,
        non_claims=NON_CLAIMS,
        candidates=candidates,
        blocks=blocks,
        nuisance=nuisance_tuples(spec),
        checkpoint_steps=spec.checkpoint_steps(),
        metrics={
            **METRIC_DIRECTIONS,
            "target_gain": "max",
            "forgetting": "min",
            "stress_gain": "max",
            "tail": "min",
            "cost": "min",
        },
        secondary_diagnostics=(
            "full-update energy rank r_0.9 per layer and checkpoint",
            "tail of the full update at rank r",
            "update overlap",
        ),
        pooling="none: block a decides; block b is reported beside it",
        early_stopping="none: fixed steps; the checkpoint is chosen among the declared steps "
        "on the target validation loss (ties: earliest)",
        gates=gates,
        tie_break=(("cost", "min"), ("configured_rank", "min")),
        revisions={"code": "gaugelab", "spec": spec.identity()[:16]},
        planned_outputs=(
            "candidate table",
            "checkpoint table",
            "paired contrasts",
            "energy-rank table and figure",
            "Pareto figure",
            "one test report",
        ),
    )


def _shared_fields(spec: LearnForgetSpec, block: str) -> dict[str, Any]:
    """The manifest fields every candidate of ``block`` shares with its base: the base model,
    tokenizer, precision and target data, the validation and test splits, the revisions."""
    p = spec.finetune.pretrain
    val = split_ids(spec, block, "val")
    revision = metric_revision(spec)
    return dict(
        base_model_id=p.identity()[:16],
        tokenizer_id=_corpus_digest(p.corpus, "retention")[:16],
        dropout=0.0,
        precision=p.dtype,
        clipping=None,
        data_hash=_corpus_digest(spec.block_corpus(block), "target")[:16],
        target_validation=val[0],
        target_metric_revision=revision,
        retention_validation=val[1],
        retention_metric_revision=revision,
        stress_validation=val[2],
        stress_metric_revision=revision,
        test_splits=split_ids(spec, block, "test"),
        probe_ids=(),
        peak_memory_accounting=PEAK_MEMORY_NOT_MEASURED,
    )


def candidate_manifest(run_spec: LearnForgetSpec, trainable: int) -> CandidateManifest:
    """The immutable manifest of a run's candidate (§0x0BG's fourteen field groups)."""
    ft = run_spec.run_finetune()
    method, rank = run_spec.candidate_method()
    lora = rank is not None
    return CandidateManifest(
        **_shared_fields(run_spec, run_spec.block),
        candidate_id=run_spec.candidate,
        method=method,
        rank=rank,
        target_modules=tuple(ft.targets) if lora else (),
        alpha=ft.alpha(rank) if lora else None,
        init=ft.init if lora else "pretrained",
        optimizer="adamw",
        schedule=f"warm-up {ft.warmup}, cosine to 0.1, lr {ft.lr if lora else ft.full_lr:g}",
        sample_order="torch.Generator(seed) per seed",
        token_budget=ft.steps * ft.batch_size * ft.pretrain.corpus.block_size,
        seeds=tuple(ft.seeds),
        checkpoint_steps=run_spec.checkpoint_steps(),
        checkpoint_rule="min target validation loss, ties earliest",
        trainable_parameters=trainable,
        optimizer_state_numel=2 * trainable,
    )


def base_manifest(spec: LearnForgetSpec, block: str) -> CandidateManifest:
    """The base candidate's manifest: the pretrained model, nothing trained (the deterministic
    baseline record of its block, §0x0CF; not a training unit)."""
    return CandidateManifest(
        **_shared_fields(spec, block),
        candidate_id="base",
        method="base",
        rank=None,
        target_modules=(),
        alpha=None,
        init="pretrained",
        optimizer="none",
        schedule="none",
        sample_order="none",
        token_budget=0,
        seeds=(),
        checkpoint_steps=(0,),
        checkpoint_rule="the pretrained weights",
        trainable_parameters=0,
        optimizer_state_numel=0,
    )
