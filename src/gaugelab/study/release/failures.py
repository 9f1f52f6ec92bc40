"""Typed failure records, the six alarm families and the mechanism loops (seed 003
§0x0CB–0x0CC).

The catalog itself is :data:`gaugelab.study.release.catalog.FAILURE_CATALOG` (the seed's 36
records) with :data:`~gaugelab.study.release.catalog.FAILURE_CATALOG_EXTENSIONS`; all are
re-exported by :mod:`gaugelab.study.release.design`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

__all__ = [
    "ALARM_FAMILIES",
    "ALARM_FAMILY_TABLE",
    "MECHANISM_LOOPS",
    "AlarmFamily",
    "FailureRecord",
    "origin_loop",
]


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

MECHANISM_LOOPS: tuple[int, ...] = tuple(range(2, 11))
"""The loops whose failures the seed's closure manifest counts, four each (§0x0CC)."""

_LOOP_OF_CHAPTER = {
    "0x02": 3,  # intrinsic dimension
    "0x03": 4,  # fixed-rank geometry
    "0x04": 5,  # reconstruction
    "0x05": 6,  # composition
    "0x06": 6,  # subspaces
    "0x07": 7,  # initialization and factor dynamics
    "0x08": 7,
    "0x09": 8,  # kernels
    "0x0A": 9,  # expressivity
    "0x0B": 10,  # rank and retention decision
    "0x0C": 11,  # failure closure and experimental design
}
_SECTION = re.compile(r"§(0x0[0-9A-C])([A-Z])")


def origin_loop(origin: str) -> int:
    """The loop a seed section belongs to: §0x00F–K is Loop 2 (the immutable study manifest),
    §0x02 Loop 3, §0x03 Loop 4, §0x04 Loop 5, §0x05–06 Loop 6, §0x07–08 Loop 7, §0x09 Loop 8,
    §0x0A Loop 9, §0x0B Loop 10, §0x0C Loop 11.

    Args:
        origin: a section id, ``"§0x04I"``.

    Raises:
        ValueError: not a section id, or a section outside Loops 2–11 (§0x00A–E, §0x01).

    Source: seed 003 (each loop's fixture and handoff name the sections it owns).
    """
    match = _SECTION.fullmatch(origin) if isinstance(origin, str) else None
    if match is not None:
        chapter, letter = match.groups()
        if chapter == "0x00" and "F" <= letter <= "K":
            return 2
        if chapter in _LOOP_OF_CHAPTER:
            return _LOOP_OF_CHAPTER[chapter]
    raise ValueError(
        f"origin_loop: origin={origin!r}; allowed: a section of Loops 2–11, §0x00F–§0x00K or "
        "§0x02A–§0x0CZ"
    )


@dataclass(frozen=True)
class FailureRecord:
    """A failure mode with its seven coordinates, linked to the check that detects it.

    Attributes:
        failure_id: stable identity (kebab-case, unique in the catalog).
        alarm_family: one of :data:`ALARM_FAMILIES`.
        origin: the seed section whose contract it breaks (``"§0x04I"``); its loop is
            :attr:`loop`.
        invariant: the first mechanism contract that must remain true.
        perturbation: one concrete drift that violates it.
        detector: dotted path of the gaugelab callable (or declared ledger) that detects it
            (or, where the detector is a test oracle, of the oracle under ``tests.support``).
        consequence: the first derived result that can no longer be trusted.
        recovery_owner: the only stage allowed to repair it.
        evidence_limit: what a successful detector still does not prove.
        test: pytest node id of the test that shows the detector firing on the perturbation.
        seed_text: the seed's own words for the failure, verbatim (from its origin section or
            a failure lab: §0x08L, §0x09O, §0x0AY, §0x0BY, §0x0E); ``None`` for a failure the
            seed does not state (an extension of this library).

    Raises:
        ValueError: an empty coordinate, an unknown alarm family, an origin outside Loops
            2–11, or an empty ``seed_text``.

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
    seed_text: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "seed_text" and value is None:
                continue
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"FailureRecord: {f.name}={value!r}; allowed: non-empty text")
        if self.alarm_family not in ALARM_FAMILIES:
            raise ValueError(
                f"FailureRecord: {self.failure_id}: alarm_family={self.alarm_family!r}; "
                f"allowed: {', '.join(ALARM_FAMILIES)}"
            )
        origin_loop(self.origin)

    @property
    def loop(self) -> int:
        """The loop of :attr:`origin` (:func:`origin_loop`): the record's origin loop."""
        return origin_loop(self.origin)
