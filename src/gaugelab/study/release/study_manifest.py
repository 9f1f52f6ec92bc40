"""The immutable low-rank study manifest: objects before results (seed 003 §0x00F–0x00K).

:class:`LowRankStudyManifest` holds a study's six linked namespaces — the parameter schema and
parameter objects, matrix objects, function objects, dataset splits, rank policies and protocol
envelopes — with the structural ledger they imply. It is validated on construction
(:func:`validate_study_manifest`), so an instance is always a valid manifest; a change is
another manifest with another :meth:`~LowRankStudyManifest.digest`. Every arrow is
directional: a protocol consumes objects and emits a result record (:meth:`result_id`); a
result never changes the object that produced it.

:func:`teaching_manifest` is the seed's Loop-2 teaching fixture, ``m6-7-linear-study-v1``: one
``W[4,6]``, ``d = 3`` global coordinates, a rank-2 LoRA pair with ``s = α/r = 4``, the splits
``train_v1`` / ``eval_v1`` / ``retention_v1`` (6 / 4 / 4 rows), the six rank policies and the
nine envelopes. It is a structural fixture: it trains nothing and its numbers are not results.

This module re-exports the objects (:mod:`~gaugelab.study.release.study_objects`), the envelopes
(:mod:`~gaugelab.study.release.envelopes`), the validator
(:mod:`~gaugelab.study.release.study_checks`), its named errors
(:mod:`~gaugelab.study.release.study_errors`) and the ledger
(:mod:`~gaugelab.study.release.manifest_ledger`).

Source: seed 003 §0x00F–0x00K.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gaugelab.study.release.envelopes import (
    ANALYSIS_PROTOCOL_IDS,
    PROTOCOL_IDS,
    TRAINING_PROTOCOL_IDS,
    AnalysisRecord,
    ProtocolEnvelope,
    TrainingRecord,
)
from gaugelab.study.release.manifest_ledger import study_ledger
from gaugelab.study.release.study_checks import validate_study_manifest
from gaugelab.study.release.study_errors import (
    IdentityError,
    LedgerError,
    ProtocolEnvelopeError,
    RankPolicyFieldError,
    ShapeError,
    SplitSeparationError,
    StudyManifestError,
)
from gaugelab.study.release.study_objects import (
    RANK_POLICIES,
    RANK_POLICY_FIELDS,
    DatasetSplit,
    FunctionObject,
    MatrixObject,
    ParameterObject,
    ParameterSchema,
    RankPolicyRecord,
    payload_digest,
    plain,
)
from gaugelab.study.release.units import sha256_hex

__all__ = [
    "ANALYSIS_PROTOCOL_IDS",
    "PROTOCOL_IDS",
    "RANK_POLICIES",
    "RANK_POLICY_FIELDS",
    "STUDY_MANIFEST_SCHEMA",
    "TRAINING_PROTOCOL_IDS",
    "AnalysisRecord",
    "DatasetSplit",
    "FunctionObject",
    "IdentityError",
    "LedgerError",
    "LowRankStudyManifest",
    "MatrixObject",
    "ParameterObject",
    "ParameterSchema",
    "ProtocolEnvelope",
    "ProtocolEnvelopeError",
    "RankPolicyFieldError",
    "RankPolicyRecord",
    "ShapeError",
    "SplitSeparationError",
    "StudyManifestError",
    "TrainingRecord",
    "payload_digest",
    "study_ledger",
    "teaching_manifest",
    "validate_study_manifest",
]

STUDY_MANIFEST_SCHEMA = "gaugelab.study.release.study_manifest/1"
"""Schema tag inside every digest: a schema change is a new digest."""


@dataclass(frozen=True, kw_only=True)
class LowRankStudyManifest:
    """One immutable study manifest with six linked namespaces and its ledger.

    Attributes:
        manifest_id: the manifest's name (``"m6-7-linear-study-v1"``).
        parameter_schema: the coordinate schema (``row-major W[4,6] -> theta[24]``).
        parameter_objects: ``theta_0``, ``theta_full``, ``delta_theta_full``, ``u``, ….
        matrix_objects: ``W_0``, ``W_full``, ``delta_W_full``, ``A``, ``B``, ``delta_W_lora``, ….
        function_objects: ``f_theta``, ``F_train``, ``J_train``, ``K_train``, ….
        dataset_objects: the frozen splits (``train_v1``, ``eval_v1``, ``retention_v1``, …).
        rank_policies: the rank policies, each naming its matrices.
        protocols: the protocol envelopes (``did_v1`` … ``retention_v1``).
        ledger: the declared structural ledger, line → value (:func:`study_ledger`'s keys).

    Raises:
        StudyManifestError: on construction, the first rule of :func:`validate_study_manifest`
            the manifest breaks — :class:`IdentityError`, :class:`ShapeError`,
            :class:`SplitSeparationError`, :class:`RankPolicyFieldError`,
            :class:`ProtocolEnvelopeError` or :class:`LedgerError` (all ``ValueError``).

    Source: seed 003 §0x00F (the manifest), §0x00K (its validator and ledger).
    """

    manifest_id: str
    parameter_schema: ParameterSchema
    parameter_objects: tuple[ParameterObject, ...]
    matrix_objects: tuple[MatrixObject, ...]
    function_objects: tuple[FunctionObject, ...]
    dataset_objects: tuple[DatasetSplit, ...]
    rank_policies: tuple[RankPolicyRecord, ...]
    protocols: tuple[ProtocolEnvelope, ...]
    ledger: Mapping[str, int | tuple[int, ...]]

    def __post_init__(self) -> None:
        for name in ("parameter_objects", "matrix_objects", "function_objects",
                     "dataset_objects", "rank_policies", "protocols"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)):
                raise IdentityError(
                    f"LowRankStudyManifest: {name}={value!r}; allowed: a tuple of records"
                )
            object.__setattr__(self, name, tuple(value))
        if isinstance(self.ledger, Mapping):
            ledger = {k: tuple(v) if isinstance(v, (tuple, list)) else v
                      for k, v in self.ledger.items()}  # fmt: skip
            object.__setattr__(self, "ledger", MappingProxyType(ledger))
        validate_study_manifest(self)

    def __hash__(self) -> int:
        return hash(self.digest())

    def to_dict(self) -> dict[str, Any]:
        """The manifest as plain JSON values (the object :meth:`digest` hashes)."""
        return {"schema": STUDY_MANIFEST_SCHEMA, **plain(self),
                "ledger": {k: plain(v) for k, v in sorted(self.ledger.items())}}  # fmt: skip

    def digest(self) -> str:
        """``sha256`` hex of the canonical JSON of :meth:`to_dict`."""
        return sha256_hex(self.to_dict())

    def obj(self, object_id: str) -> Any:
        """The parameter, matrix, function or split object named ``object_id``.

        Raises:
            KeyError: no such object.
        """
        for items in (self.parameter_objects, self.matrix_objects, self.function_objects):
            for o in items:
                if o.object_id == object_id:
                    return o
        for s in self.dataset_objects:
            if s.split_id == object_id:
                return s
        raise KeyError(f"LowRankStudyManifest.obj: no object {object_id!r}")

    def envelope(self, envelope_id: str) -> ProtocolEnvelope:
        """The envelope named ``envelope_id``.

        Raises:
            KeyError: no such envelope.
        """
        for e in self.protocols:
            if e.envelope_id == envelope_id:
                return e
        raise KeyError(f"LowRankStudyManifest.envelope: no envelope {envelope_id!r}")

    def result_id(self, envelope_id: str) -> str:
        """The result ID of ``envelope_id`` under this manifest: ``<envelope_id>:<16 hex>`` of
        the envelope and the manifest's digest together, so a result reused under a changed
        envelope (or changed objects) has a new ID (§0x00J).

        Raises:
            KeyError: no such envelope.
        """
        e = self.envelope(envelope_id)
        return f"{envelope_id}:{sha256_hex([e.to_dict(), self.digest()])[:16]}"


_NOT_RUN = "not run in Loop 2: declared by the loop that runs it (§0x00K)"
"""The teaching fixture trains nothing; the seed gives no optimizer, schedule or budget for it."""


def _teaching_training(checkpoint: str) -> TrainingRecord:
    values = {n: _NOT_RUN for n in TrainingRecord.__dataclass_fields__}
    return TrainingRecord(**{**values, "precision": "float64", "checkpoint_rule": checkpoint})


def _teaching_analysis(checkpoints: tuple[str, ...], policies: tuple[str, ...]) -> AnalysisRecord:
    return AnalysisRecord(
        checkpoint_ids=checkpoints,
        extraction_rule="unvec_4x6(theta_full - theta_0), layer0.linear, output-by-input",
        rank_policies=policies,
        backend="exact rational arithmetic (teaching oracle)",
    )


def _teaching_envelopes() -> tuple[ProtocolEnvelope, ...]:
    E, T, A = ProtocolEnvelope, _teaching_training, _teaching_analysis
    select = "checkpoint selected on eval_v1"
    return (
        E(envelope_id="did_v1", protocol="did_v1", trainable=("u",),
          fixed=("theta_0", "train_v1", "eval_v1"),
          settings={"projection_family": "exact orthonormal teaching matrix M[24,3]",
                    "projection_seeds": "none: exact"},
          sweep="candidate d and projection seeds",
          result_contract="score distribution and threshold-qualified d", training=T(select)),
        E(envelope_id="said_v1", protocol="said_v1", trainable=("u",), fixed=("theta_0",),
          settings={"projection": "structured projection with declared layer scales",
                    "budget_convention": "the layer scales count inside d"},
          sweep="candidate total coordinate budget",
          result_contract="score plus explicit scale-coordinate accounting",
          training=T(select)),
        E(envelope_id="full_update_v1", protocol="full_update_v1", trainable=("theta_full",),
          fixed=("theta_0", "train_v1"), sweep="optimizer/seed replication",
          result_contract="checkpoint ID, score, and aligned dense delta", training=T(select)),
        E(envelope_id="lora_v1", protocol="lora_v1", trainable=("A", "B"),
          fixed=("theta_0", "W_0", "train_v1"),
          settings={"scale": "s = alpha/r = 4 (alpha = 8, r = 2)", "init": "A random, B = 0"},
          sweep="rank and seed sweep", result_contract="checkpoint ID, score, and product delta",
          training=T(select)),
        E(envelope_id="svd_reconstruction_v1", protocol="svd_reconstruction_v1", trainable=(),
          fixed=("delta_W_full",), sweep="rank and tolerance policies",
          result_contract="norm residuals, never task quality by itself",
          analysis=A(("theta_full",), ("numerical", "energy"))),
        E(envelope_id="output_weighted_v1", protocol="output_weighted_v1", trainable=(),
          fixed=("delta_W_full", "train_v1"), sweep="rank sweep",
          result_contract="sampled output residual E_X(r) = ||X (dW_full - dW_r)^T||_F",
          analysis=A(("theta_full",), ("configured",))),
        E(envelope_id="subspace_overlap_v1", protocol="subspace_overlap_v1", trainable=(),
          fixed=("delta_W_full", "delta_W_lora"),
          settings={"retained_dimensions": "r = 2", "normalization": "min-rank overlap"},
          sweep="retained dimensions and normalization",
          result_contract="principal angles or overlap statistic",
          analysis=A(("theta_full", "A", "B"), ("configured",))),
        E(envelope_id="kernel_v1", protocol="kernel_v1", trainable=(),
          fixed=("theta_0", "train_v1", "J_train", "K_train"),
          settings={"jacobian_convention": "J = d vec(F_train) / d theta^T at theta_0, "
                    "row-major theta"},
          sweep="full versus restricted features",
          result_contract="kernel discrepancy under declared axes",
          analysis=A(("theta_0",), ("algebraic",))),
        E(envelope_id="retention_v1", protocol="retention_v1", trainable=("theta_full", "A", "B"),
          fixed=("eval_v1", "retention_v1", "train_v1"),
          settings={"budget_matching": "matched budgets", "checkpoint_rule": select},
          sweep="method/rank/seed sweep",
          result_contract="target and retention metrics together", training=T(select)),
    )  # fmt: skip


def teaching_manifest() -> LowRankStudyManifest:
    """The seed's Loop-2 teaching manifest ``m6-7-linear-study-v1`` (a structural fixture).

    ``theta_0 = vec_row(W_0) ∈ R^24`` of one ``W[4,6]`` (layer ``layer0.linear``); ``u ∈ R^3``
    with ``theta(u) = theta_0 + M u``; ``A[2,6]``, ``B[4,2]``, ``r = 2``, ``s = α/r = 4``;
    ``f_theta(x) = W x`` (6 inputs, ``C = 4`` outputs); ``train_v1`` is the identity basis of
    ``R^6`` (§0x04H); ``eval_v1`` and ``retention_v1`` have 4 rows each, whose values the seed
    does not give (sample ids only); the six rank policies with the values of §0x04I
    (``τ_rel = 1e-6``, strict; ``ρ = 0.99``; natural logarithm, zero matrix → 0); the nine
    envelopes; the ledger of §0x00K. What the seed does not give (optimizer, schedule,
    budget of the training envelopes) is stated as not run.

    Returns:
        A validated :class:`LowRankStudyManifest`.

    Source: seed 003 §0x00F–0x00K; §0x04H (``train_v1``), §0x04I–0x04J (the policies' values).
    """
    schema = ParameterSchema("row-major", (("W", (4, 6)),))
    text = schema.text()
    base = {"base_revision": "teaching-base:v1", "dtype_role": "float64 exact teaching values"}
    P, W = ParameterObject, MatrixObject
    parameters = (
        P(object_id="theta_0", kind="base", schema=text, dim=24, **base),
        P(object_id="theta_full", kind="trained", schema=text, dim=24, base_id="theta_0",
          produced_by="full_update_v1", **base),
        P(object_id="delta_theta_full", kind="delta", schema=text, dim=24, base_id="theta_0",
          trained_id="theta_full"),
        P(object_id="u", kind="subspace", schema=text, dim=3, base_id="theta_0",
          produced_by="did_v1", projection_family="exact orthonormal teaching matrix M[24,3]",
          projection_seed="none: exact"),
    )  # fmt: skip
    layer, lora = "layer0.linear", {"target_id": "W_0", "rank": 2, "scale": 4.0}
    matrices = (
        W(object_id="W_0", kind="base", layer_id=layer, shape=(4, 6), axes=("out", "in"),
          tensor="W", parameter_id="theta_0"),
        W(object_id="W_full", kind="trained", layer_id=layer, shape=(4, 6), axes=("out", "in"),
          tensor="W", parameter_id="theta_full"),
        W(object_id="delta_W_full", kind="delta", layer_id=layer, shape=(4, 6),
          axes=("out", "in"), base_id="W_0", trained_id="W_full"),
        W(object_id="A", kind="factor_A", layer_id=layer, shape=(2, 6), axes=("rank", "in"),
          init="A random, B = 0", produced_by="lora_v1", **lora),
        W(object_id="B", kind="factor_B", layer_id=layer, shape=(4, 2), axes=("out", "rank"),
          init="A random, B = 0", produced_by="lora_v1", **lora),
        W(object_id="delta_W_lora", kind="product", layer_id=layer, shape=(4, 6),
          axes=("out", "in"), factor_ids=("B", "A"), **lora),
    )  # fmt: skip
    F = FunctionObject
    functions = (
        F(object_id="f_theta", kind="model", parameter_id="theta_0", input_dim=6, outputs=4),
        F(object_id="F_train", kind="outputs", shape=(6, 4), axes=("sample", "output"),
          model_id="f_theta", dataset_id="train_v1", parameter_id="theta_0"),
        F(object_id="J_train", kind="jacobian", shape=(24, 24),
          axes=("sample*output", "parameter"), source_id="F_train", dataset_id="train_v1",
          parameter_id="theta_0"),
        F(object_id="K_train", kind="kernel", shape=(24, 24),
          axes=("sample*output", "sample*output"), source_id="J_train", dataset_id="train_v1",
          parameter_id="theta_0"),
    )  # fmt: skip
    identity = tuple(tuple(float(i == j) for j in range(6)) for i in range(6))
    S = DatasetSplit
    splits = (
        S(split_id="train_v1", role="train", dataset_id="teaching-linear:v1",
          purpose="optimizer updates and train loss",
          sample_ids=tuple(f"train_v1/{i}" for i in range(6)),
          payload_id=payload_digest(identity), labels_id="train_v1:labels:v1",
          revision="transform:none:v1", payload=identity),
        S(split_id="eval_v1", role="eval", dataset_id="teaching-linear:v1",
          purpose="checkpoint selection and target score",
          sample_ids=tuple(f"eval_v1/{i}" for i in range(4)),
          payload_id="eval_v1:payload:v1 (values not given by the seed)",
          labels_id="eval_v1:labels:v1", revision="metric:v1"),
        S(split_id="retention_v1", role="retention", dataset_id="teaching-retention:v1",
          purpose="non-target behavior", sample_ids=tuple(f"retention_v1/{i}" for i in range(4)),
          payload_id="retention_v1:payload:v1 (values not given by the seed)",
          labels_id="retention_v1:labels:v1", revision="metric:v1"),
    )  # fmt: skip
    R = RankPolicyRecord
    policies = (
        R(policy_id="configured", matrices=("delta_W_lora",),
          fields={"factor_orientation": "B[4,2] A[2,6], dW = s B A", "rank": "2"}),
        R(policy_id="algebraic", matrices=("delta_W_full",), fields={"arithmetic": "exact"}),
        R(policy_id="numerical", matrices=("delta_W_full",),
          fields={"dtype": "float64", "svd_backend": "exact (teaching oracle)",
                  "tolerance_rule": "sigma_i > 1e-6 * sigma_1 (strict)"}),
        R(policy_id="stable", matrices=("delta_W_full",),
          fields={"norm_convention": "||dW||_F^2 / ||dW||_2^2"}),
        R(policy_id="energy", matrices=("delta_W_full",),
          fields={"sort_order": "descending singular values", "energy_threshold": "0.99"}),
        R(policy_id="entropy", matrices=("delta_W_full",),
          fields={"zero_spectrum_policy": "zero matrix -> 0", "log_base": "e"}),
    )  # fmt: skip
    ledger = {
        "D": 24,  # ambient parameter coordinates
        "d[u]": 3,  # global teaching subspace coordinates
        "dense[W_0]": 4 * 6,  # dense matrix coordinates
        "factors[delta_W_lora]": 2 * (6 + 4),  # configured LoRA factor coordinates
        "manifold[delta_W_lora]": 2 * (6 + 4 - 2),  # generic rank-2 matrix-manifold dimension
        "gauge[delta_W_lora]": 2**2,  # factor gauge redundancy
        "rows[train_v1]": 6,
        "rows[eval_v1]": 4,
        "rows[retention_v1]": 4,
        "outputs[F_train]": 6 * 4,  # stacked train outputs N*C
        "shape[J_train]": (24, 24),  # train Jacobian shape
        "shape[K_train]": (24, 24),  # output-space empirical-kernel shape
    }
    return LowRankStudyManifest(
        manifest_id="m6-7-linear-study-v1",
        parameter_schema=schema,
        parameter_objects=parameters,
        matrix_objects=matrices,
        function_objects=functions,
        dataset_objects=splits,
        rank_policies=policies,
        protocols=_teaching_envelopes(),
        ledger=ledger,
    )
