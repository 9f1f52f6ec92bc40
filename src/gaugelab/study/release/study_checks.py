"""The low-rank study manifest's validator and its named errors (seed 003 §0x00K).

The validator checks shapes, identities, split separation, rank-policy fields, protocol
envelopes and the cross-object ledgers; it does not optimize, train, compute an SVD or evaluate
anything. Each family of checks raises its own error, all :class:`StudyManifestError` (a
``ValueError``), each message naming the namespace, the object, the field, the value and what is
allowed. :class:`~gaugelab.study.release.study_manifest.LowRankStudyManifest` runs it on
construction. Re-exported by :mod:`gaugelab.study.release.study_manifest`.

Source: seed 003 §0x00K (the validator), §0x00F–0x00J (what it checks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gaugelab.study.release.envelopes import (
    ANALYSIS_PROTOCOLS,
    PROTOCOLS,
    REQUIRED_FIXED,
    REQUIRED_SETTINGS,
    REQUIRED_TRAINABLE,
    TRAINING_PROTOCOLS,
    AnalysisRecord,
    ProtocolEnvelope,
    TrainingRecord,
)
from gaugelab.study.release.study_objects import (
    MATRIX_AXES,
    RANK_POLICIES,
    RANK_POLICY_FIELDS,
    DatasetSplit,
    FunctionObject,
    MatrixObject,
    ParameterObject,
    ParameterSchema,
    RankPolicyRecord,
    payload_digest,
)

__all__ = [
    "IdentityError",
    "LedgerError",
    "ProtocolEnvelopeError",
    "RankPolicyFieldError",
    "ShapeError",
    "SplitSeparationError",
    "StudyManifestError",
    "study_ledger",
    "validate_study_manifest",
]

FN = "validate_study_manifest"
_FUNCTION_AXES = {
    "outputs": ("sample", "output"),
    "jacobian": ("sample*output", "parameter"),
    "kernel": ("sample*output", "sample*output"),
}


class StudyManifestError(ValueError):
    """A low-rank study manifest that fails validation (the base of the six named errors)."""


class ShapeError(StudyManifestError):
    """A shape or axis disagrees with the objects it is derived from (§0x00G–0x00H)."""


class IdentityError(StudyManifestError):
    """An identity is missing, repeated, unresolved or collapsed: e.g. a subtraction across
    schemas ("shape equality alone is insufficient", §0x00G)."""


class SplitSeparationError(StudyManifestError):
    """Two splits share a row, or a retention or stress split shares its dataset (§0x00H)."""


class RankPolicyFieldError(StudyManifestError):
    """A rank policy without its matrix or a required policy field (§0x00I)."""


class ProtocolEnvelopeError(StudyManifestError):
    """A missing, unknown or incomplete protocol envelope (§0x00J)."""


class LedgerError(StudyManifestError):
    """The declared ledger disagrees with the one derived from the objects (§0x00K)."""


def _text(err: type[StudyManifestError], where: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise err(f"{FN}: {where}={value!r}; allowed: a non-empty string")


def _count(err: type[StudyManifestError], where: str, value: object, *, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise err(f"{FN}: {where}={value!r}; allowed: an integer >= {low}")
    return value


def _ref(index: dict, where: str, ref: object, want: str, kinds: tuple[str, ...] | None = None):
    """The object ``ref`` names, of namespace ``want`` and one of ``kinds``."""
    _text(IdentityError, where, ref)
    if ref not in index:
        raise IdentityError(f"{FN}: {where}={ref!r} names no declared object; allowed: a "
                            f"declared {want} object")  # fmt: skip
    ns, obj = index[ref]
    kind = getattr(obj, "role" if ns == "split" else "kind")
    if ns != want or (kinds is not None and kind not in kinds):
        allowed = f"{want} {'/'.join(kinds)}" if kinds else want
        raise IdentityError(f"{FN}: {where}={ref!r} is a {ns} {kind}; allowed: a {allowed}")
    return obj


def _same(where: str, name: str, got: object, want: object, why: str) -> None:
    if got != want:
        raise IdentityError(f"{FN}: {where}.{name}={got!r}; allowed: {want!r} ({why})")


def validate_study_manifest(manifest: Any) -> None:
    """Refuse a low-rank study manifest whose objects do not fit together.

    Checks, in order: identities (ids unique across the object namespaces, references resolved
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
        IdentityError, ShapeError, SplitSeparationError, RankPolicyFieldError,
        ProtocolEnvelopeError, LedgerError: the first rule broken, in that order; all
        :class:`StudyManifestError` (``ValueError``).

    Source: seed 003 §0x00K.
    """
    index = _check_identities(manifest)
    _check_shapes(manifest, index)
    _check_splits(manifest)
    _check_rank_policies(manifest, index)
    _check_envelopes(manifest, index)
    _check_ledger(manifest)


def _check_identities(m: Any) -> dict[str, tuple[str, Any]]:
    _text(IdentityError, "manifest_id", m.manifest_id)
    if not isinstance(m.parameter_schema, ParameterSchema):
        raise IdentityError(f"{FN}: parameter_schema={m.parameter_schema!r}; allowed: a "
                            "ParameterSchema")  # fmt: skip
    index: dict[str, tuple[str, Any]] = {}
    spaces = (("parameter", ParameterObject, m.parameter_objects),
              ("matrix", MatrixObject, m.matrix_objects),
              ("function", FunctionObject, m.function_objects),
              ("split", DatasetSplit, m.dataset_objects))  # fmt: skip
    for ns, cls, items in spaces:
        for obj in items:
            if not isinstance(obj, cls):
                raise IdentityError(f"{FN}: {ns} namespace holds {type(obj).__name__}; "
                                    f"allowed: {cls.__name__}")  # fmt: skip
            oid = obj.split_id if ns == "split" else obj.object_id
            _text(IdentityError, f"{ns} id", oid)
            if oid in index:
                raise IdentityError(
                    f"{FN}: object id {oid!r} is declared twice ({index[oid][0]} and {ns}); "
                    "allowed: one object per id (factors, product and dense update are distinct)"
                )
            index[oid] = (ns, obj)
    schema = m.parameter_schema.text()
    for p in m.parameter_objects:
        _parameter_identity(p, index, schema)
    for w in m.matrix_objects:
        _matrix_identity(w, index, m.parameter_schema)
    for f in m.function_objects:
        _function_identity(f, index)
    for s in m.dataset_objects:
        where = f"split {s.split_id!r}"
        for name in ("dataset_id", "purpose", "payload_id", "labels_id", "revision"):
            _text(IdentityError, f"{where}.{name}", getattr(s, name))
        if s.payload is not None:
            _same(where, "payload_id", s.payload_id, payload_digest(s.payload),
                  "the digest of its payload")  # fmt: skip
    return index


def _parameter_identity(p: ParameterObject, index: dict, schema: str) -> None:
    where = f"parameter {p.object_id!r}"
    if p.kind not in ("base", "trained", "delta", "subspace"):
        raise IdentityError(f"{FN}: {where}.kind={p.kind!r}; allowed: base, trained, delta, "
                            "subspace")  # fmt: skip
    need = {"base": ("base_revision", "dtype_role"),
            "trained": ("base_revision", "dtype_role", "produced_by"),
            "delta": (), "subspace": ("projection_family", "projection_seed", "produced_by")}
    for name in need[p.kind]:  # fmt: skip
        _text(IdentityError, f"{where}.{name}", getattr(p, name))
    if p.kind == "base":
        _same(where, "schema", p.schema, schema, "the manifest's parameter schema")
        return
    base = _ref(index, f"{where}.base_id", p.base_id, "parameter", ("base",))
    why = "its base's schema and coordinate order: shape equality alone is insufficient"
    _same(where, "schema", p.schema, base.schema, why)
    if p.kind == "trained":
        _same(where, "base_revision", p.base_revision, base.base_revision, "its base's revision")
    elif p.kind == "delta":
        trained = _ref(index, f"{where}.trained_id", p.trained_id, "parameter", ("trained",))
        _same(where, "trained base_id", trained.base_id, p.base_id, "trained from this base")


def _matrix_identity(w: MatrixObject, index: dict, schema: ParameterSchema) -> None:
    where = f"matrix {w.object_id!r}"
    if w.kind not in MATRIX_AXES:
        raise IdentityError(f"{FN}: {where}.kind={w.kind!r}; allowed: {', '.join(MATRIX_AXES)}")
    _text(IdentityError, f"{where}.layer_id", w.layer_id)
    if w.kind in ("base", "trained"):
        _ref(index, f"{where}.parameter_id", w.parameter_id, "parameter", (w.kind,))
        if schema.shape_of(w.tensor) is None:
            raise IdentityError(f"{FN}: {where}.tensor={w.tensor!r} is not in the schema; "
                                f"allowed: {', '.join(n for n, _ in schema.tensors)}")  # fmt: skip
    elif w.kind == "delta":
        base = _ref(index, f"{where}.base_id", w.base_id, "matrix", ("base",))
        trained = _ref(index, f"{where}.trained_id", w.trained_id, "matrix", ("trained",))
        for other in (base, trained):
            _same(where, "layer_id", other.layer_id, w.layer_id, "one layer")
        _same(where, "trained tensor", trained.tensor, base.tensor, "one tensor of the schema")
        theta = _ref(index, f"{where}.trained parameter_id", trained.parameter_id, "parameter",
                     ("trained",))  # fmt: skip
        _same(where, "trained base", theta.base_id, base.parameter_id, "trained from this base")
    else:
        target = _ref(index, f"{where}.target_id", w.target_id, "matrix", ("base",))
        _same(where, "layer_id", w.layer_id, target.layer_id, "its target matrix's layer")
        rank = _count(IdentityError, f"{where}.rank", w.rank)
        if isinstance(w.scale, bool) or not isinstance(w.scale, (int, float)) or not (
            math.isfinite(w.scale) and w.scale > 0
        ):
            raise IdentityError(f"{FN}: {where}.scale={w.scale!r}; allowed: a finite s > 0")
        if w.kind == "product":
            _product_identity(w, index, rank, where)
        else:
            _text(IdentityError, f"{where}.init", w.init)
            _text(IdentityError, f"{where}.produced_by", w.produced_by)


def _product_identity(w: MatrixObject, index: dict, rank: int, where: str) -> None:
    if len(w.factor_ids) != 2:
        raise IdentityError(f"{FN}: {where}.factor_ids={w.factor_ids!r}; allowed: (B, A), the "
                            "factors in multiplication order")  # fmt: skip
    b = _ref(index, f"{where}.factor_ids[0]", w.factor_ids[0], "matrix", ("factor_B",))
    a = _ref(index, f"{where}.factor_ids[1]", w.factor_ids[1], "matrix", ("factor_A",))
    for f in (b, a):
        _same(where, f"{f.object_id} target_id", f.target_id, w.target_id, "one target")
        _same(where, f"{f.object_id} rank", f.rank, rank, "the product's configured rank")
        _same(where, f"{f.object_id} scale", f.scale, w.scale, "the product's scale")
    _same(where, "B produced_by", b.produced_by, a.produced_by, "one training envelope")


def _function_identity(f: FunctionObject, index: dict) -> None:
    where = f"function {f.object_id!r}"
    if f.kind not in ("model", "outputs", "jacobian", "kernel"):
        raise IdentityError(f"{FN}: {where}.kind={f.kind!r}; allowed: model, outputs, "
                            "jacobian, kernel")  # fmt: skip
    if f.kind == "model":
        _ref(index, f"{where}.parameter_id", f.parameter_id, "parameter", ("base",))
        return
    _ref(index, f"{where}.dataset_id", f.dataset_id, "split")
    if f.kind == "outputs":
        _ref(index, f"{where}.model_id", f.model_id, "function", ("model",))
        _ref(index, f"{where}.parameter_id", f.parameter_id, "parameter", ("base", "trained"))
        return
    src_kind = "outputs" if f.kind == "jacobian" else "jacobian"
    src = _ref(index, f"{where}.source_id", f.source_id, "function", (src_kind,))
    _ref(index, f"{where}.parameter_id", f.parameter_id, "parameter", ("base",))
    _same(where, "dataset_id", f.dataset_id, src.dataset_id, f"its {src_kind}' dataset")
    _same(where, "parameter_id", f.parameter_id, src.parameter_id, f"its {src_kind}' point")


def _shape(where: str, got: object, want: object, why: str) -> None:
    if tuple(got) != tuple(want):  # type: ignore[arg-type]
        raise ShapeError(f"{FN}: {where}={list(got)}; allowed: {list(want)} ({why})")  # type: ignore[call-overload]


def _check_shapes(m: Any, index: dict) -> None:
    schema = m.parameter_schema
    if schema.order not in ("row-major", "column-major"):
        raise ShapeError(f"{FN}: parameter_schema.order={schema.order!r}; allowed: row-major, "
                         "column-major")  # fmt: skip
    names = [n for n, _ in schema.tensors]
    if not names or len(set(names)) != len(names):
        raise ShapeError(f"{FN}: parameter_schema.tensors={names}; allowed: >= 1 distinct names")
    for n, s in schema.tensors:
        if not s or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in s):
            raise ShapeError(f"{FN}: parameter_schema {n}{list(s)}; allowed: integers >= 1")
    D = schema.ambient()
    for p in m.parameter_objects:
        where = f"parameter {p.object_id!r}.dim"
        dim = _count(ShapeError, where, p.dim)
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
        _count(ShapeError, f"{where}.input_dim", f.input_dim)
        _count(ShapeError, f"{where}.outputs", f.outputs)
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
            _text(SplitSeparationError, f"{where} sample id", sid)
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
        _text(ProtocolEnvelopeError, "envelope_id", e.envelope_id)
        where = f"envelope {e.envelope_id!r}"
        if e.envelope_id in envelopes:
            raise ProtocolEnvelopeError(f"{FN}: {where} is declared twice; allowed: one each")
        envelopes[e.envelope_id] = e
        if e.protocol not in PROTOCOLS:
            raise ProtocolEnvelopeError(f"{FN}: {where}.protocol={e.protocol!r}; allowed: "
                                        f"{', '.join(PROTOCOLS)}")  # fmt: skip
        _envelope_objects(e, index, where)
        for name in ("sweep", "result_contract"):
            _text(ProtocolEnvelopeError, f"{where}.{name}", getattr(e, name))
        for name in REQUIRED_SETTINGS.get(e.protocol, ()):
            _text(ProtocolEnvelopeError, f"{where}.settings[{name!r}]", e.settings.get(name))
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
    if e.protocol in TRAINING_PROTOCOLS:
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
    if e.protocol in TRAINING_PROTOCOLS:
        if not isinstance(e.training, TrainingRecord) or e.analysis is not None:
            raise ProtocolEnvelopeError(f"{FN}: {where}: a training protocol; allowed: a "
                                        "TrainingRecord and no AnalysisRecord")  # fmt: skip
        for name in TrainingRecord.__dataclass_fields__:
            _text(ProtocolEnvelopeError, f"{where}.training.{name}", getattr(e.training, name))
        return
    assert e.protocol in ANALYSIS_PROTOCOLS
    a = e.analysis
    if not isinstance(a, AnalysisRecord) or e.training is not None:
        raise ProtocolEnvelopeError(f"{FN}: {where}: an analysis protocol; allowed: an "
                                    "AnalysisRecord and no TrainingRecord")  # fmt: skip
    for name in ("extraction_rule", "backend"):
        _text(ProtocolEnvelopeError, f"{where}.analysis.{name}", getattr(a, name))
    if not a.checkpoint_ids or any(c not in index for c in a.checkpoint_ids):
        raise ProtocolEnvelopeError(f"{FN}: {where}.analysis.checkpoint_ids="
                                    f"{list(a.checkpoint_ids)}; allowed: >= 1 declared object")
    if not a.rank_policies or any(p not in policies for p in a.rank_policies):
        raise ProtocolEnvelopeError(
            f"{FN}: {where}.analysis.rank_policies={list(a.rank_policies)}; allowed: >= 1 of "
            f"the manifest's policies ({', '.join(sorted(policies)) or 'none'})"
        )


def study_ledger(manifest: Any) -> dict[str, int | tuple[int, ...]]:
    """The structural ledger derived from a manifest's objects (nothing else is computed).

    Keys: ``D`` (ambient parameter coordinates); ``d[<u>]`` (global subspace coordinates, per
    subspace object); per base matrix ``dense[<W>] = m·n``; per LoRA product of rank ``r`` on an
    ``m × n`` target ``factors[<ΔW>] = r(m + n)``, ``manifold[<ΔW>] = q(m + n − q)`` (the
    generic rank-``q`` matrix manifold, ``q = min(r, m, n)``) and ``gauge[<ΔW>] = r²``; per
    split ``rows[<split>]``; per output trace ``outputs[<F>] = N·C``; per Jacobian and kernel
    ``shape[<J>]``, ``shape[<K>]``.

    Args:
        manifest: a manifest whose shapes are valid.

    Returns:
        Key → integer or shape tuple.

    Source: seed 003 §0x00K (the teaching ledger: 24, 3, 24, 20, 16, 4, 6/4/4, 24, [24,24],
    [24,24]).
    """
    out: dict[str, int | tuple[int, ...]] = {"D": manifest.parameter_schema.ambient()}
    out |= {f"d[{p.object_id}]": p.dim for p in manifest.parameter_objects
            if p.kind == "subspace"}  # fmt: skip
    for w in manifest.matrix_objects:
        rows, cols = w.shape
        if w.kind == "base":
            out[f"dense[{w.object_id}]"] = rows * cols
        elif w.kind == "product":
            r, q = w.rank, min(w.rank, rows, cols)
            out[f"factors[{w.object_id}]"] = r * (rows + cols)
            out[f"manifold[{w.object_id}]"] = q * (rows + cols - q)
            out[f"gauge[{w.object_id}]"] = r * r
    out |= {f"rows[{s.split_id}]": s.rows for s in manifest.dataset_objects}
    for f in manifest.function_objects:
        if f.kind == "outputs":
            out[f"outputs[{f.object_id}]"] = math.prod(f.shape)
        elif f.kind in ("jacobian", "kernel"):
            out[f"shape[{f.object_id}]"] = tuple(f.shape)
    return out


def _check_ledger(m: Any) -> None:
    if not isinstance(m.ledger, Mapping):
        raise LedgerError(f"{FN}: ledger={m.ledger!r}; allowed: a mapping line → value")
    derived = study_ledger(m)
    declared = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in m.ledger.items()}
    missing = [k for k in derived if k not in declared]
    extra = [k for k in declared if k not in derived]
    if missing or extra:
        raise LedgerError(f"{FN}: ledger lacks {missing} and has {extra}; allowed: exactly the "
                          f"derived lines {list(derived)}")  # fmt: skip
    for k, v in derived.items():
        if declared[k] != v:
            raise LedgerError(f"{FN}: ledger[{k!r}]={declared[k]!r}; allowed: {v!r}, derived "
                              "from the objects")  # fmt: skip
