"""The frozen inputs of candidate selection: the refusal type, metric declarations and their
orientation (target gain, forgetting), and the immutable run manifest of one candidate.

Re-exported by :mod:`gaugelab.study.release.selection`; the evidence records are in
:mod:`gaugelab.study.release.evidence`, the decision in :mod:`gaugelab.study.release.selection`.

Source: seed 003 §0x0BB (target gain, forgetting), §0x0BG (the immutable run manifest), §0x0BL
(forgetting names a baseline and a direction).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from types import MappingProxyType
from typing import Any, Literal

from gaugelab.study.stats.pareto import DIRECTIONS, Direction

__all__ = [
    "DIRECTIONS",
    "KERNEL_BUNDLE_FIELDS",
    "MANIFEST_GROUPS",
    "METHODS",
    "OPERATIONAL_METRICS",
    "PEAK_MEMORY_NOT_MEASURED",
    "TAIL_CONVENTIONS",
    "CandidateManifest",
    "Direction",
    "MetricDeclaration",
    "SelectionError",
    "canonical_digest",
    "forgetting",
    "oriented",
    "target_gain",
]

METHODS: tuple[str, ...] = ("base", "full", "lora", "rslora")
"""Candidate methods: ``base`` (the frozen base model, no update), ``full`` fine-tuning, ``lora``
(``s = α/r``) and ``rslora`` (``s = α/√r``)."""
OPERATIONAL_METRICS: tuple[str, ...] = ("target", "retention", "stress")
TAIL_CONVENTIONS: tuple[str, ...] = ("relative", "absolute")
KERNEL_BUNDLE_FIELDS: tuple[str, ...] = (
    "linearization_residual",
    "jacobian_drift",
    "kernel_drift",
    "kernel_alignment",
)
"""The numeric fields a complete kernel bundle records (seed 003 §0x0BN, §0x09J: ``R_lin``,
``D_J``, ``D_K``, ``A_K``; :mod:`gaugelab.lowrank.kernels.explanation`)."""
_HEX64 = re.compile(r"[0-9a-f]{64}")


class SelectionError(ValueError):
    """A candidate-selection input refused (fail closed): a missing, non-finite or mixed-revision
    metric, an unknown direction, a duplicate id, a theorem rank used as a selector, a test
    split among the validation splits, … (seed 003 §0x0BU)."""


def _jsonable(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    return obj


def canonical_digest(obj: Any) -> str:
    """sha256 hex of the canonical JSON of a dataclass / mapping / sequence tree (keys sorted,
    compact separators, UTF-8; non-finite floats as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``)."""
    text = json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _fail(fn: str, arg: str, value: object, allowed: str) -> SelectionError:
    return SelectionError(f"{fn}: {arg}={value!r}; allowed: {allowed}")


def _direction(fn: str, direction: object) -> str:
    if direction not in DIRECTIONS:
        raise _fail(fn, "direction", direction, "'max' (higher is better) or 'min'")
    return str(direction)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _frozen_map(obj: object, name: str, value: Mapping) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"{type(obj).__name__}: {name}={value!r}; allowed: a mapping")
    object.__setattr__(obj, name, MappingProxyType(dict(value)))


def _text(fn: str, arg: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(fn, arg, value, "a non-empty string")


# --------------------------------------------------------------------------------------------
# Metric declarations and orientation (§0x0BB, §0x0BL)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MetricDeclaration:
    """A validation metric's frozen contract: its name, direction, split and revision.

    Attributes:
        name: one of ``target``, ``retention``, ``stress``.
        direction: ``"max"`` (higher is better, e.g. accuracy) or ``"min"`` (a loss).
        split: the validation split id the metric is computed on.
        revision: the metric (suite) revision; every record must carry the same one.
        unit: free text, e.g. ``"nats/token"``, ``"% accuracy"``.

    Raises:
        SelectionError: unknown name or direction; empty split or revision.
    """

    name: str
    direction: Direction
    split: str = "validation"
    revision: str
    unit: str = ""

    def __post_init__(self) -> None:
        if self.name not in OPERATIONAL_METRICS:
            raise _fail("MetricDeclaration", "name", self.name, ", ".join(OPERATIONAL_METRICS))
        _direction("MetricDeclaration", self.direction)
        _text("MetricDeclaration", "split", self.split)
        _text("MetricDeclaration", "revision", self.revision)


def oriented(value: float, direction: Direction) -> float:
    """The higher-is-better form of a metric value: ``value`` for ``"max"``, ``-value`` for
    ``"min"``; lower-is-better metrics are oriented before any differencing (seed 003 §0x0BB).

    Raises:
        SelectionError: unknown direction.
    """
    return float(value) if _direction("oriented", direction) == "max" else -float(value)


def target_gain(candidate: float, base: float, direction: Direction) -> float:
    """Target gain against the frozen base: ``G_i = S_i − S_0`` (max), ``L_0 − L_i`` (min).

    Positive is better. Also the stress gain ``U_i − U_0``. Source: seed 003 §0x0BB.

    Raises:
        SelectionError: unknown direction.
    """
    _direction("target_gain", direction)
    return oriented(candidate, direction) - oriented(base, direction)


def forgetting(candidate: float, base: float, direction: Direction) -> float:
    """Forgetting against the frozen base: ``F_i = R_0 − R_i`` (max), ``L_i − L_0`` (min).

    Positive means the candidate retained less (base 90, candidate 85 → 5). Source: seed 003
    §0x0BB, §0x0BL.

    Raises:
        SelectionError: unknown direction.
    """
    _direction("forgetting", direction)
    return oriented(base, direction) - oriented(candidate, direction)


# --------------------------------------------------------------------------------------------
# The immutable run manifest (§0x0BG)
# --------------------------------------------------------------------------------------------

_VALIDATION_FIELDS = tuple(
    f"{m}_{part}" for m in OPERATIONAL_METRICS for part in ("validation", "metric_revision")
)
"""``target_validation``, ``target_metric_revision``, …: each metric's split and revision."""
_MANIFEST_TEXT = (
    "candidate_id",
    "base_model_id",
    "tokenizer_id",
    "init",
    "optimizer",
    "schedule",
    "precision",
    "data_hash",
    "sample_order",
    "checkpoint_rule",
    *_VALIDATION_FIELDS,
    "peak_memory_accounting",
)


PEAK_MEMORY_NOT_MEASURED = "not measured"
"""The peak-memory accounting of a run that records no peak: its post-training
:class:`~gaugelab.study.release.evidence.Cost` has ``peak_mib=None``."""

MANIFEST_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("candidate_id", ("candidate_id",)),
    ("base_model_id / tokenizer_id", ("base_model_id", "tokenizer_id")),
    ("method / configured rank / target-module surface", ("method", "rank", "target_modules")),
    ("alpha / dropout / initialization", ("alpha", "dropout", "init")),
    (
        "optimizer / schedule / precision / clipping",
        ("optimizer", "schedule", "precision", "clipping"),
    ),
    (
        "train dataset payload hash / sample order / token budget",
        ("data_hash", "sample_order", "token_budget"),
    ),
    ("seed / world size / gradient accumulation", ("seeds", "world_size", "grad_accumulation")),
    ("checkpoint cadence / selection rule", ("checkpoint_steps", "checkpoint_rule")),
    (
        "target-validation split and metric revision",
        ("target_validation", "target_metric_revision"),
    ),
    (
        "retention-validation split and metric revision",
        ("retention_validation", "retention_metric_revision"),
    ),
    (
        "stress-validation split and metric revision",
        ("stress_validation", "stress_metric_revision"),
    ),
    ("held-out test split identities", ("test_splits",)),
    ("diagnostic probe identities", ("probe_ids",)),
    (
        "trainable-state and peak-memory accounting",
        ("trainable_parameters", "optimizer_state_numel", "peak_memory_accounting"),
    ),
)
"""The fourteen groups of §0x0BG, each the seed's line with the :class:`CandidateManifest` fields
that hold it; together they are every field of the manifest."""


@dataclass(frozen=True, kw_only=True)
class CandidateManifest:
    """One candidate pipeline, frozen before training (seed 003 §0x0BG's fourteen groups).

    "Rank without surface is incomplete": the candidate is the method, rank, target-module
    surface, scale, initialisation, optimizer, schedule and data budget together. Strings are
    identities (model ids, payload hashes, split ids including their revision). The groups and
    their fields are :data:`MANIFEST_GROUPS`; :meth:`digest` covers every field.

    Attributes:
        candidate_id, base_model_id, tokenizer_id: identities.
        method: one of :data:`METHODS`; rank: configured LoRA rank (``None`` for base / full).
        target_modules: the adapted surface (stored sorted; non-empty for LoRA methods).
        alpha: LoRA ``α`` (``None`` for base / full); dropout in ``[0, 1)``; init: the
            initialisation rule.
        optimizer, schedule, precision: names; clipping: gradient-norm clip or ``None``.
        data_hash, sample_order: payload hash and order id; token_budget: training tokens.
        seeds, world_size, grad_accumulation: the run's seeds and parallel layout.
        checkpoint_steps: ascending checkpoint cadence (steps); checkpoint_rule: the
            validation-only selection rule's name.
        target_validation, retention_validation, stress_validation: validation split ids.
        target_metric_revision, retention_metric_revision, stress_metric_revision: the revision
            of the metric computed on each split; every record of the candidate carries it.
        test_splits: held-out split ids, disjoint from the validation and probe ids.
        probe_ids: diagnostic probe identities (distinct; may be empty).
        trainable_parameters, optimizer_state_numel: trainable-state accounting (elements).
        peak_memory_accounting: the pinned contract under which the run's peak memory is
            measured (device, allocator counter, phases included — a transient initialization
            peak counts, §0x0AU), or :data:`PEAK_MEMORY_NOT_MEASURED`; the measured peak itself
            is on the post-training record (``Cost.peak_mib``), never inferred from rank.

    Raises:
        SelectionError: unknown method; rank not ``None`` for base / full or not ≥ 1 for LoRA;
            alpha missing for LoRA; an empty surface for LoRA; an empty identity, name, rule,
            split, revision or accounting; a test split among the validation or probe ids; a
            negative count; repeated seeds, modules, steps or probe ids.
    """

    candidate_id: str
    base_model_id: str
    tokenizer_id: str
    method: Literal["base", "full", "lora", "rslora"]
    rank: int | None
    target_modules: tuple[str, ...]
    alpha: float | None
    dropout: float
    init: str
    optimizer: str
    schedule: str
    precision: str
    clipping: float | None
    data_hash: str
    sample_order: str
    token_budget: int
    seeds: tuple[int, ...]
    world_size: int = 1
    grad_accumulation: int = 1
    checkpoint_steps: tuple[int, ...]
    checkpoint_rule: str
    target_validation: str
    target_metric_revision: str
    retention_validation: str
    retention_metric_revision: str
    stress_validation: str
    stress_metric_revision: str
    test_splits: tuple[str, ...]
    probe_ids: tuple[str, ...]
    trainable_parameters: int
    optimizer_state_numel: int
    peak_memory_accounting: str

    def __post_init__(self) -> None:
        fn = "CandidateManifest"
        for name in _MANIFEST_TEXT:
            _text(fn, name, getattr(self, name))
        if self.method not in METHODS:
            raise _fail(fn, "method", self.method, ", ".join(METHODS))
        lora = self.method in ("lora", "rslora")
        if lora and not (_is_int(self.rank) and self.rank >= 1):
            raise _fail(fn, "rank", self.rank, f"an integer ≥ 1 for method {self.method!r}")
        if not lora and self.rank is not None:
            raise _fail(fn, "rank", self.rank, f"None for method {self.method!r}")
        if lora and not (isinstance(self.alpha, int | float) and self.alpha > 0):
            raise _fail(fn, "alpha", self.alpha, f"a number > 0 for method {self.method!r}")
        if not lora and self.alpha is not None:
            raise _fail(fn, "alpha", self.alpha, f"None for method {self.method!r}")
        modules = tuple(self.target_modules)
        if len(set(modules)) != len(modules) or (lora and not modules):
            raise _fail(fn, "target_modules", modules, "distinct names, non-empty for LoRA")
        object.__setattr__(self, "target_modules", tuple(sorted(modules)))
        if not 0.0 <= self.dropout < 1.0:
            raise _fail(fn, "dropout", self.dropout, "a number in [0, 1)")
        if self.clipping is not None and not self.clipping > 0:
            raise _fail(fn, "clipping", self.clipping, "None or a number > 0")
        for name in ("token_budget", "trainable_parameters", "optimizer_state_numel"):
            if not (_is_int(getattr(self, name)) and getattr(self, name) >= 0):
                raise _fail(fn, name, getattr(self, name), "an integer ≥ 0")
        for name in ("world_size", "grad_accumulation"):
            if not (_is_int(getattr(self, name)) and getattr(self, name) >= 1):
                raise _fail(fn, name, getattr(self, name), "an integer ≥ 1")
        seeds = tuple(self.seeds)
        if not all(map(_is_int, seeds)) or len(set(seeds)) != len(seeds):
            raise _fail(fn, "seeds", seeds, "distinct integers")
        steps = tuple(self.checkpoint_steps)
        if not all(_is_int(s) and s >= 0 for s in steps) or list(steps) != sorted(set(steps)):
            raise _fail(fn, "checkpoint_steps", steps, "strictly increasing integers ≥ 0")
        validation = (self.target_validation, self.retention_validation, self.stress_validation)
        probes = tuple(self.probe_ids)
        if not all(isinstance(p, str) and p for p in probes) or len(set(probes)) != len(probes):
            raise _fail(fn, "probe_ids", probes, "distinct non-empty ids (or none)")
        tests = tuple(self.test_splits)
        if not tests or not all(isinstance(t, str) and t for t in tests):
            raise _fail(fn, "test_splits", tests, "a non-empty tuple of split ids")
        leaked = sorted(set(tests) & (set(validation) | set(probes)))
        if leaked:
            raise _fail(
                fn,
                "test_splits",
                tests,
                f"ids disjoint from validation and probe ids (shared: {', '.join(leaked)})",
            )
        for name in ("seeds", "checkpoint_steps", "test_splits", "probe_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def metric_revisions(self) -> dict[str, str]:
        """Operational metric → the metric revision this manifest froze for its split."""
        return {m: getattr(self, f"{m}_metric_revision") for m in OPERATIONAL_METRICS}

    @property
    def configured_rank_or_inf(self) -> float:
        """The configured rank, ``inf`` for base / full (no configured rank, §0x0BU)."""
        return math.inf if self.rank is None else float(self.rank)

    def digest(self) -> str:
        """sha256 hex of the manifest's canonical JSON (the candidate's identity)."""
        return canonical_digest(self)
