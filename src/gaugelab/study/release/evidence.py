"""The evidence of one candidate (seed 003 §0x0BJ): typed sub-records, each naming the inference
it forbids, and the :class:`CandidateRecord` that joins them under one candidate identity
without collapsing them into one number.

Re-exported by :mod:`gaugelab.study.release.selection`.

Source: seed 003 §0x0BJ (the candidate record), §0x0BB/§0x0BL (gains and forgetting against a
declared base), §0x0BM (reconstruction, a gate), §0x0BN (kernel bundle), §0x0BO (theorem scope).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gaugelab.study.release.records import (
    _HEX64,
    KERNEL_BUNDLE_FIELDS,
    METHODS,
    OPERATIONAL_METRICS,
    TAIL_CONVENTIONS,
    CandidateManifest,
    MetricDeclaration,
    _fail,
    _frozen_map,
    _is_int,
    _text,
    canonical_digest,
    forgetting,
    target_gain,
)

__all__ = [
    "CandidateRecord",
    "Cost",
    "KernelBundle",
    "OperationalScores",
    "Reconstruction",
    "SubspaceOverlap",
    "TheoremScope",
    "Trajectory",
    "operational_scores",
]

# --------------------------------------------------------------------------------------------
# The typed sub-records of a candidate (§0x0BJ: each names its forbidden inference)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperationalScores:
    """Validation means at the chosen checkpoint and their differences against the base.

    ``target``, ``retention``, ``stress`` are raw (in their declared directions);
    ``target_gain``, ``forgetting``, ``stress_gain`` are oriented differences against
    ``baseline_id`` (:func:`target_gain`, :func:`forgetting`). Build with
    :func:`operational_scores`. Forbidden inference: a universal rank (§0x0BJ).
    """

    target: float
    retention: float
    stress: float
    target_gain: float
    forgetting: float
    stress_gain: float
    baseline_id: str = "base"


def operational_scores(
    scores: Mapping[str, float],
    base: Mapping[str, float],
    declarations: tuple[MetricDeclaration, ...] | list[MetricDeclaration],
    *,
    baseline_id: str = "base",
) -> OperationalScores:
    """:class:`OperationalScores` from raw validation means and the base's, oriented first.

    Args:
        scores, base: ``target``, ``retention``, ``stress`` → raw mean (declared units).
        declarations: one :class:`MetricDeclaration` per operational metric.
        baseline_id: the base candidate's id.

    Raises:
        SelectionError: a metric or its declaration is missing.
    """
    directions = {d.name: d.direction for d in declarations}
    for name in OPERATIONAL_METRICS:
        if name not in directions:
            raise _fail(
                "operational_scores",
                "declarations",
                sorted(directions),
                f"a direction for {name!r}",
            )
        for arg, values in (("scores", scores), ("base", base)):
            if name not in values:
                raise _fail("operational_scores", arg, sorted(values), f"a {name!r} value")
    raw = {name: float(scores[name]) for name in OPERATIONAL_METRICS}
    ref = {name: float(base[name]) for name in OPERATIONAL_METRICS}
    return OperationalScores(
        **raw,
        target_gain=target_gain(raw["target"], ref["target"], directions["target"]),
        forgetting=forgetting(raw["retention"], ref["retention"], directions["retention"]),
        stress_gain=target_gain(raw["stress"], ref["stress"], directions["stress"]),
        baseline_id=baseline_id,
    )


@dataclass(frozen=True)
class Cost:
    """Trainable state and runtime ledgers: parameters and optimizer-state elements, wall time
    (seconds), peak memory (MiB; ``None`` where not measured). Forbidden inference: cost from
    rank alone — runtime cost is measured under a pinned contract (§0x0BV)."""

    trainable_parameters: int
    optimizer_state_numel: int
    wall_seconds: float
    peak_mib: float | None = None

    def __post_init__(self) -> None:
        for name in ("trainable_parameters", "optimizer_state_numel"):
            if not (_is_int(getattr(self, name)) and getattr(self, name) >= 0):
                raise _fail("Cost", name, getattr(self, name), "an integer ≥ 0")
        for name in ("wall_seconds", "peak_mib"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise _fail("Cost", name, value, "a number ≥ 0")


@dataclass(frozen=True)
class Reconstruction:
    """The truncation tail of the full update at the candidate's rank, consumed by digest.

    Attributes:
        rank: the truncation rank — the configured rank for LoRA, 0 for the base (its tail is
            the whole update), ``None`` for full fine-tuning.
        tail_energy: ``‖ΔW − ΔW_r‖_F²``: divided by ``‖ΔW‖_F²`` when ``convention`` is
            ``"relative"`` (in ``[0, 1]``), the absolute squared Frobenius norm when
            ``"absolute"`` (seed 003 §0x0BM's fixture: 30, 14, 5, 1, 0).
        source_digest: digest of the reconstruction artifact it was read from.

    A gate, never the objective. Forbidden inference: low task loss (§0x0BJ, §0x0BM).
    """

    rank: int | None
    tail_energy: float
    source_digest: str
    convention: Literal["relative", "absolute"] = "relative"

    def __post_init__(self) -> None:
        if self.rank is not None and not (_is_int(self.rank) and self.rank >= 0):
            raise _fail("Reconstruction", "rank", self.rank, "None or an integer ≥ 0")
        if self.convention not in TAIL_CONVENTIONS:
            raise _fail("Reconstruction", "convention", self.convention, "relative, absolute")
        if self.tail_energy < 0 or (self.convention == "relative" and self.tail_energy > 1):
            raise _fail(
                "Reconstruction", "tail_energy", self.tail_energy, "≥ 0 (and ≤ 1 when relative)"
            )
        _text("Reconstruction", "source_digest", self.source_digest)


@dataclass(frozen=True)
class SubspaceOverlap:
    """Gauge-invariant subspace overlap with the full update (Loop 6: principal angles,
    directed coverage): a summary and, optionally, per-module values (in ``[0, 1]``).
    Forbidden inference: retention (§0x0BJ)."""

    summary: float
    source_digest: str
    per_module: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _text("SubspaceOverlap", "source_digest", self.source_digest)
        _frozen_map(self, "per_module", self.per_module)


@dataclass(frozen=True)
class Trajectory:
    """Loop 7 trajectory summaries (factor norms, gradients, scale, dtype state): name → value.
    Forbidden inference: useful feature learning (§0x0BJ)."""

    summary: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _frozen_map(self, "summary", self.summary)


@dataclass(frozen=True)
class KernelBundle:
    """Loop 8 function-space diagnostics, when a kernel interpretation is requested.

    ``complete`` claims every field of :data:`KERNEL_BUNDLE_FIELDS` was recorded; it is
    checked against ``fields``. Forbidden inference: generalization (§0x0BJ). A missing bundle
    invalidates the kernel explanation, not the measured target score (§0x0BN).

    Raises:
        SelectionError: ``complete`` is true but a required field is absent.
    """

    requested: bool
    complete: bool
    fields: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _frozen_map(self, "fields", self.fields)
        missing = [k for k in KERNEL_BUNDLE_FIELDS if k not in self.fields]
        if self.complete and missing:
            raise _fail("KernelBundle", "complete", True, f"False while {missing} are absent")


@dataclass(frozen=True)
class TheoremScope:
    """Loop 9 sufficient-rank statements that were checked; a theorem rank never enters the
    selector (``theorem_rank_used_as_selector`` must stay false, §0x0BO). Forbidden
    inference: a practical optimum."""

    theorem_rank_used_as_selector: bool = False
    statements: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# The candidate record: one identity, every field family kept apart (§0x0BJ)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CandidateRecord:
    """One candidate's validation evidence at its validation-chosen checkpoint.

    Joining means every field shares one candidate identity; the fields are not
    interchangeable and none is a proxy for another (seed 003 §0x0BJ). Build from the frozen
    manifest with :meth:`from_manifest`.

    Attributes:
        candidate_id, manifest_digest: the candidate and its :meth:`CandidateManifest.digest`.
        method: one of :data:`METHODS`; configured_rank_or_inf: the configured rank, ``inf``
            for base / full.
        checkpoint_id: the checkpoint chosen on validation (:func:`select_checkpoint`).
        revisions: metric name → metric revision the scores were computed under.
        operational: raw validation means and oriented differences against the base.
        cost: trainable state and runtime ledgers.
        reconstruction, subspace, trajectory, kernel: Loop 5–8 evidence, ``None`` when not
            measured (``kernel=None`` means no kernel interpretation was requested).
        theorem: Loop 9 scope; ``theorem_rank_used_as_selector`` must be false.

    Raises:
        SelectionError: empty ids, a malformed digest, an unknown method, a rank that does not
            fit the method, a reconstruction at another rank than the candidate's.
        TypeError: a sub-record of the wrong type.
    """

    candidate_id: str
    manifest_digest: str
    method: str
    checkpoint_id: str
    revisions: Mapping[str, str]
    operational: OperationalScores
    cost: Cost
    reconstruction: Reconstruction | None = None
    subspace: SubspaceOverlap | None = None
    trajectory: Trajectory | None = None
    kernel: KernelBundle | None = None
    theorem: TheoremScope = field(default_factory=TheoremScope)
    configured_rank_or_inf: float

    def __post_init__(self) -> None:
        fn = "CandidateRecord"
        for name in ("candidate_id", "checkpoint_id"):
            _text(fn, name, getattr(self, name))
        if not (isinstance(self.manifest_digest, str) and _HEX64.fullmatch(self.manifest_digest)):
            raise _fail(fn, "manifest_digest", self.manifest_digest, "64 lowercase hex (sha256)")
        if self.method not in METHODS:
            raise _fail(fn, "method", self.method, ", ".join(METHODS))
        for name, kind in _PARTS.items():
            value = getattr(self, name)
            if not isinstance(value, kind) and not (value is None and name in _OPTIONAL):
                raise TypeError(f"{fn}: {name}={value!r}; allowed: a {kind.__name__}")
        _frozen_map(self, "revisions", self.revisions)
        rank = float(self.configured_rank_or_inf)
        if self.method in ("lora", "rslora"):
            if not (math.isfinite(rank) and rank >= 1 and rank.is_integer()):
                raise _fail(fn, "configured_rank_or_inf", rank, f"an integer ≥ 1 for {self.method}")
            expected: int | None = int(rank)
        elif rank != math.inf:
            raise _fail(fn, "configured_rank_or_inf", rank, f"inf for method {self.method!r}")
        else:
            expected = 0 if self.method == "base" else None
        object.__setattr__(self, "configured_rank_or_inf", rank)
        if self.reconstruction is not None and self.reconstruction.rank != expected:
            raise _fail(
                fn,
                "reconstruction.rank",
                self.reconstruction.rank,
                f"{expected} (the tail of the full update at this candidate's rank)",
            )

    @classmethod
    def from_manifest(
        cls,
        manifest: CandidateManifest,
        *,
        checkpoint_id: str,
        revisions: Mapping[str, str],
        operational: OperationalScores,
        cost: Cost,
        reconstruction: Reconstruction | None = None,
        subspace: SubspaceOverlap | None = None,
        trajectory: Trajectory | None = None,
        kernel: KernelBundle | None = None,
        theorem: TheoremScope | None = None,
    ) -> CandidateRecord:
        """The record of ``manifest``'s candidate: id, digest, method and rank from the manifest.

        Raises:
            SelectionError, TypeError: as the constructor.
        """
        return cls(
            candidate_id=manifest.candidate_id,
            manifest_digest=manifest.digest(),
            method=manifest.method,
            checkpoint_id=checkpoint_id,
            revisions=revisions,
            operational=operational,
            cost=cost,
            reconstruction=reconstruction,
            subspace=subspace,
            trajectory=trajectory,
            kernel=kernel,
            theorem=TheoremScope() if theorem is None else theorem,
            configured_rank_or_inf=manifest.configured_rank_or_inf,
        )

    def digest(self) -> str:
        """sha256 hex of the record's canonical JSON."""
        return canonical_digest(self)

    def numbers(self) -> dict[str, float]:
        """Every float the record holds, by dotted path (``operational.target``,
        ``kernel.fields.kernel_drift``, …) — what :func:`validate_records` checks for NaN."""
        out: dict[str, float] = {}
        for name in ("operational", "cost", "reconstruction", "subspace", "trajectory", "kernel"):
            part = getattr(self, name)
            if part is None:
                continue
            for key, value in vars(part).items():
                if isinstance(value, Mapping):
                    out.update({f"{name}.{key}.{k}": float(v) for k, v in value.items()})
                elif isinstance(value, int | float) and not isinstance(value, bool):
                    out[f"{name}.{key}"] = float(value)
        return out


_PARTS = {
    "operational": OperationalScores,
    "cost": Cost,
    "reconstruction": Reconstruction,
    "subspace": SubspaceOverlap,
    "trajectory": Trajectory,
    "kernel": KernelBundle,
    "theorem": TheoremScope,
}
_OPTIONAL = ("reconstruction", "subspace", "trajectory", "kernel")
