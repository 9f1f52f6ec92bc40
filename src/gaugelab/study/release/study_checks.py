"""The low-rank study manifest's validator (seed 003 §0x00K).

The validator checks shapes, identities, split separation, rank-policy fields, protocol
envelopes and the cross-object ledgers; it does not optimize, train, compute an SVD or evaluate
anything. Each family of checks raises its own error (:mod:`~gaugelab.study.release.study_errors`),
all :class:`StudyManifestError` (a ``ValueError``). The identity checks are in
:mod:`~gaugelab.study.release.study_identity`, the ledger in
:mod:`~gaugelab.study.release.manifest_ledger`.
:class:`~gaugelab.study.release.study_manifest.LowRankStudyManifest` runs the validator on
construction. Re-exported by :mod:`gaugelab.study.release.study_manifest`.

Source: seed 003 §0x00K (the validator), §0x00F–0x00J (what it checks).
"""

from __future__ import annotations

import math
from typing import Any

from gaugelab.study.release.envelopes import (
    ANALYSIS_PROTOCOL_IDS,
    PROTOCOL_IDS,
    REQUIRED_FIXED,
    REQUIRED_SETTINGS,
    REQUIRED_TRAINABLE,
    TRAINING_PROTOCOL_IDS,
    AnalysisRecord,
    ProtocolEnvelope,
    TrainingRecord,
)
from gaugelab.study.release.manifest_ledger import check_ledger
from gaugelab.study.release.study_errors import (
    FN,
    ProtocolEnvelopeError,
    RankPolicyFieldError,
    ShapeError,
    SplitSeparationError,
    require_count,
    require_text,
)
from gaugelab.study.release.study_identity import check_identities
from gaugelab.study.release.study_objects import (
    MATRIX_AXES,
    RANK_POLICIES,
    RANK_POLICY_FIELDS,
    FunctionObject,
    MatrixObject,
    ParameterSchema,
    RankPolicyRecord,
)

__all__ = ["validate_study_manifest"]

_FUNCTION_AXES = {
    "outputs": ("sample", "output"),
    "jacobian": ("sample*output", "parameter"),
    "kernel": ("sample*output", "sample*output"),
}


def validate_study_manifest(manifest: Any) -> None:
    """Refuse a low-rank study manifest whose objects do not fit together.

    Checks, in order: the parameter schema (an order, distinct tensors, integer shapes
    ``>= 1``); identities (ids unique across the object namespaces, references resolved
    to the right kind, subtractions inside one schema, base and layer, products over their own
    factors in ``B A`` order); shapes (schema, dimensions, matrix and factor shapes and axes,
    ``F [N, C]``, ``J [N·C, D]``, ``K [N·C, N·C]``, payload widths); split separation (no sample
    id or payload row in two splits; retention and stress splits on their own dataset);
    rank-policy fields; protocol envelopes (known protocol, trainable and fixed objects,
    settings, the training or analysis record, and an envelope for every trained object); the
    ledger (:func:`study_ledger` equals the declared one).

    Args:
        manifest: a :class:`~gaugelab.study.release.study_manifest.LowRankStudyManifest`
            (any object with its attributes).

    Raises:
        ShapeError (the schema), IdentityError, ShapeError, SplitSeparationError,
        RankPolicyFieldError, ProtocolEnvelopeError, LedgerError: the first rule broken, in
        that order; all
        :class:`StudyManifestError` (``ValueError``).

    Source: seed 003 §0x00K.
    """
    _check_schema(manifest.parameter_schema)  # the schema's text names every identity
    index = check_identities(manifest)
    _check_shapes(manifest, index)
    _check_splits(manifest)
    _check_rank_policies(manifest, index)
    _check_envelopes(manifest, index)
    check_ledger(manifest)


def _shape(where: str, got: object, want: object, why: str) -> None:
    if tuple(got) != tuple(want):  # type: ignore[arg-type]
        raise ShapeError(f"{FN}: {where}={list(got)}; allowed: {list(want)} ({why})")  # type: ignore[call-overload]


def _check_schema(schema: Any) -> None:
    if not isinstance(schema, ParameterSchema):
        raise ShapeError(f"{FN}: parameter_schema={schema!r}; allowed: a ParameterSchema")
    if schema.order not in ("row-major", "column-major"):
        raise ShapeError(f"{FN}: parameter_schema.order={schema.order!r}; allowed: row-major, "
                         "column-major")  # fmt: skip
    names = [n for n, _ in schema.tensors]
    if not names or len(set(names)) != len(names):
        raise ShapeError(f"{FN}: parameter_schema.tensors={names}; allowed: >= 1 distinct names")
    for n, s in schema.tensors:
        if not isinstance(s, tuple) or not s or any(
            isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in s
        ):
            raise ShapeError(f"{FN}: parameter_schema {n}: shape {s!r}; allowed: integers >= 1")


def _check_shapes(m: Any, index: dict) -> None:
    schema = m.parameter_schema
    D = schema.ambient()
    for p in m.parameter_objects:
        where = f"parameter {p.object_id!r}.dim"
        dim = require_count(ShapeError, where, p.dim)
        if p.kind == "subspace" and dim > D:
            raise ShapeError(f"{FN}: {where}={dim}; allowed: 1..{D} (d <= D)")
        if p.kind != "subspace" and dim != D:
            raise ShapeError(f"{FN}: {where}={dim}; allowed: {D}, the schema's D")
    for w in m.matrix_objects:
        if len(w.shape) != 2 or any(
            isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in w.shape
        ):
            raise ShapeError(f"{FN}: matrix {w.object_id!r}.shape={w.shape!r}; allowed: "
                             "(rows, columns) >= 1")  # fmt: skip
    for w in m.matrix_objects:
        _matrix_shape(w, index, schema)
    models = [f for f in m.function_objects if f.kind == "model"]
    order = ("model", "outputs", "jacobian", "kernel")
    for f in sorted(m.function_objects, key=lambda f: order.index(f.kind)):
        _function_shape(f, index, D)
    for s in m.dataset_objects:
        if s.payload is None:
            continue
        where = f"split {s.split_id!r}.payload"
        if len(s.payload) != s.rows:
            raise ShapeError(f"{FN}: {where} has {len(s.payload)} rows; allowed: {s.rows}, one "
                             "per sample id")  # fmt: skip
        for model in models:
            for row in s.payload:
                _shape(f"{where} row width", [len(row)], [model.input_dim],
                       f"{model.object_id}'s input width")  # fmt: skip


def _matrix_shape(w: MatrixObject, index: dict, schema: ParameterSchema) -> None:
    where = f"matrix {w.object_id!r}"
    _shape(f"{where}.axes", w.axes, MATRIX_AXES[w.kind], f"the axes of a {w.kind} matrix")
    if w.kind in ("base", "trained"):
        _shape(f"{where}.shape", w.shape, schema.shape_of(w.tensor), f"schema tensor {w.tensor}")
    elif w.kind == "delta":
        _shape(f"{where}.shape", w.shape, index[w.base_id][1].shape, "its base's shape")
        _shape(f"{where}.shape", w.shape, index[w.trained_id][1].shape, "its trained shape")
    else:
        out, inp = index[w.target_id][1].shape
        want = {"factor_A": (w.rank, inp), "factor_B": (out, w.rank), "product": (out, inp)}
        rule = {"factor_A": "A ∈ R^{r×d_in}", "factor_B": "B ∈ R^{d_out×r}",
                "product": "s·B A has its target's shape"}  # fmt: skip
        _shape(f"{where}.shape", w.shape, want[w.kind], rule[w.kind])


def _function_shape(f: FunctionObject, index: dict, D: int) -> None:
    where = f"function {f.object_id!r}"
    if f.kind == "model":
        require_count(ShapeError, f"{where}.input_dim", f.input_dim)
        require_count(ShapeError, f"{where}.outputs", f.outputs)
        return
    _shape(f"{where}.axes", f.axes, _FUNCTION_AXES[f.kind],
           "J Jᵀ is the output-space kernel; Jᵀ J is another object" if f.kind == "kernel"
           else f"the axes of {f.kind}")  # fmt: skip
    if f.kind == "outputs":
        rows = index[f.dataset_id][1].rows
        _shape(f"{where}.shape", f.shape, (rows, index[f.model_id][1].outputs),
               f"[N, C]: {f.dataset_id}'s rows × the model's outputs")  # fmt: skip
        return
    src = index[f.source_id][1]
    nc = math.prod(src.shape) if f.kind == "jacobian" else src.shape[0]
    want, rule = ((nc, D), "[N·C, D]") if f.kind == "jacobian" else ((nc, nc), "[N·C, N·C]")
    _shape(f"{where}.shape", f.shape, want, rule)


def _check_splits(m: Any) -> None:
    owner: dict[str, str] = {}
    rows: dict[tuple, str] = {}
    for s in m.dataset_objects:
        where = f"split {s.split_id!r}"
        if s.role not in ("train", "eval", "retention", "stress", "test"):
            raise SplitSeparationError(f"{FN}: {where}.role={s.role!r}; allowed: train, eval, "
                                       "retention, stress, test")  # fmt: skip
        if s.rows < 1:
            raise SplitSeparationError(f"{FN}: {where} has no sample ids; allowed: >= 1 row")
        for sid in s.sample_ids:
            require_text(SplitSeparationError, f"{where} sample id", sid)
            if sid in owner:
                same = "twice" if owner[sid] == s.split_id else f"in {owner[sid]!r} too"
                raise SplitSeparationError(
                    f"{FN}: {where} holds sample id {sid!r} {same}; allowed: disjoint splits "
                    "(no row shared)"
                )
            owner[sid] = s.split_id
        for i, row in enumerate(s.payload or ()):
            key = tuple(float(v) for v in row)
            if key in rows and rows[key] != s.split_id:
                raise SplitSeparationError(
                    f"{FN}: {where} payload row {i} {list(key)} is a row of {rows[key]!r}; "
                    "allowed: disjoint splits (no row shared)"
                )
            rows[key] = s.split_id
    by_role: dict[str, set[str]] = {}
    for s in m.dataset_objects:
        by_role.setdefault(s.role, set()).add(s.dataset_id)
    for s in m.dataset_objects:
        others = ("train", "eval") if s.role == "retention" else ("train",)
        if s.role in ("retention", "stress"):
            used = set().union(*(by_role.get(r, set()) for r in others))
            if s.dataset_id in used:
                raise SplitSeparationError(
                    f"{FN}: split {s.split_id!r}.dataset_id={s.dataset_id!r} is the dataset of "
                    f"a {'/'.join(others)} split; allowed: a separate dataset ID"
                )


def _check_rank_policies(m: Any, index: dict) -> None:
    seen: set[tuple[str, str]] = set()
    for r in m.rank_policies:
        if not isinstance(r, RankPolicyRecord):
            raise RankPolicyFieldError(f"{FN}: rank_policies holds {type(r).__name__}; allowed: "
                                       "RankPolicyRecord")  # fmt: skip
        where = f"rank policy {r.policy_id!r}"
        if r.policy_id not in RANK_POLICIES:
            raise RankPolicyFieldError(f"{FN}: {where}: unknown policy; allowed: "
                                       f"{', '.join(RANK_POLICIES)}")  # fmt: skip
        if not r.matrices:
            raise RankPolicyFieldError(f"{FN}: {where}.matrices=(); allowed: >= 1 matrix ID")
        required = RANK_POLICY_FIELDS[r.policy_id]
        for name in required:
            if not isinstance(r.fields.get(name), str) or not r.fields[name].strip():
                raise RankPolicyFieldError(
                    f"{FN}: {where}.fields[{name!r}]={r.fields.get(name)!r}; allowed: a "
                    f"non-empty value (required: matrix, {', '.join(required)})"
                )
        extra = sorted(set(r.fields) - set(required))
        if extra:
            raise RankPolicyFieldError(f"{FN}: {where}.fields has {extra}; allowed: "
                                       f"{', '.join(required)}")  # fmt: skip
        for mid in r.matrices:
            if mid not in index or index[mid][0] != "matrix":
                raise RankPolicyFieldError(f"{FN}: {where}.matrices holds {mid!r}; allowed: a "
                                           "declared matrix ID")  # fmt: skip
            if (r.policy_id, mid) in seen:
                raise RankPolicyFieldError(f"{FN}: {where} is declared twice for {mid!r}")
            seen.add((r.policy_id, mid))
            w = index[mid][1]
            if r.policy_id == "configured" and (w.kind != "product"
                                                or r.fields["rank"] != str(w.rank)):  # fmt: skip
                raise RankPolicyFieldError(
                    f"{FN}: {where}.fields['rank']={r.fields['rank']!r} for {w.kind} {mid!r}; "
                    f"allowed: a LoRA product's configured rank ({w.rank!r})"
                )


def _matches(index: dict, oid: str, token: str) -> bool:
    ns, obj = index[oid]
    kind = obj.role if ns == "split" else obj.kind
    return any(ns == t.split(":")[0] and t.split(":")[1] in ("*", kind) for t in token.split("|"))


def _check_envelopes(m: Any, index: dict) -> None:
    envelopes: dict[str, ProtocolEnvelope] = {}
    policies = {r.policy_id for r in m.rank_policies}
    for e in m.protocols:
        if not isinstance(e, ProtocolEnvelope):
            raise ProtocolEnvelopeError(f"{FN}: protocols holds {type(e).__name__}; allowed: "
                                        "ProtocolEnvelope")  # fmt: skip
        require_text(ProtocolEnvelopeError, "envelope_id", e.envelope_id)
        where = f"envelope {e.envelope_id!r}"
        if e.envelope_id in envelopes:
            raise ProtocolEnvelopeError(f"{FN}: {where} is declared twice; allowed: one each")
        envelopes[e.envelope_id] = e
        if e.protocol not in PROTOCOL_IDS:
            raise ProtocolEnvelopeError(f"{FN}: {where}.protocol={e.protocol!r}; allowed: "
                                        f"{', '.join(PROTOCOL_IDS)}")  # fmt: skip
        _envelope_objects(e, index, where)
        for name in ("sweep", "result_contract"):
            require_text(ProtocolEnvelopeError, f"{where}.{name}", getattr(e, name))
        for name in REQUIRED_SETTINGS.get(e.protocol, ()):
            require_text(ProtocolEnvelopeError, f"{where}.settings[{name!r}]", e.settings.get(name))
        _envelope_record(e, index, where, policies)
    trained = [p for p in m.parameter_objects if p.kind in ("trained", "subspace")]
    trained += [w for w in m.matrix_objects if w.kind in ("factor_A", "factor_B")]
    for obj in trained:
        e = envelopes.get(obj.produced_by)
        if e is None or obj.object_id not in e.trainable:
            raise ProtocolEnvelopeError(
                f"{FN}: {obj.object_id!r}.produced_by={obj.produced_by!r} has no envelope "
                "training it; allowed: the envelope_id of a declared envelope whose trainable "
                f"objects include it (declared: {', '.join(envelopes) or 'none'})"
            )


def _envelope_objects(e: ProtocolEnvelope, index: dict, where: str) -> None:
    for name in ("trainable", "fixed"):
        for oid in getattr(e, name):
            if oid not in index:
                raise ProtocolEnvelopeError(f"{FN}: {where}.{name} holds {oid!r}; allowed: a "
                                            "declared object ID")  # fmt: skip
    if e.protocol in TRAINING_PROTOCOL_IDS:
        for token in REQUIRED_TRAINABLE[e.protocol]:
            if not any(_matches(index, oid, token) for oid in e.trainable):
                raise ProtocolEnvelopeError(f"{FN}: {where}.trainable={list(e.trainable)}; "
                                            f"allowed: it includes a {token} object")  # fmt: skip
    elif e.trainable and e.protocol != "kernel_v1":
        raise ProtocolEnvelopeError(f"{FN}: {where}.trainable={list(e.trainable)}; allowed: () "
                                    "(an analysis protocol trains nothing)")  # fmt: skip
    free = list(e.fixed)
    for token in REQUIRED_FIXED[e.protocol]:
        hit = next((oid for oid in free if _matches(index, oid, token)), None)
        if hit is None:
            need = ", ".join(REQUIRED_FIXED[e.protocol])
            raise ProtocolEnvelopeError(f"{FN}: {where}.fixed={list(e.fixed)}; allowed: fixed "
                                        f"objects covering {need}")  # fmt: skip
        free.remove(hit)


def _envelope_record(e: ProtocolEnvelope, index: dict, where: str, policies: set[str]) -> None:
    if e.protocol in TRAINING_PROTOCOL_IDS:
        if not isinstance(e.training, TrainingRecord) or e.analysis is not None:
            raise ProtocolEnvelopeError(f"{FN}: {where}: a training protocol; allowed: a "
                                        "TrainingRecord and no AnalysisRecord")  # fmt: skip
        for name in TrainingRecord.__dataclass_fields__:
            value = getattr(e.training, name)
            require_text(ProtocolEnvelopeError, f"{where}.training.{name}", value)
        return
    assert e.protocol in ANALYSIS_PROTOCOL_IDS
    a = e.analysis
    if not isinstance(a, AnalysisRecord) or e.training is not None:
        raise ProtocolEnvelopeError(f"{FN}: {where}: an analysis protocol; allowed: an "
                                    "AnalysisRecord and no TrainingRecord")  # fmt: skip
    for name in ("extraction_rule", "backend"):
        require_text(ProtocolEnvelopeError, f"{where}.analysis.{name}", getattr(a, name))
    if not a.checkpoint_ids or any(c not in index for c in a.checkpoint_ids):
        raise ProtocolEnvelopeError(f"{FN}: {where}.analysis.checkpoint_ids="
                                    f"{list(a.checkpoint_ids)}; allowed: >= 1 declared object")
    if not a.rank_policies or any(p not in policies for p in a.rank_policies):
        raise ProtocolEnvelopeError(
            f"{FN}: {where}.analysis.rank_policies={list(a.rank_policies)}; allowed: >= 1 of "
            f"the manifest's policies ({', '.join(sorted(policies)) or 'none'})"
        )
