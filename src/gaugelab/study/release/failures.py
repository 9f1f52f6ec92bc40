"""Typed failure records and the six alarm families (seed 003 §0x0CB–0x0CC).

The catalog itself is :data:`gaugelab.study.release.catalog.FAILURE_CATALOG`; both are
re-exported by :mod:`gaugelab.study.release.design`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["ALARM_FAMILIES", "ALARM_FAMILY_TABLE", "AlarmFamily", "FailureRecord"]


@dataclass(frozen=True)
class AlarmFamily:
    """One alarm family of §0x0CC: the class of state or claim that became unsafe.

    Attributes:
        family_id: stable id (``"identity-protocol"``, …).
        title: the seed's name of the family.
        invariant: its representative invariant.
        detector: its kind of detector.
        recovery: its typical recovery.
    """

    family_id: str
    title: str
    invariant: str
    detector: str
    recovery: str


ALARM_FAMILY_TABLE: tuple[AlarmFamily, ...] = (
    AlarmFamily(
        "identity-protocol",
        "identity and protocol",
        "base, tensor, split, rank policy, and protocol IDs denote the same study objects",
        "manifest digest, axis, split, and object-join audit",
        "reject the run or rebuild the manifest before execution",
    ),
    AlarmFamily(
        "geometry-reconstruction",
        "geometry and reconstruction",
        "rank, tangent, SVD, covariance support, and subspace metrics use their declared objects "
        "and thresholds",
        "exact rank/projector/residual oracle",
        "recompute the diagnostic; never relabel it",
    ),
    AlarmFamily(
        "optimization-numerics",
        "optimization and numerics",
        "factor gauge, initialization, scaling, optimizer metric, and dtype path match the "
        "derived dynamics",
        "gradient, product-velocity, range, and resume checks",
        "restore factors/optimizer state or narrow the claim",
    ),
    AlarmFamily(
        "function-space-theorem",
        "function space and theorem",
        "Jacobian, kernel, linearization horizon, theorem assumptions, and practical decision "
        "remain separate",
        "current-versus-frozen trajectory and assumption ledger",
        "invalidate the explanation, not the observed score",
    ),
    AlarmFamily(
        "experimental-design-statistics",
        "experimental design and statistics",
        "candidate cells are paired, complete, validation-only, and direction-aware",
        "design-cell, checkpoint, estimand, and test-access audit",
        "no selection; version a new study if policy changes",
    ),
    AlarmFamily(
        "evidence-publication-release",
        "evidence, publication, and release",
        "sources, figures, URLs, artifacts, and evidence classes are complete and correctly scoped",
        "provenance, digest, route, and claim-firewall audit",
        "repair metadata or block publication/release",
    ),
)
"""The six families of §0x0CC, in the seed's order, with its table's three columns."""

ALARM_FAMILIES: tuple[str, ...] = tuple(f.family_id for f in ALARM_FAMILY_TABLE)
"""The six family ids, in order. No alarm substitutes for another (§0x0CC)."""


@dataclass(frozen=True)
class FailureRecord:
    """A failure mode with its seven coordinates, linked to the check that detects it.

    Attributes:
        failure_id: stable identity (kebab-case, unique in the catalog).
        alarm_family: one of :data:`ALARM_FAMILIES`.
        origin: the seed section whose contract it breaks (``"§0x04I"``).
        invariant: the first mechanism contract that must remain true.
        perturbation: one concrete drift that violates it.
        detector: dotted path of the gaugelab callable that detects it (or, where the detector
            is a test oracle, of the oracle under ``tests.support``).
        consequence: the first derived result that can no longer be trusted.
        recovery_owner: the only stage allowed to repair it.
        evidence_limit: what a successful detector still does not prove.
        test: pytest node id of the test that shows the detector firing on the perturbation.

    Raises:
        ValueError: an empty coordinate or an unknown alarm family.

    Source: seed 003 §0x0CB (seven coordinates), §0x0CC (alarm families).
    """

    failure_id: str
    alarm_family: str
    origin: str
    invariant: str
    perturbation: str
    detector: str
    consequence: str
    recovery_owner: str
    evidence_limit: str
    test: str

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"FailureRecord: {f.name}={value!r}; allowed: non-empty text")
        if self.alarm_family not in ALARM_FAMILIES:
            raise ValueError(
                f"FailureRecord: {self.failure_id}: alarm_family={self.alarm_family!r}; "
                f"allowed: {', '.join(ALARM_FAMILIES)}"
            )
