"""Identity checks of the low-rank study manifest (seed 003 §0x00F–0x00H).

Ids are unique across the object namespaces; every reference resolves to an object of the
right namespace and kind; a subtraction stays inside one schema, coordinate order, base
revision and layer ("shape equality alone is insufficient"); a product is ``s·B A`` over its
own factors, in that order, with their rank and scale; a Jacobian and a kernel are taken on
their own trace's split and base point. Used by
:func:`gaugelab.study.release.study_checks.validate_study_manifest`.
"""

from __future__ import annotations

import math
from typing import Any

from gaugelab.study.release.study_errors import (
    FN,
    IdentityError,
    require_count,
    require_text,
)
from gaugelab.study.release.study_objects import (
    MATRIX_AXES,
    DatasetSplit,
    FunctionObject,
    MatrixObject,
    ParameterObject,
    ParameterSchema,
    payload_digest,
)

__all__ = ["check_identities"]


def _ref(index: dict, where: str, ref: object, want: str, kinds: tuple[str, ...] | None = None):
    """The object ``ref`` names, of namespace ``want`` and one of ``kinds``."""
    require_text(IdentityError, where, ref)
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


def check_identities(m: Any) -> dict[str, tuple[str, Any]]:
    """Check a manifest's identities; return object id → ``(namespace, object)``.

    Raises:
        IdentityError: the first identity rule broken.
    """
    require_text(IdentityError, "manifest_id", m.manifest_id)
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
            require_text(IdentityError, f"{ns} id", oid)
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
            require_text(IdentityError, f"{where}.{name}", getattr(s, name))
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
        require_text(IdentityError, f"{where}.{name}", getattr(p, name))
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
    require_text(IdentityError, f"{where}.layer_id", w.layer_id)
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
        rank = require_count(IdentityError, f"{where}.rank", w.rank)
        if isinstance(w.scale, bool) or not isinstance(w.scale, (int, float)) or not (
            math.isfinite(w.scale) and w.scale > 0
        ):
            raise IdentityError(f"{FN}: {where}.scale={w.scale!r}; allowed: a finite s > 0")
        if w.kind == "product":
            _product_identity(w, index, rank, where)
        else:
            require_text(IdentityError, f"{where}.init", w.init)
            require_text(IdentityError, f"{where}.produced_by", w.produced_by)


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
