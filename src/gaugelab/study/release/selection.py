"""Candidate selection: select a candidate for one release contract, not a universal rank.

A candidate is a pipeline (:class:`CandidateManifest`: method, rank, target surface, scale,
initialisation, optimizer, schedule, data budget, …), and its evidence is one typed
:class:`CandidateRecord` whose field families stay apart (seed 003 §0x0BJ). This module holds
the decision's analysis side:

* checkpoint selection, nested inside candidate selection and on validation only
  (:func:`select_checkpoint`, §0x0BI);
* the admissibility gates — reconstruction is a gate, never the objective
  (:func:`reconstruction_gate`, §0x0BM); the kernel gate exactly as §0x0BN writes it
  (:func:`kernel_gate`); declared trajectory and budget checks (:func:`diagnostic_failures`);
* the frozen policy (:class:`GatePolicy`: declarations, floors, gates, tie-break order);
* fail-closed validation of the records (:func:`validate_records`: duplicate ids, NaN,
  missing metrics, mixed revisions, unknown directions, a theorem rank used as a selector);
* :func:`selection_points`: the records as plain, oriented metric dicts.

The Pareto front and the constraint-feasible lexicographic choice are computed by the harness
(``gaugelab.study.stats.compare.pareto_front`` / ``feasible_selection``) on those points, with
``policy.objectives()``, ``policy.constraints()`` and ``policy.tie_break()``; this analysis
module does not import the harness. The held-out test is a report behind
``gaugelab.study.release.sealed.SealedTestStore`` (§0x0BT–0x0BU).

Source: seed 003 §0x0BA–0x0BV (Loop 10); biderman2024lora (the source tradeoff is empirical).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gaugelab.study.release.checkpoints import CheckpointScores, select_checkpoint
from gaugelab.study.release.evidence import (
    CandidateRecord,
    Cost,
    KernelBundle,
    OperationalScores,
    Reconstruction,
    SubspaceOverlap,
    TheoremScope,
    Trajectory,
    operational_scores,
)
from gaugelab.study.release.records import (
    DIRECTIONS,
    KERNEL_BUNDLE_FIELDS,
    MANIFEST_GROUPS,
    METHODS,
    OPERATIONAL_METRICS,
    PEAK_MEMORY_NOT_MEASURED,
    TAIL_CONVENTIONS,
    CandidateManifest,
    Direction,
    MetricDeclaration,
    SelectionError,
    _direction,
    _fail,
    _frozen_map,
    canonical_digest,
    forgetting,
    oriented,
    target_gain,
)
from gaugelab.study.release.validate import directions_of, validate_records

__all__ = [
    "COST_MEASURES",
    "DIRECTIONS",
    "KERNEL_BUNDLE_FIELDS",
    "MANIFEST_GROUPS",
    "METHODS",
    "OPERATIONAL_METRICS",
    "PEAK_MEMORY_NOT_MEASURED",
    "POINT_METRICS",
    "TAIL_CONVENTIONS",
    "CandidateManifest",
    "CandidateRecord",
    "CheckpointScores",
    "Cost",
    "Direction",
    "GatePolicy",
    "KernelBundle",
    "MetricDeclaration",
    "OperationalScores",
    "Reconstruction",
    "SelectionError",
    "SubspaceOverlap",
    "TheoremScope",
    "Trajectory",
    "canonical_digest",
    "diagnostic_failures",
    "forgetting",
    "kernel_gate",
    "operational_scores",
    "oriented",
    "reconstruction_gate",
    "select_checkpoint",
    "selection_points",
    "target_gain",
    "validate_records",
]

COST_MEASURES: tuple[str, ...] = (
    "trainable_parameters",
    "optimizer_state_numel",
    "wall_seconds",
    "peak_mib",
)
POINT_METRICS: tuple[str, ...] = (
    "target",
    "retention",
    "stress",
    "target_gain",
    "forgetting",
    "stress_gain",
    "cost",
    "tail",
    "diagnostics",
    "kernel_gate",
    "configured_rank",
    "id_order",
)
"""The keys of each :func:`selection_points` dict."""
_BOUNDABLE = (*POINT_METRICS[:7], "configured_rank")


# --------------------------------------------------------------------------------------------
# Gates (§0x0BM, §0x0BN)
# --------------------------------------------------------------------------------------------


def kernel_gate(record: CandidateRecord) -> bool:
    """``not kernel_interpretation_requested or kernel_bundle_complete`` (seed 003 §0x0BN).

    ``record.kernel is None`` means no kernel interpretation was requested. No universal
    "small drift" threshold is applied: thresholds belong to the study manifest.
    """
    bundle = record.kernel
    return bundle is None or not bundle.requested or bundle.complete


def reconstruction_gate(
    record: CandidateRecord, max_tail: float, *, convention: str | None = None
) -> bool:
    """Whether the truncation tail of the full update at the candidate's rank is ``≤ max_tail``.

    A gate, never the objective: passing it does not select the candidate (seed 003 §0x0BM;
    tails 30, 14, 5, 1, 0 at ranks 0–4 with ``max_tail = 5``: rank 2 passes exactly). Full
    fine-tuning without a measurement has tail 0 (the full update reconstructs itself).

    Args:
        record: the candidate.
        max_tail: the bound, in the record's tail convention (≥ 0).
        convention: when given, the record's :attr:`Reconstruction.convention` must equal it.

    Raises:
        SelectionError: a base / LoRA candidate without a reconstruction (fail closed: the gate
            is declared, the measurement missing); a convention mismatch; ``max_tail`` < 0 or
            NaN; a non-finite tail.
    """
    fn = "reconstruction_gate"
    if not max_tail >= 0:
        raise _fail(fn, "max_tail", max_tail, "a number ≥ 0")
    rec = record.reconstruction
    if rec is None:
        if record.method == "full":
            return True
        raise _fail(
            fn,
            f"record {record.candidate_id!r} reconstruction",
            None,
            "a Reconstruction: the tail gate is declared and its measurement is missing",
        )
    if convention is not None and rec.convention != convention:
        raise _fail(
            fn,
            f"record {record.candidate_id!r} convention",
            rec.convention,
            f"{convention!r}, the policy's tail convention",
        )
    if not math.isfinite(rec.tail_energy):
        raise _fail(fn, f"record {record.candidate_id!r} tail_energy", rec.tail_energy, "finite")
    return rec.tail_energy <= max_tail


# --------------------------------------------------------------------------------------------
# The frozen policy and the plain points (§0x0BQ, §0x0BU)
# --------------------------------------------------------------------------------------------

Bounds = tuple[float | None, float | None]


def _bounds(fn: str, name: str, mapping: Mapping[str, Bounds], allowed: Sequence[str]) -> None:
    for key, pair in mapping.items():
        if key not in allowed:
            raise _fail(fn, f"{name} key", key, ", ".join(allowed))
        lo, hi = pair
        lo_f = -math.inf if lo is None else float(lo)
        hi_f = math.inf if hi is None else float(hi)
        if math.isnan(lo_f) or math.isnan(hi_f) or lo_f > hi_f:
            raise _fail(fn, f"{name}[{key!r}]", pair, "(lo, hi) with lo ≤ hi, None for open")


@dataclass(frozen=True, kw_only=True)
class GatePolicy:
    """The frozen validation policy of one release contract (seed 003 §0x0BQ).

    Attributes:
        declarations: the three operational metrics' :class:`MetricDeclaration`.
        floors: point metric → ``(lo, hi)``, inclusive, ``None`` open, on the ORIENTED scale
            of :func:`selection_points` (``target ≥ τ_S`` is ``{"target": (τ_S, None)}``, a
            forgetting ceiling ``{"forgetting": (None, τ_F)}``); order kept in the audit.
        max_tail: the reconstruction gate ``E_i ≤ τ_E`` (``None``: not declared).
        tail_convention: the convention ``max_tail`` is in (``"relative"``/``"absolute"``).
        require_kernel_gate: :func:`kernel_gate` is part of the diagnostics ``D_i``.
        trajectory_bounds: :class:`Trajectory` summary key → ``(lo, hi)``, part of ``D_i``.
        budgets: :class:`Cost` field → ceiling, part of ``D_i``.
        cost: the :class:`Cost` field that is the point's ``cost``.
        order: the lexicographic tie-break ``(metric, direction)``, most significant first;
            :meth:`tie_break` appends the candidate id.

    Raises:
        SelectionError: an unknown key, measure or direction; bounds with ``lo > hi`` or NaN;
            a negative ``max_tail`` or budget; declarations missing a metric or repeating one.
    """

    declarations: tuple[MetricDeclaration, ...]
    floors: Mapping[str, Bounds] = field(default_factory=dict)
    max_tail: float | None = None
    tail_convention: str = "relative"
    require_kernel_gate: bool = True
    trajectory_bounds: Mapping[str, Bounds] = field(default_factory=dict)
    budgets: Mapping[str, float] = field(default_factory=dict)
    cost: str = "trainable_parameters"
    order: tuple[tuple[str, Direction], ...] = (("cost", "min"), ("configured_rank", "min"))

    def __post_init__(self) -> None:
        fn = "GatePolicy"
        object.__setattr__(self, "declarations", tuple(self.declarations))
        directions_of(self.declarations)
        for name in ("floors", "trajectory_bounds", "budgets"):
            _frozen_map(self, name, getattr(self, name))
        _bounds(fn, "floors", self.floors, _BOUNDABLE)
        _bounds(fn, "trajectory_bounds", self.trajectory_bounds, tuple(self.trajectory_bounds))
        if self.max_tail is not None and not (0 <= self.max_tail < math.inf):
            raise _fail(fn, "max_tail", self.max_tail, "None or a finite number ≥ 0")
        if self.tail_convention not in TAIL_CONVENTIONS:
            raise _fail(fn, "tail_convention", self.tail_convention, ", ".join(TAIL_CONVENTIONS))
        if self.cost not in COST_MEASURES:
            raise _fail(fn, "cost", self.cost, ", ".join(COST_MEASURES))
        for key, ceiling in self.budgets.items():
            if key not in COST_MEASURES or not ceiling >= 0:
                raise _fail(fn, f"budgets[{key!r}]", ceiling, f"a ceiling ≥ 0 on {COST_MEASURES}")
        order = tuple((str(k), d) for k, d in self.order)
        for key, direction in order:
            if key not in POINT_METRICS:
                raise _fail(fn, "order key", key, ", ".join(POINT_METRICS))
            _direction(fn, direction)
        object.__setattr__(self, "order", order)

    def objectives(self) -> dict[str, Direction]:
        """The Pareto objectives of §0x0BP on the oriented points: target, retention and stress
        ``"max"``, cost ``"min"`` (for ``study.compare.pareto_front``)."""
        return {"target": "max", "retention": "max", "stress": "max", "cost": "min"}

    def constraints(self) -> dict[str, Bounds]:
        """The feasible set's bounds (for ``study.compare.feasible_selection``): the floors in
        their order, then ``tail ≤ max_tail`` when declared, then ``diagnostics == 1``."""
        out = dict(self.floors)
        if self.max_tail is not None:
            out["tail"] = (None, float(self.max_tail))
        out["diagnostics"] = (1.0, 1.0)
        return out

    def tie_break(self) -> tuple[tuple[str, Direction], ...]:
        """``order`` then the candidate id (``id_order``, the rank of the id in sorted order):
        ``argmin (C_i, r_i, id_i)`` whatever order the records come in (§0x0BQ)."""
        return (*self.order, ("id_order", "min"))

    def digest(self) -> str:
        """sha256 hex of the policy's canonical JSON."""
        return canonical_digest(self)


def diagnostic_failures(record: CandidateRecord, policy: GatePolicy) -> tuple[str, ...]:
    """The declared diagnostic and budget checks ``D_i`` the record fails, in a fixed order:
    ``"kernel_gate"``, ``"trajectory:<key>"``…, ``"budget:<field>"``….

    Raises:
        SelectionError: a declared trajectory bound without the record's trajectory or key; a
            declared budget whose measure the record lacks (``peak_mib=None``).
    """
    fn, cid = "diagnostic_failures", record.candidate_id
    failed = []
    if policy.require_kernel_gate and not kernel_gate(record):
        failed.append("kernel_gate")
    for key, (lo, hi) in policy.trajectory_bounds.items():
        summary = {} if record.trajectory is None else record.trajectory.summary
        if key not in summary:
            raise _fail(
                fn,
                f"record {cid!r} trajectory[{key!r}]",
                None,
                "a recorded value: the bound is declared",
            )
        value = float(summary[key])
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            failed.append(f"trajectory:{key}")
    for key, ceiling in policy.budgets.items():
        value = getattr(record.cost, key)
        if value is None:
            raise _fail(fn, f"record {cid!r} cost.{key}", None, "a measurement: it is budgeted")
        if value > ceiling:
            failed.append(f"budget:{key}")
    return tuple(failed)


def selection_points(
    records: Sequence[CandidateRecord],
    policy: GatePolicy,
    *,
    manifests: Sequence[CandidateManifest] | None = None,
) -> list[dict[str, float]]:
    """The records as plain metric dicts for ``study.compare`` (aligned with ``records``).

    Runs :func:`validate_records` first. Keys (:data:`POINT_METRICS`):

    * ``target``, ``retention``, ``stress``: validation means ORIENTED higher-is-better
      (:func:`oriented`: a loss ``L`` becomes ``-L``);
    * ``target_gain``, ``forgetting``, ``stress_gain``: from the record (forgetting ``> 0``
      is worse);
    * ``cost``: the :class:`Cost` field ``policy.cost`` (default trainable parameters);
    * ``tail``: the reconstruction tail; full fine-tuning without one is 0; any other record
      without one is ``inf`` when no tail gate is declared (unmeasured never passes a gate),
      and refused when one is;
    * ``diagnostics``: 1.0 when every :func:`diagnostic_failures` check passes, else 0.0;
      ``kernel_gate``: :func:`kernel_gate` as 1.0 / 0.0;
    * ``configured_rank``: ``inf`` for base / full; ``id_order``: the index of the id in
      sorted order (the last tie-break).

    Raises:
        SelectionError: anything :func:`validate_records`, :func:`reconstruction_gate` or
            :func:`diagnostic_failures` refuses; a cost measure the record lacks.
    """
    validate_records(records, policy.declarations, manifests=manifests)
    directions = directions_of(policy.declarations)
    ids = sorted(r.candidate_id for r in records)
    points = []
    for r in records:
        op = r.operational
        if policy.max_tail is not None:  # refuses a declared gate without its measurement
            reconstruction_gate(r, policy.max_tail, convention=policy.tail_convention)
        if r.reconstruction is not None:
            tail = float(r.reconstruction.tail_energy)
        else:
            tail = 0.0 if r.method == "full" else math.inf
        cost = getattr(r.cost, policy.cost)
        if cost is None:
            raise _fail(
                "selection_points",
                f"record {r.candidate_id!r} cost.{policy.cost}",
                None,
                "a measurement: it is the policy's cost",
            )
        points.append(
            {
                **{m: oriented(getattr(op, m), directions[m]) for m in OPERATIONAL_METRICS},
                "target_gain": float(op.target_gain),
                "forgetting": float(op.forgetting),
                "stress_gain": float(op.stress_gain),
                "cost": float(cost),
                "tail": tail,
                "diagnostics": 0.0 if diagnostic_failures(r, policy) else 1.0,
                "kernel_gate": 1.0 if kernel_gate(r) else 0.0,
                "configured_rank": float(r.configured_rank_or_inf),
                "id_order": float(ids.index(r.candidate_id)),
            }
        )
    return points
