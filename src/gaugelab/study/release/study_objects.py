"""The objects of a low-rank study manifest's five object namespaces (seed 003 §0x00F–0x00I).

A result is reproducible only if its nouns cannot change underneath it: "the update", "the
rank", "the dataset" are not identifiers. Each record here is one immutable noun with the
frozen fields the seed's identity tables give it:

* :class:`ParameterSchema` — the coordinate schema, e.g. ``row-major W[4,6] -> theta[24]``;
* :class:`ParameterObject` — ``theta_0``, ``theta_full``, ``delta_theta_full``, ``u`` (§0x00G);
* :class:`MatrixObject` — ``W_0``, ``W_full``, ``delta_W_full``, ``A``, ``B``, ``delta_W_lora``;
* :class:`FunctionObject` — ``f_theta``, ``F_X``, ``J_X``, ``K_X`` with their axes (§0x00H);
* :class:`DatasetSplit` — a frozen split: ordered sample ids, payload, labels, revision;
* :class:`RankPolicyRecord` — one rank policy with its required fields (§0x00I).

The records only normalize their fields (lists become tuples, mappings read-only); whether
they fit together is the manifest validator's question
(:func:`gaugelab.study.release.study_checks.validate_study_manifest`). Re-exported by
:mod:`gaugelab.study.release.study_manifest`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from gaugelab.study.release.units import sha256_hex

__all__ = [
    "MATRIX_AXES",
    "RANK_POLICIES",
    "RANK_POLICY_FIELDS",
    "DatasetSplit",
    "FunctionObject",
    "MatrixObject",
    "ParameterObject",
    "ParameterSchema",
    "RankPolicyRecord",
    "payload_digest",
    "plain",
]

MATRIX_AXES: dict[str, tuple[str, str]] = {
    "base": ("out", "in"),
    "trained": ("out", "in"),
    "delta": ("out", "in"),
    "factor_A": ("rank", "in"),
    "factor_B": ("out", "rank"),
    "product": ("out", "in"),
}
"""The axes of each matrix kind: ``A ∈ R^{r×d_in}``, ``B ∈ R^{d_out×r}``, ``ΔW = s·B A``
(output-by-input, the PEFT layout)."""

RANK_POLICIES: tuple[str, ...] = (
    "configured",
    "algebraic",
    "numerical",
    "stable",
    "energy",
    "entropy",
)
"""The six rank policies of the manifest's ``rank_policies`` namespace, in the seed's order."""

RANK_POLICY_FIELDS: dict[str, tuple[str, ...]] = {
    "configured": ("factor_orientation", "rank"),
    "algebraic": ("arithmetic",),
    "numerical": ("dtype", "svd_backend", "tolerance_rule"),
    "stable": ("norm_convention",),
    "energy": ("sort_order", "energy_threshold"),
    "entropy": ("zero_spectrum_policy", "log_base"),
}
"""Required policy fields beyond the matrix (§0x00I's table): configured — target matrix,
factor orientation, rank; algebraic — the exact matrix object; numerical — matrix, dtype, SVD
backend, tolerance rule; stable — matrix and norm convention; energy — matrix, sort order,
energy threshold; entropy — matrix, zero-spectrum policy, logarithm base."""


def plain(obj: Any) -> Any:
    """``obj`` as plain JSON values: a dataclass → dict of its fields, a mapping → dict, a
    tuple or list → list; anything else unchanged (the form :func:`sha256_hex` hashes)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return [plain(v) for v in obj]
    return obj


def payload_digest(rows: tuple[tuple[float, ...], ...]) -> str:
    """``sha256`` hex of a numeric payload, row by row, each value as ``float.hex`` (exact).

    Raises:
        ValueError: a value is not a finite real number.
    """
    out = []
    for row in rows:
        for v in row:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"payload_digest: value {v!r}; allowed: finite real numbers")
        out.append([float(v).hex() for v in row])
    return sha256_hex(out)


def _tuple(value: object) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else value  # type: ignore[return-value]


def _freeze(obj: object, *names: str) -> None:
    for name in names:
        object.__setattr__(obj, name, _tuple(getattr(obj, name)))


@dataclass(frozen=True)
class ParameterSchema:
    """The coordinate schema of the parameter vector: which tensors, flattened in which order.

    Attributes:
        order: ``"row-major"`` or ``"column-major"`` flattening of each tensor.
        tensors: ``((name, shape), …)`` in concatenation order; shapes of integers ``>= 1``.
        vector: the vector's name (``"theta"``).

    Source: seed 003 §0x00F (``parameter_schema = "row-major W[4,6] -> theta[24]"``), §0x00G
    (the coordinate schema is part of the identity).
    """

    order: Literal["row-major", "column-major"]
    tensors: tuple[tuple[str, tuple[int, ...]], ...]
    vector: str = "theta"

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", tuple((n, _tuple(s)) for n, s in self.tensors))

    def ambient(self) -> int:
        """``D``: the number of coordinates, the sum over tensors of their sizes."""
        return sum(math.prod(shape) for _, shape in self.tensors)

    def shape_of(self, tensor: str) -> tuple[int, ...] | None:
        """The shape of the tensor named ``tensor``, or ``None``."""
        return next((s for n, s in self.tensors if n == tensor), None)

    def text(self) -> str:
        """The schema as the seed writes it: ``row-major W[4,6] -> theta[24]``."""
        parts = ", ".join(f"{n}[{','.join(map(str, s))}]" for n, s in self.tensors)
        return f"{self.order} {parts} -> {self.vector}[{self.ambient()}]"


@dataclass(frozen=True, kw_only=True)
class ParameterObject:
    """A parameter-space object: a vector in one schema's coordinates.

    Attributes:
        object_id: its identity (unique across the manifest's object namespaces).
        kind: ``"base"`` (``theta_0``), ``"trained"`` (``theta_full``), ``"delta"``
            (``delta_theta_full = theta_full − theta_0``) or ``"subspace"`` (the global
            coordinates ``u`` of ``theta(u) = theta_0 + M u``).
        schema: the :meth:`ParameterSchema.text` of its coordinates (a delta: the subtraction
            schema; a subspace: the ambient schema ``M`` maps into).
        dim: coordinates (``D``; a subspace: ``d``).
        base_revision, dtype_role: base and trained objects: the base checkpoint's revision and
            the role of its dtype.
        base_id: trained, delta and subspace objects: the base parameter object.
        trained_id: a delta: the trained parameter object.
        produced_by: trained and subspace objects: the protocol envelope that trains it.
        projection_family, projection_seed: a subspace: ``M``'s family and seed.

    Source: seed 003 §0x00G (the identity table: frozen fields per object).
    """

    object_id: str
    kind: Literal["base", "trained", "delta", "subspace"]
    schema: str
    dim: int
    base_revision: str = ""
    dtype_role: str = ""
    base_id: str = ""
    trained_id: str = ""
    produced_by: str = ""
    projection_family: str = ""
    projection_seed: str = ""


@dataclass(frozen=True, kw_only=True)
class MatrixObject:
    """A matrix-space object of one layer, output-by-input.

    Attributes:
        object_id: its identity.
        kind: ``"base"`` (``W_0``), ``"trained"`` (``W_full``), ``"delta"``
            (``delta_W_full``), ``"factor_A"``, ``"factor_B"`` or ``"product"``
            (``delta_W_lora = s·B A``).
        layer_id: the layer it belongs to (``"layer0.linear"``).
        shape: ``(rows, columns)``.
        axes: :data:`MATRIX_AXES` of its kind.
        tensor, parameter_id: base and trained: the schema tensor it is the reshape of, and the
            parameter object that holds it.
        base_id, trained_id: a delta: the base and trained matrices it subtracts.
        target_id: factors and products: the base matrix the factors adapt.
        rank, scale, init, produced_by: factors (and a product's rank and scale): the
            configured rank, the scale ``s``, the initialization, the envelope training them.
        factor_ids: a product: its factors in multiplication order, ``(B, A)``.

    Source: seed 003 §0x00G (``A ∈ R^{2×6}``, ``B ∈ R^{4×2}``, ``r = 2``, ``s = α/r = 4``;
    the factors, their product and the dense update have distinct IDs).
    """

    object_id: str
    kind: Literal["base", "trained", "delta", "factor_A", "factor_B", "product"]
    layer_id: str
    shape: tuple[int, int]
    axes: tuple[str, str]
    tensor: str = ""
    parameter_id: str = ""
    base_id: str = ""
    trained_id: str = ""
    target_id: str = ""
    rank: int | None = None
    scale: float | None = None
    init: str = ""
    produced_by: str = ""
    factor_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _freeze(self, "shape", "axes", "factor_ids")


@dataclass(frozen=True, kw_only=True)
class FunctionObject:
    """A function-space object: the model function, a stacked output trace, a Jacobian, a kernel.

    Attributes:
        object_id: its identity.
        kind: ``"model"`` (``f_theta``), ``"outputs"`` (``F_X``, ``[N, C]``), ``"jacobian"``
            (``J_X = ∂vec F_X/∂θᵀ``, ``[N·C, D]``) or ``"kernel"`` (``K_X = J Jᵀ``,
            ``[N·C, N·C]``; ``Jᵀ J`` is another object, ``[D, D]``).
        shape, axes: outputs ``("sample", "output")``, jacobian ``("sample*output",
            "parameter")``, kernel ``("sample*output", "sample*output")``; a model: ``()``.
        parameter_id: a model: the base parameter object of its schema; a Jacobian or kernel:
            the base point it is taken at.
        input_dim, outputs: a model: the width of one input row and ``C``, the outputs per row.
        model_id, dataset_id: outputs: the model and the split; Jacobians and kernels: the split.
        source_id: a Jacobian: its output trace; a kernel: its Jacobian.

    Source: seed 003 §0x00H.
    """

    object_id: str
    kind: Literal["model", "outputs", "jacobian", "kernel"]
    shape: tuple[int, ...] = ()
    axes: tuple[str, ...] = ()
    parameter_id: str = ""
    input_dim: int | None = None
    outputs: int | None = None
    model_id: str = ""
    dataset_id: str = ""
    source_id: str = ""

    def __post_init__(self) -> None:
        _freeze(self, "shape", "axes")


@dataclass(frozen=True, kw_only=True)
class DatasetSplit:
    """A frozen split: a dataset name is not a split manifest.

    Attributes:
        split_id: its identity (``"train_v1"``).
        role: ``"train"`` (optimizer updates and train loss), ``"eval"`` (checkpoint selection
            and target score), ``"retention"`` (non-target behaviour), ``"stress"`` (a held-out
            domain) or ``"test"`` (sealed).
        dataset_id: the dataset it is cut from; a retention or stress split needs its own.
        purpose: what it is used for.
        sample_ids: the ordered sample ids; ``rows`` is their number.
        payload_id: the identity of the numeric payload (:func:`payload_digest` of ``payload``
            when it is given).
        labels_id: the identity of the labels.
        revision: a train split's transform revision, any other split's metric revision.
        payload: the rows' values when the manifest holds them, ``[rows, input_dim]``.

    Source: seed 003 §0x00H (three disjoint synthetic splits and their frozen identity fields).
    """

    split_id: str
    role: Literal["train", "eval", "retention", "stress", "test"]
    dataset_id: str
    purpose: str
    sample_ids: tuple[str, ...]
    payload_id: str
    labels_id: str
    revision: str
    payload: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        _freeze(self, "sample_ids")
        if isinstance(self.payload, (tuple, list)):
            object.__setattr__(self, "payload", tuple(_tuple(r) for r in self.payload))

    @property
    def rows(self) -> int:
        """The number of rows (ordered sample ids)."""
        return len(self.sample_ids)


@dataclass(frozen=True, kw_only=True)
class RankPolicyRecord:
    """One rank policy applied to named matrices: every reported rank carries both IDs.

    Attributes:
        policy_id: one of :data:`RANK_POLICIES`.
        matrices: the matrix objects it measures (at least one).
        fields: its :data:`RANK_POLICY_FIELDS` (field → value, read-only, sorted).

    Source: seed 003 §0x00I.
    """

    policy_id: str
    matrices: tuple[str, ...]
    fields: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _freeze(self, "matrices")
        if isinstance(self.fields, Mapping):
            object.__setattr__(self, "fields", MappingProxyType(dict(sorted(self.fields.items()))))
