"""Protocol envelopes: one result, one envelope (seed 003 §0x00J).

The manifest gives each later experiment its own immutable envelope: the trainable object, the
fixed objects, the required sweep or comparison and the result contract, with a
:class:`TrainingRecord` for a training protocol or an :class:`AnalysisRecord` for an analysis
protocol. The envelope is part of its result's identity
(:meth:`gaugelab.study.release.study_manifest.LowRankStudyManifest.result_id`), so reusing a
result under a changed envelope is a new result ID, never a silent mutation of the old one.
Re-exported by :mod:`gaugelab.study.release.study_manifest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gaugelab.study.release.study_objects import plain

__all__ = [
    "ANALYSIS_PROTOCOL_IDS",
    "PROTOCOL_IDS",
    "REQUIRED_FIXED",
    "REQUIRED_SETTINGS",
    "REQUIRED_TRAINABLE",
    "TRAINING_PROTOCOL_IDS",
    "AnalysisRecord",
    "ProtocolEnvelope",
    "TrainingRecord",
]

PROTOCOL_IDS: tuple[str, ...] = (
    "did_v1",
    "said_v1",
    "full_update_v1",
    "lora_v1",
    "svd_reconstruction_v1",
    "output_weighted_v1",
    "subspace_overlap_v1",
    "kernel_v1",
    "retention_v1",
)
"""The nine protocol IDs of §0x00J, in the seed's order."""

TRAINING_PROTOCOL_IDS: tuple[str, ...] = (
    "did_v1",
    "said_v1",
    "full_update_v1",
    "lora_v1",
    "retention_v1",
)
"""Protocols that train an object: they carry a :class:`TrainingRecord`."""

ANALYSIS_PROTOCOL_IDS: tuple[str, ...] = tuple(
    p for p in PROTOCOL_IDS if p not in TRAINING_PROTOCOL_IDS
)
"""Protocols that analyse fixed objects: they carry an :class:`AnalysisRecord`. Their trainable
object is none, except ``kernel_v1``'s, which is protocol-dependent."""

REQUIRED_TRAINABLE: dict[str, tuple[str, ...]] = {
    "did_v1": ("parameter:subspace",),
    "said_v1": ("parameter:subspace",),
    "full_update_v1": ("parameter:trained",),
    "lora_v1": ("matrix:factor_A", "matrix:factor_B"),
    "retention_v1": ("parameter:trained|matrix:factor_A",),
}
"""The trainable object of each training protocol as ``namespace:kind`` (``|``: either): DID
and SAID the global coordinates ``u``, full update the full parameter object, LoRA the declared
``A, B`` factors only, retention full or adapter parameters."""

REQUIRED_FIXED: dict[str, tuple[str, ...]] = {
    "did_v1": ("parameter:base", "split:train", "split:eval"),
    "said_v1": ("parameter:base",),
    "full_update_v1": ("parameter:base", "split:train"),
    "lora_v1": ("parameter:base", "matrix:base", "split:train"),
    "svd_reconstruction_v1": ("matrix:delta",),
    "output_weighted_v1": ("matrix:delta", "split:*"),
    "subspace_overlap_v1": ("matrix:*", "matrix:*"),
    "kernel_v1": ("parameter:base", "split:*"),
    "retention_v1": ("split:eval", "split:retention"),
}
"""The fixed objects each envelope must name, ``namespace:kind`` (``*``: any kind; a repeated
entry: that many distinct objects), from §0x00J's *fixed objects* column: DID base and
train/eval splits; SAID base; full update base and data; LoRA base and target matrix;
reconstruction the aligned dense delta; output-weighted the dense delta and a named input
split; overlap two named matrix objects; kernel the base point and a named dataset; retention
the target and retention splits its metrics are reported on together."""

REQUIRED_SETTINGS: dict[str, tuple[str, ...]] = {
    "did_v1": ("projection_family", "projection_seeds"),
    "said_v1": ("projection", "budget_convention"),
    "lora_v1": ("scale", "init"),
    "subspace_overlap_v1": ("retained_dimensions", "normalization"),
    "kernel_v1": ("jacobian_convention",),
    "retention_v1": ("budget_matching", "checkpoint_rule"),
}
"""Fixed conventions that are not objects, from the same column (projection family/seed,
structured projection and budget convention, scale/init, retained dimensions and
normalization, Jacobian convention, matched budgets and checkpoint rule)."""


def _frozen_text_map(value: object) -> object:
    return MappingProxyType(dict(sorted(value.items()))) if isinstance(value, Mapping) else value


@dataclass(frozen=True, kw_only=True)
class TrainingRecord:
    """What every training protocol records (§0x00J), each a non-empty statement.

    Attributes:
        optimizer, optimizer_revision: the optimizer's name and revision.
        hyperparameters, schedule: its hyperparameters and learning-rate schedule.
        budget: steps or tokens.
        batching, precision, clipping, regularization: as run (``"none"`` is a statement).
        seed_roles: every seed and its role.
        eval_cadence, checkpoint_rule: when it evaluates and how a checkpoint is selected.
    """

    optimizer: str
    optimizer_revision: str
    hyperparameters: str
    schedule: str
    budget: str
    batching: str
    precision: str
    clipping: str
    regularization: str
    seed_roles: str
    eval_cadence: str
    checkpoint_rule: str


@dataclass(frozen=True, kw_only=True)
class AnalysisRecord:
    """What every analysis protocol records (§0x00J).

    Attributes:
        checkpoint_ids: the exact checkpoint (parameter or matrix) objects it reads.
        extraction_rule: how the matrix is extracted from them.
        rank_policies: the rank policies it applies (policy IDs of the manifest).
        backend: the SVD or numerical backend.
    """

    checkpoint_ids: tuple[str, ...]
    extraction_rule: str
    rank_policies: tuple[str, ...]
    backend: str

    def __post_init__(self) -> None:
        for name in ("checkpoint_ids", "rank_policies"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))


@dataclass(frozen=True, kw_only=True)
class ProtocolEnvelope:
    """The immutable envelope of one protocol in one manifest.

    Attributes:
        envelope_id: its identity in the manifest (the protocol ID, or the protocol ID with a
            suffix when one study runs the protocol under two envelopes).
        protocol: one of :data:`PROTOCOL_IDS`.
        trainable: the object(s) it trains (:data:`REQUIRED_TRAINABLE`); ``()`` for analysis.
        fixed: the objects it holds fixed (:data:`REQUIRED_FIXED`).
        settings: the fixed conventions that are not objects (:data:`REQUIRED_SETTINGS`).
        sweep: the required sweep or comparison.
        result_contract: what its result reports.
        training: a training protocol's :class:`TrainingRecord` (else ``None``).
        analysis: an analysis protocol's :class:`AnalysisRecord` (else ``None``).

    Source: seed 003 §0x00J.
    """

    envelope_id: str
    protocol: str
    trainable: tuple[str, ...]
    fixed: tuple[str, ...]
    sweep: str
    result_contract: str
    settings: Mapping[str, str] = field(default_factory=dict)
    training: TrainingRecord | None = None
    analysis: AnalysisRecord | None = None

    def __post_init__(self) -> None:
        for name in ("trainable", "fixed"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "settings", _frozen_text_map(self.settings))

    def to_dict(self) -> dict[str, Any]:
        """The envelope as plain JSON values."""
        return plain(self)
