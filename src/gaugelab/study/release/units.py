"""The objects of an experimental design: nuisance tuples, blocks, candidate pipelines, training
units and base-baseline records (seed 003 §0x0CE–0x0CF), with their canonical-JSON identities.

Re-exported by :mod:`gaugelab.study.release.design`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "METHODS",
    "BaselineRecord",
    "Block",
    "CandidatePipeline",
    "NuisanceTuple",
    "TrainingUnit",
    "canonical_json",
    "sha256_hex",
]

METHODS: tuple[str, ...] = ("full", "lora", "rslora")
"""Candidate methods: full fine-tuning, LoRA with ``s = α/r``, rsLoRA with ``s = α/√r``."""


def canonical_json(obj: Any) -> str:
    """The canonical JSON text of ``obj`` (sorted keys, no spaces, UTF-8 kept)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(obj: Any) -> str:
    """``sha256`` hex digest of :func:`canonical_json` of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def _text(owner: str, name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{owner}: {name}={value!r}; allowed: a non-empty string")
    return value


def _seed(owner: str, name: str, value: object, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        allowed = "an integer >= 0" + (" or None" if optional else "")
        raise ValueError(f"{owner}: {name}={value!r}; allowed: {allowed}")
    return value


def _names(owner: str, name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not value:
        raise ValueError(f"{owner}: {name}={value!r}; allowed: a non-empty tuple of strings")
    items = tuple(value)
    for item in items:
        _text(owner, name, item)
    if len(set(items)) != len(items):
        dupes = sorted({x for x in items if items.count(x) > 1})
        raise ValueError(f"{owner}: {name} repeats {dupes}; allowed: distinct names")
    return items


@dataclass(frozen=True)
class NuisanceTuple:
    """One nuisance tuple ``s = (s_init, s_order, s_dropout)`` shared by every candidate.

    Attributes:
        init_seed: seed of the trainable-state initialization (integer >= 0).
        order_seed: seed of the data order (integer >= 0).
        dropout_seed: seed of the dropout masks; ``None`` when the pipeline has no dropout.

    Raises:
        ValueError: a seed is not an integer >= 0 (``dropout_seed`` may be ``None``).

    Source: seed 003 §0x0CE (the unit ``u = (c, b, s_init, s_order, s_dropout, j)``).
    """

    init_seed: int
    order_seed: int
    dropout_seed: int | None

    def __post_init__(self) -> None:
        _seed("NuisanceTuple", "init_seed", self.init_seed)
        _seed("NuisanceTuple", "order_seed", self.order_seed)
        _seed("NuisanceTuple", "dropout_seed", self.dropout_seed, optional=True)

    @property
    def label(self) -> str:
        """``"init=0,order=1,dropout=none"``: the tuple as one readable token."""
        dropout = "none" if self.dropout_seed is None else str(self.dropout_seed)
        return f"init={self.init_seed},order={self.order_seed},dropout={dropout}"

    def to_dict(self) -> dict[str, int | None]:
        """``{"init_seed", "order_seed", "dropout_seed"}``."""
        return {
            "init_seed": self.init_seed,
            "order_seed": self.order_seed,
            "dropout_seed": self.dropout_seed,
        }


@dataclass(frozen=True)
class Block:
    """A frozen experimental block: what every candidate inside it shares.

    Attributes:
        name: block identity (unique within a design).
        domain: the target domain (e.g. ``"python-stdlib-source"``).
        regime: training regime (e.g. ``"continued-pretraining"``).
        data_budget: training tokens per unit (integer >= 1).
        target_surface: module names that candidates of this block may adapt (non-empty).
        data_revision, tokenizer_revision: digests or revision names of the data and tokenizer.
        base_checkpoint: identity of the base model every unit starts from.
        evaluator_revision: identity of the evaluation code and metric implementations.

    Raises:
        ValueError: an empty string, ``data_budget < 1``, or an empty / repeating surface.

    Source: seed 003 §0x0CE (the block includes domain, regime, data budget, target surface,
    tokenizer/data revisions, base checkpoint and evaluator revision).
    """

    name: str
    domain: str
    regime: str
    data_budget: int
    target_surface: tuple[str, ...]
    data_revision: str
    tokenizer_revision: str
    base_checkpoint: str
    evaluator_revision: str

    def __post_init__(self) -> None:
        for field in ("name", "domain", "regime", "data_revision", "tokenizer_revision"):
            _text("Block", field, getattr(self, field))
        _text("Block", "base_checkpoint", self.base_checkpoint)
        _text("Block", "evaluator_revision", self.evaluator_revision)
        budget = self.data_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"Block: data_budget={budget!r}; allowed: training tokens, >= 1")
        object.__setattr__(
            self, "target_surface", _names("Block", "target_surface", self.target_surface)
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``target_surface`` as a list."""
        return {
            "name": self.name,
            "domain": self.domain,
            "regime": self.regime,
            "data_budget": self.data_budget,
            "target_surface": list(self.target_surface),
            "data_revision": self.data_revision,
            "tokenizer_revision": self.tokenizer_revision,
            "base_checkpoint": self.base_checkpoint,
            "evaluator_revision": self.evaluator_revision,
        }


@dataclass(frozen=True)
class CandidatePipeline:
    """One candidate: the whole treatment pipeline ``c = (r, T, s(r), O, I, Q)``, not a rank.

    Attributes:
        candidate_id: identity (unique within a design).
        method: ``"full"`` (full fine-tuning), ``"lora"`` (``s = α/r``) or ``"rslora"``
            (``s = α/√r``).
        rank: configured LoRA rank ``r >= 1``; ``None`` for ``"full"``.
        targets: the target set ``T`` (module names; for ``"full"`` the trained parameter
            groups, e.g. ``("all",)``).
        scale: the branch scale ``s(r)`` as a number (finite, > 0); ``None`` for ``"full"``.
        optimizer: optimizer and schedule ``O`` as one declared string.
        init: initialization ``I`` (e.g. ``"gaussian-A/zero-B"``).
        base_representation: base weights' representation ``Q`` (``"float32"``, a quantized
            format, …).

    Raises:
        ValueError: unknown method; a rank or scale given for ``"full"`` or missing for LoRA;
            ``rank < 1``; a non-finite or non-positive scale; empty strings or targets.

    Source: seed 003 §0x0CE ("the treatment is the whole pipeline"; calling the contrast a
    pure rank effect is wrong unless every other coordinate is fixed).
    """

    candidate_id: str
    method: Literal["full", "lora", "rslora"]
    rank: int | None
    targets: tuple[str, ...]
    scale: float | None
    optimizer: str
    init: str
    base_representation: str = "float32"

    def __post_init__(self) -> None:
        owner = "CandidatePipeline"
        _text(owner, "candidate_id", self.candidate_id)
        if self.method not in METHODS:
            raise ValueError(f"{owner}: method={self.method!r}; allowed: {', '.join(METHODS)}")
        if self.method == "full":
            if self.rank is not None or self.scale is not None:
                raise ValueError(
                    f"{owner}: {self.candidate_id}: method='full' with rank={self.rank!r}, "
                    f"scale={self.scale!r}; allowed: rank=None and scale=None"
                )
        else:
            r = self.rank
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise ValueError(f"{owner}: {self.candidate_id}: rank={r!r}; allowed: >= 1")
            s = self.scale
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
                raise ValueError(f"{owner}: {self.candidate_id}: scale={s!r}; allowed: finite")
            if s <= 0:
                raise ValueError(f"{owner}: {self.candidate_id}: scale={s!r}; allowed: > 0")
            object.__setattr__(self, "scale", float(s))
        object.__setattr__(self, "targets", _names(owner, "targets", self.targets))
        for field in ("optimizer", "init", "base_representation"):
            _text(owner, field, getattr(self, field))

    @property
    def configured_rank_or_inf(self) -> float:
        """The configured rank as a float, ``inf`` for full fine-tuning (the seed's tie-break
        ``configured_rank_or_infinity``, §0x0BU)."""
        return math.inf if self.rank is None else float(self.rank)

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``targets`` as a list."""
        return {
            "candidate_id": self.candidate_id,
            "method": self.method,
            "rank": self.rank,
            "targets": list(self.targets),
            "scale": self.scale,
            "optimizer": self.optimizer,
            "init": self.init,
            "base_representation": self.base_representation,
        }


@dataclass(frozen=True)
class TrainingUnit:
    """One training unit ``(c, b, s)``; its checkpoints ``j`` are the design's steps.

    Attributes:
        candidate_id: the candidate pipeline's id.
        block: the block's name.
        nuisance: the nuisance tuple.

    Source: seed 003 §0x0CE (the unit), §0x0CI (``run_id = candidate + block + nuisance``).
    """

    candidate_id: str
    block: str
    nuisance: NuisanceTuple

    @property
    def run_id(self) -> str:
        """The immutable run identity: ``sha256`` hex of the canonical JSON of candidate id,
        block name and nuisance tuple. Every attempt of the unit carries it."""
        return sha256_hex(
            {
                "candidate": self.candidate_id,
                "block": self.block,
                "nuisance": self.nuisance.to_dict(),
            }
        )


@dataclass(frozen=True)
class BaselineRecord:
    """The block's base-checkpoint evaluation: one deterministic record, not a training unit
    and not a replicate (it has no candidate and no nuisance tuple).

    Attributes:
        block: the block's name.
        base_checkpoint: the base model evaluated.
        evaluator_revision: the evaluator that scores it.

    Source: seed 003 §0x0CF (the base checkpoint is a deterministic baseline record rather than
    a fake training replicate), §0x0CK (two block-specific records, not counted as units).
    """

    block: str
    base_checkpoint: str
    evaluator_revision: str

    @property
    def record_id(self) -> str:
        """``sha256`` hex of the canonical JSON of the baseline's three fields."""
        return sha256_hex(
            {
                "baseline": self.block,
                "base_checkpoint": self.base_checkpoint,
                "evaluator_revision": self.evaluator_revision,
            }
        )
