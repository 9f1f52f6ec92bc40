"""The immutable experimental-design manifest (seed 003 §0x0CJ). Re-exported by
:mod:`gaugelab.study.release.design`."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from gaugelab.study.release.units import (
    BaselineRecord,
    Block,
    CandidatePipeline,
    NuisanceTuple,
    TrainingUnit,
    sha256_hex,
)
from gaugelab.study.stats.pareto import Direction

__all__ = [
    "CONFIGURED_RANK",
    "DESIGN_SCHEMA",
    "MISSING_CELL_POLICIES",
    "DesignManifest",
    "Direction",
]

DESIGN_SCHEMA = "gaugelab.study.release.design/1"
"""Schema tag inside every digest: a schema change is a new digest."""

MISSING_CELL_POLICIES: tuple[str, ...] = ("keep-incomplete", "fail-closed")
"""``keep-incomplete``: an incomplete pair stays incomplete and is reported, never substituted;
``fail-closed``: any missing cell blocks selection."""

_DIRECTIONS = ("max", "min")
CONFIGURED_RANK = "configured_rank"
"""The tie-break key of the candidate coordinate ``configured_rank_or_inf`` (not a metric)."""


def _strings(name: str, value: object, *, empty: bool = False) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or (not value and not empty):
        need = "a tuple of strings" if empty else "a non-empty tuple of strings"
        raise ValueError(f"DesignManifest: {name}={value!r}; allowed: {need}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"DesignManifest: {name} holds {item!r}; allowed: non-empty strings")
    return items


def _objects(name: str, value: object, cls: type, key: Any) -> tuple:
    if not isinstance(value, (tuple, list)) or not value:
        raise ValueError(
            f"DesignManifest: {name} is empty or not a tuple; allowed: >= 1 {cls.__name__}"
        )
    items = tuple(value)
    for item in items:
        if not isinstance(item, cls):
            raise ValueError(
                f"DesignManifest: {name} holds {type(item).__name__}; allowed: {cls.__name__}"
            )
    keys = [key(x) for x in items]
    dupes = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dupes:
        raise ValueError(f"DesignManifest: {name} repeats {dupes}; allowed: distinct entries")
    return items


def _text_map(name: str, value: object) -> MappingProxyType:
    if not isinstance(value, Mapping):
        raise ValueError(f"DesignManifest: {name}={value!r}; allowed: a mapping str → str")
    for k, v in value.items():
        if not isinstance(k, str) or not k or not isinstance(v, str) or not v:
            raise ValueError(f"DesignManifest: {name}[{k!r}]={v!r}; allowed: non-empty strings")
    return MappingProxyType(dict(sorted(value.items())))


def _bound(name: str, v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"DesignManifest: gates[{name!r}] bound {v!r}; allowed: finite or None")
    return float(v)


@dataclass(frozen=True, kw_only=True)
class DesignManifest:
    """The immutable design of one rank study, frozen before the first outcome.

    Attributes:
        question: the question the study answers.
        estimands: primary estimands (e.g. ``"paired target-gain contrast per block"``).
        non_claims: what the study does not claim (at least one).
        candidates: the candidate family (distinct ``candidate_id``).
        blocks: the blocks (distinct ``name``).
        nuisance: the paired nuisance tuples every candidate shares (distinct).
        checkpoint_steps: predeclared validation checkpoints, strictly increasing steps >= 1
            (step 0 would be the base: a baseline record, not a replicate).
        metrics: metric name → ``"max"`` (higher is better) or ``"min"``; stored sorted.
        missing_cell_policy: one of :data:`MISSING_CELL_POLICIES`.
        retry_policy: ``"infrastructure-only"`` (the only one allowed).
        test_access: ``"closed"``: the held-out test is opened once, after the freeze.
        secondary_diagnostics: diagnostics recorded but not estimands.
        pooling: which conclusions may pool across blocks (``"none"``: every one is per block).
        pairing: ``"shared-nuisance-tuples"``: contrasts pair on identical tuples.
        early_stopping: the predeclared, validation-only rule (``"none"``, or monitor,
            direction, patience, minimum delta, warmup and maximum step as one string).
        gates: metric → ``(lo, hi)`` inclusive bounds (either ``None``), the product gates.
        tie_break: ``((metric, direction), …)`` after the gates, each direction the metric's
            own, or ``("configured_rank", "min")`` (the candidate's ``configured_rank_or_inf``
            ascending, §0x0BU); any tie left is broken by ``candidate_id``.
        tuning_budget: the tuning budget allotted to every candidate.
        uncertainty: the uncertainty procedure and its sampling level.
        revisions: split, contamination, code and other revisions (name → identity).
        environment: environment, dependency, kernel and hardware identities.
        planned_outputs: planned tables and figures, exclusions, evidence-class labels.

    Raises:
        ValueError: an empty set; duplicate candidate ids, block names or nuisance tuples;
            an unknown metric direction; checkpoint steps that are empty, not integers,
            below 1 or not strictly increasing; an unknown policy; ``test_access`` not
            ``"closed"``; a gate or tie-break on an undeclared metric, a tie-break against its
            metric's direction, or a gate with ``lo > hi``. The message names the field.

    Source: seed 003 §0x0CJ (the manifest), §0x0CE (units), §0x0CH (directions, gates, tuning
    budget, tie-break and missing-run policy before selection).
    """

    question: str
    estimands: tuple[str, ...]
    non_claims: tuple[str, ...]
    candidates: tuple[CandidatePipeline, ...]
    blocks: tuple[Block, ...]
    nuisance: tuple[NuisanceTuple, ...]
    checkpoint_steps: tuple[int, ...]
    metrics: Mapping[str, Direction]
    missing_cell_policy: Literal["keep-incomplete", "fail-closed"] = "keep-incomplete"
    retry_policy: Literal["infrastructure-only"] = "infrastructure-only"
    test_access: Literal["closed"] = "closed"
    secondary_diagnostics: tuple[str, ...] = ()
    pooling: str = "none"
    pairing: Literal["shared-nuisance-tuples"] = "shared-nuisance-tuples"
    early_stopping: str = "none"
    gates: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    tie_break: tuple[tuple[str, Direction], ...] = ()
    tuning_budget: str = "one configuration per candidate, no search"
    uncertainty: str = (
        "paired run-level sample variance (n - 1) and descriptive range over nuisance tuples"
    )
    revisions: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    planned_outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        put = object.__setattr__
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"DesignManifest: question={self.question!r}; allowed: non-empty")
        for name in ("estimands", "non_claims"):
            put(self, name, _strings(name, getattr(self, name)))
        for name in ("secondary_diagnostics", "planned_outputs"):
            put(self, name, _strings(name, getattr(self, name), empty=True))
        for name in ("pooling", "early_stopping", "tuning_budget", "uncertainty"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"DesignManifest: {name}={v!r}; allowed: a non-empty string")
        put(
            self,
            "candidates",
            _objects("candidates", self.candidates, CandidatePipeline, lambda c: c.candidate_id),
        )
        put(self, "blocks", _objects("blocks", self.blocks, Block, lambda b: b.name))
        put(self, "nuisance", _objects("nuisance", self.nuisance, NuisanceTuple, lambda s: s))
        self._check_steps()
        self._check_metrics()
        for name, value, allowed in (
            ("missing_cell_policy", self.missing_cell_policy, MISSING_CELL_POLICIES),
            ("retry_policy", self.retry_policy, ("infrastructure-only",)),
            ("test_access", self.test_access, ("closed",)),
            ("pairing", self.pairing, ("shared-nuisance-tuples",)),
        ):
            if value not in allowed:
                raise ValueError(f"DesignManifest: {name}={value!r}; allowed: {', '.join(allowed)}")
        put(self, "revisions", _text_map("revisions", self.revisions))
        put(self, "environment", _text_map("environment", self.environment))

    def _check_steps(self) -> None:
        steps = self.checkpoint_steps
        if isinstance(steps, (str, bytes)) or not isinstance(steps, (tuple, list)) or not steps:
            raise ValueError(f"DesignManifest: checkpoint_steps={steps!r}; allowed: >= 1 step")
        for j in steps:
            if isinstance(j, bool) or not isinstance(j, int) or j < 1:
                raise ValueError(
                    f"DesignManifest: checkpoint_steps holds {j!r}; allowed: integers >= 1 "
                    "(the base checkpoint is a baseline record, not step 0 of a unit)"
                )
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise ValueError(
                f"DesignManifest: checkpoint_steps={tuple(steps)}; allowed: strictly increasing"
            )
        object.__setattr__(self, "checkpoint_steps", tuple(steps))

    def _check_metrics(self) -> None:
        put = object.__setattr__
        if not isinstance(self.metrics, Mapping) or not self.metrics:
            raise ValueError(f"DesignManifest: metrics={self.metrics!r}; allowed: >= 1 metric")
        for k, v in self.metrics.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"DesignManifest: metrics key {k!r}; allowed: non-empty names")
            if v not in _DIRECTIONS:
                raise ValueError(f"DesignManifest: metrics[{k!r}]={v!r}; allowed: max, min")
        put(self, "metrics", MappingProxyType(dict(sorted(self.metrics.items()))))
        if not isinstance(self.gates, Mapping):
            raise ValueError(f"DesignManifest: gates={self.gates!r}; allowed: metric → (lo, hi)")
        gates = {}
        for k, bounds in sorted(self.gates.items()):
            if k not in self.metrics:
                raise ValueError(
                    f"DesignManifest: gates[{k!r}]: not a declared metric; declared: "
                    + ", ".join(self.metrics)
                )
            if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
                raise ValueError(f"DesignManifest: gates[{k!r}]={bounds!r}; allowed: (lo, hi)")
            lo, hi = _bound(k, bounds[0]), _bound(k, bounds[1])
            if (lo is None and hi is None) or (lo is not None and hi is not None and lo > hi):
                raise ValueError(
                    f"DesignManifest: gates[{k!r}]={bounds!r}; allowed: lo ≤ hi, at least one bound"
                )
            gates[k] = (lo, hi)
        put(self, "gates", MappingProxyType(gates))
        order = tuple(tuple(t) for t in self.tie_break)
        for entry in order:
            if entry == (CONFIGURED_RANK, "min"):
                continue
            if len(entry) != 2 or entry[0] not in self.metrics:
                raise ValueError(
                    f"DesignManifest: tie_break entry {entry!r}; allowed: (declared metric, its "
                    f"direction) or ('{CONFIGURED_RANK}', 'min'); declared: "
                    + ", ".join(self.metrics)
                )
            if entry[1] != self.metrics[entry[0]]:
                raise ValueError(
                    f"DesignManifest: tie_break {entry!r} against metrics[{entry[0]!r}]="
                    f"{self.metrics[entry[0]]!r}; allowed: the metric's declared direction"
                )
        if len({m for m, _ in order}) != len(order):
            raise ValueError(f"DesignManifest: tie_break={order!r} repeats a metric")
        put(self, "tie_break", order)

    def __hash__(self) -> int:
        return hash(self.digest())

    def to_dict(self) -> dict[str, Any]:
        """The manifest as plain JSON values (the object :meth:`digest` hashes)."""
        return {
            "schema": DESIGN_SCHEMA,
            "question": self.question,
            "estimands": list(self.estimands),
            "non_claims": list(self.non_claims),
            "secondary_diagnostics": list(self.secondary_diagnostics),
            "candidates": [c.to_dict() for c in self.candidates],
            "blocks": [b.to_dict() for b in self.blocks],
            "nuisance": [s.to_dict() for s in self.nuisance],
            "checkpoint_steps": list(self.checkpoint_steps),
            "metrics": dict(self.metrics),
            "missing_cell_policy": self.missing_cell_policy,
            "retry_policy": self.retry_policy,
            "test_access": self.test_access,
            "pooling": self.pooling,
            "pairing": self.pairing,
            "early_stopping": self.early_stopping,
            "gates": {k: list(v) for k, v in self.gates.items()},
            "tie_break": [list(t) for t in self.tie_break],
            "tuning_budget": self.tuning_budget,
            "uncertainty": self.uncertainty,
            "revisions": dict(self.revisions),
            "environment": dict(self.environment),
            "planned_outputs": list(self.planned_outputs),
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> DesignManifest:
        """Rebuild a manifest from :meth:`to_dict` (same digest).

        Raises:
            ValueError: another schema, unknown or missing fields, or any construction error.
        """
        data = dict(values)
        if data.pop("schema", None) != DESIGN_SCHEMA:
            raise ValueError(
                f"DesignManifest.from_dict: schema={values.get('schema')!r}; "
                f"allowed: {DESIGN_SCHEMA!r}"
            )
        try:
            data["candidates"] = [
                CandidatePipeline(**{**c, "targets": tuple(c["targets"])})
                for c in data["candidates"]
            ]
            data["blocks"] = [
                Block(**{**b, "target_surface": tuple(b["target_surface"])}) for b in data["blocks"]
            ]
            data["nuisance"] = [NuisanceTuple(**s) for s in data["nuisance"]]
            data["gates"] = {k: tuple(v) for k, v in data.get("gates", {}).items()}
            return cls(**data)
        except (KeyError, TypeError) as e:
            raise ValueError(f"DesignManifest.from_dict: {e}") from None

    def digest(self) -> str:
        """``sha256`` hex of the canonical JSON of :meth:`to_dict`; any field change changes
        it, the order a mapping was built in does not."""
        return sha256_hex(self.to_dict())

    def units(self) -> tuple[TrainingUnit, ...]:
        """Every training unit ``candidates × blocks × nuisance``, in the execution order of
        §0x0CL: block, then nuisance tuple, then candidate (each in declared order)."""
        return tuple(
            TrainingUnit(c.candidate_id, b.name, s)
            for b in self.blocks
            for s in self.nuisance
            for c in self.candidates
        )

    def validation_records(self) -> tuple[tuple[TrainingUnit, int], ...]:
        """``(unit, checkpoint step)`` for every unit and predeclared checkpoint, units in
        :meth:`units` order, steps ascending."""
        return tuple((u, j) for u in self.units() for j in self.checkpoint_steps)

    def baselines(self) -> tuple[BaselineRecord, ...]:
        """One base-checkpoint record per block, evaluated once; not training units."""
        return tuple(
            BaselineRecord(b.name, b.base_checkpoint, b.evaluator_revision) for b in self.blocks
        )
