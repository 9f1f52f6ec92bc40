"""Fail-closed validation of candidate records before any selection (seed 003 §0x0BU).

Re-exported by :mod:`gaugelab.study.release.selection`.

Source: seed 003 §0x0BU ("fail closed on missing metrics, mixed revisions, NaNs, unknown
directions, duplicate candidate IDs"), §0x0BO (theorem rank cannot enter the selector),
§0x0BH (a changed lineage is a new candidate identity), §0x0BL (forgetting names a baseline).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gaugelab.study.release.evidence import CandidateRecord
from gaugelab.study.release.records import (
    _VALIDATION_FIELDS,
    DIRECTIONS,
    OPERATIONAL_METRICS,
    PEAK_MEMORY_NOT_MEASURED,
    CandidateManifest,
    Direction,
    MetricDeclaration,
    SelectionError,
    forgetting,
    target_gain,
)

__all__ = ["directions_of", "validate_records"]

_CONTRACT = (
    "base_model_id",
    "tokenizer_id",
    *_VALIDATION_FIELDS,
    "test_splits",
    "probe_ids",
)
"""Manifest fields every candidate of one selection shares (one contract, one test set)."""


def directions_of(declarations: Sequence[MetricDeclaration]) -> dict[str, Direction]:
    """Metric name → declared direction, one declaration per operational metric.

    Raises:
        SelectionError: a metric without a declaration (its direction is unknown), a metric
            declared twice, or an unknown direction.
        TypeError: an element is not a :class:`MetricDeclaration`.
    """
    out: dict[str, Direction] = {}
    for d in declarations:
        if not isinstance(d, MetricDeclaration):
            raise TypeError(f"directions_of: declaration {d!r}; allowed: a MetricDeclaration")
        if d.direction not in DIRECTIONS:
            raise SelectionError(
                f"directions_of: metric {d.name!r} has direction={d.direction!r}; allowed: "
                "'max' or 'min' (unknown directions fail closed)"
            )
        if d.name in out:
            raise SelectionError(f"directions_of: metric {d.name!r} is declared twice")
        out[d.name] = d.direction
    missing = [m for m in OPERATIONAL_METRICS if m not in out]
    if missing:
        raise SelectionError(
            f"directions_of: no declaration for {missing}; allowed: one MetricDeclaration per "
            f"metric of {OPERATIONAL_METRICS} (an undeclared direction is unknown)"
        )
    return out


def validate_records(
    records: Sequence[CandidateRecord],
    declarations: Sequence[MetricDeclaration],
    *,
    manifests: Sequence[CandidateManifest] | None = None,
) -> None:
    """Refuse a candidate set that cannot be selected from, each rule with its own message.

    Checks, in order: the declarations (:func:`directions_of`); a non-empty set of
    :class:`CandidateRecord`; distinct candidate ids; ``theorem_rank_used_as_selector`` false
    everywhere; every declared metric present in each record's ``revisions`` with the declared
    revision (mixed revisions fail); every number finite (``CandidateRecord.numbers``); one
    baseline id, and when the baseline is among the records, every gain and forgetting equal
    to its recomputation from the raw means; one tail convention. With ``manifests``: one per
    record, matching its digest, method, rank and trainable-state accounting, and one shared
    record, matching its digest, method, rank, trainable-state accounting, metric revisions and
    peak-memory accounting (a measured ``cost.peak_mib`` exactly when the manifest declares a
    measurement), and one shared contract (base model, tokenizer, validation splits and their
    metric revisions, test and probe splits).

    Raises:
        SelectionError: the first rule broken, naming the record and the field.
        TypeError: a record is not a :class:`CandidateRecord`.
    """
    fn = "validate_records"
    directions = directions_of(declarations)
    if not records:
        raise SelectionError(f"{fn}: records=[]; allowed: at least one candidate")
    for r in records:
        if not isinstance(r, CandidateRecord):
            raise TypeError(f"{fn}: record {r!r}; allowed: a CandidateRecord")
    ids = [r.candidate_id for r in records]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise SelectionError(f"{fn}: duplicate candidate ids {repeated}; allowed: distinct ids")
    for r in records:
        if r.theorem.theorem_rank_used_as_selector is not False:
            raise SelectionError(
                f"{fn}: record {r.candidate_id!r} has theorem_rank_used_as_selector="
                f"{r.theorem.theorem_rank_used_as_selector!r}; allowed: False (a theorem rank "
                "answers another objective and cannot enter the selector, §0x0BO)"
            )
        for d in declarations:
            if d.name not in r.revisions:
                raise SelectionError(
                    f"{fn}: record {r.candidate_id!r} lacks metric {d.name!r} (no revision "
                    f"recorded); allowed: revision {d.revision!r} (missing metrics fail closed)"
                )
            if r.revisions[d.name] != d.revision:
                raise SelectionError(
                    f"{fn}: record {r.candidate_id!r} has {d.name} revision="
                    f"{r.revisions[d.name]!r}; allowed: {d.revision!r} (mixed revisions)"
                )
        for path, value in r.numbers().items():
            if not math.isfinite(value):
                raise SelectionError(
                    f"{fn}: record {r.candidate_id!r} has {path}={value}; allowed: a finite "
                    "number (NaN and inf fail closed)"
                )
    _check_baseline(records, directions)
    conventions = sorted({r.reconstruction.convention for r in records if r.reconstruction})
    if len(conventions) > 1:
        raise SelectionError(
            f"{fn}: reconstruction tail conventions {conventions} are mixed; allowed: one "
            "convention (values are consumed by digest, never recomputed, §0x0BM)"
        )
    if manifests is not None:
        _check_manifests(records, manifests)


def _check_baseline(records: Sequence[CandidateRecord], directions: dict[str, Direction]) -> None:
    fn = "validate_records"
    baselines = sorted({r.operational.baseline_id for r in records})
    if len(baselines) > 1:
        raise SelectionError(f"{fn}: baseline ids {baselines} are mixed; allowed: one baseline")
    base = next((r for r in records if r.candidate_id == baselines[0]), None)
    if base is None:
        return
    b = base.operational
    for r in records:
        op = r.operational
        expected = {
            "target_gain": target_gain(op.target, b.target, directions["target"]),
            "forgetting": forgetting(op.retention, b.retention, directions["retention"]),
            "stress_gain": target_gain(op.stress, b.stress, directions["stress"]),
        }
        for name, value in expected.items():
            if getattr(op, name) != value:
                raise SelectionError(
                    f"{fn}: record {r.candidate_id!r} has {name}={getattr(op, name)!r}; "
                    f"allowed: {value!r}, recomputed against baseline {baselines[0]!r} in the "
                    "declared directions"
                )


def _check_manifests(
    records: Sequence[CandidateRecord], manifests: Sequence[CandidateManifest]
) -> None:
    fn = "validate_records"
    by_id: dict[str, CandidateManifest] = {}
    for m in manifests:
        if not isinstance(m, CandidateManifest):
            raise TypeError(f"{fn}: manifest {m!r}; allowed: a CandidateManifest")
        if m.candidate_id in by_id:
            raise SelectionError(f"{fn}: two manifests for candidate {m.candidate_id!r}")
        by_id[m.candidate_id] = m
    first = manifests[0] if manifests else None
    for r in records:
        m = by_id.get(r.candidate_id)
        if m is None:
            raise SelectionError(f"{fn}: record {r.candidate_id!r} has no manifest")
        checks = {
            "manifest_digest": (r.manifest_digest, m.digest()),
            "method": (r.method, m.method),
            "configured_rank_or_inf": (r.configured_rank_or_inf, m.configured_rank_or_inf),
            "cost.trainable_parameters": (r.cost.trainable_parameters, m.trainable_parameters),
            "cost.optimizer_state_numel": (r.cost.optimizer_state_numel, m.optimizer_state_numel),
        }
        for metric, revision in m.metric_revisions().items():
            checks[f"revisions[{metric!r}]"] = (r.revisions.get(metric), revision)
        for name, (got, want) in checks.items():
            if got != want:
                raise SelectionError(
                    f"{fn}: record {r.candidate_id!r} has {name}={got!r}; allowed: {want!r} "
                    "from its frozen manifest (a changed lineage is a new candidate, §0x0BH)"
                )
        measured = m.peak_memory_accounting != PEAK_MEMORY_NOT_MEASURED
        if (r.cost.peak_mib is not None) != measured:
            raise SelectionError(
                f"{fn}: record {r.candidate_id!r} has cost.peak_mib={r.cost.peak_mib!r}; "
                f"allowed: {'a measurement' if measured else 'None'} under its manifest's "
                f"peak_memory_accounting={m.peak_memory_accounting!r} (§0x0BG)"
            )
        for name in _CONTRACT:
            if getattr(m, name) != getattr(first, name):
                raise SelectionError(
                    f"{fn}: manifest {m.candidate_id!r} has {name}={getattr(m, name)!r}; "
                    f"allowed: {getattr(first, name)!r}, shared by every candidate"
                )
