"""Experiment specs and run manifests: what a run is, and its content-hashed identity.

A spec is a frozen pydantic model. A run's *identity* is the sha256 of the spec's canonical JSON
plus the gaugelab version, so the same spec run by the same gaugelab is the same run, and any
changed field is a new run. The :class:`Manifest` records the identity together with the
environment it was built in (torch, Python, machine, dtype, seeds, git commit); it is written
once to the run store and never changed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import math
import re
import typing
from collections.abc import Mapping, MutableSet, Set
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

import gaugelab
from gaugelab.lazy import LazyModule
from gaugelab.study.environment import (
    Machine,
    current_environment,
    environment_digest,
    git_commit,
)

torch = LazyModule("torch")

__all__ = [
    "ExperimentSpec",
    "Machine",
    "Manifest",
    "canonical_json",
    "current_environment",
    "environment_digest",
    "git_commit",
    "run_identity",
]

_KIND = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_SEED_PATH = re.compile(r"seeds?(\.|$)")
SEED_LIMIT = 2**63
"""Seeds lie in ``[0, SEED_LIMIT)``: what a 64-bit signed integer holds, as torch's generators
and the store's SQLite integers take it."""
_SET_ORIGINS = (set, frozenset, Set, MutableSet)


def canonical_json(kind: str, spec: Mapping[str, Any]) -> str:
    """The canonical JSON text of a spec: ``{"kind": kind, "spec": spec}``, keys sorted.

    Compact separators, UTF-8 text (``ensure_ascii=False``); floats are written by ``repr``
    (the shortest text that round-trips), so the text is the same in every process.

    Args:
        kind: the spec's kind (kebab-case, e.g. ``"twins"``).
        spec: the spec's JSON-mode fields (``json.loads(spec.model_dump_json())``).

    Raises:
        ValueError: ``spec`` holds a NaN or infinite float (JSON-mode dumps write them as
            strings, so this means the mapping did not come from a spec).
        TypeError: ``spec`` holds a value JSON cannot represent.
    """
    payload = {"kind": kind, "spec": spec}
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def run_identity(kind: str, spec: Mapping[str, Any], version: str) -> str:
    """sha256 hex digest of ``canonical_json(kind, spec) + "\\n" + version``.

    Args:
        kind, spec: as :func:`canonical_json`.
        version: the gaugelab version that runs the spec.

    Returns:
        64 lowercase hex characters.
    """
    text = canonical_json(kind, spec) + "\n" + version
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _numbers(where: str, value: Any) -> typing.Iterator[tuple[str, int | float]]:
    """Every int and float in ``value`` (tuples, lists, mappings and nested models walked),
    each with the field path it sits at (``lr_grids.adam``)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield where, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _numbers(f"{where}.{name}", getattr(value, name))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _numbers(f"{where}.{key}", item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _numbers(where, item)


def _set_typed(annotation: object, seen: set[type]) -> bool:
    """Whether ``annotation`` contains a set type (whose JSON order depends on string hashing)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return False
        seen.add(annotation)
        return any(_set_typed(f.annotation, seen) for f in annotation.model_fields.values())
    origin = typing.get_origin(annotation)
    if annotation in _SET_ORIGINS or origin in _SET_ORIGINS:
        return True
    return any(_set_typed(arg, seen) for arg in typing.get_args(annotation))


class ExperimentSpec(BaseModel):
    """Base of every experiment spec: frozen, no extra fields, content-hashed.

    A subclass sets the class variable ``kind`` (kebab-case, e.g. ``"twins"``), declares each
    field with ``Field(description=...)`` (the description is the ``--help`` text), and names
    its trainer in the class variable ``trainer`` (``"package.module:function"``, called as
    ``function(spec, run)`` with the harness's run context) or overrides ``execute(self, run)``.
    The trainer is named, not imported: the trainer's module imports the spec, never the other
    way round, and the harness imports it when a run executes. Seeds are int fields whose name
    ends in ``seed`` (``data_seed``, ``init_seed``)
    and/or a ``seeds: dict[str, int]`` field; a field named ``dtype`` names the compute dtype.

    Prefer tuples to lists and dicts: a frozen model rejects attribute assignment, but a list or
    dict field can still be mutated in place, which would change the identity. Set-typed fields
    are rejected (their JSON order depends on string hashing, which differs between processes).

    Every float in a spec, at any depth, must be finite, and every seed (an int field whose
    name ends in ``seed``, or the ints of a field whose name ends in ``seeds``) must lie in
    ``[0, SEED_LIMIT)``: a spec that could only fail, or overflow, is refused at construction,
    before any run is registered.

    Raises:
        TypeError: (at class definition) a field without a description, a set-typed field, or
            a ``kind`` that is not a kebab-case string.
        pydantic.ValidationError: (a ``ValueError``) at construction, for unknown or invalid
            fields (``lr=inf; allowed: a finite number``, ``seeds=-1; allowed: …``); on
            attribute assignment, since specs are frozen.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")

    kind: ClassVar[str]
    trainer: ClassVar[str | None] = None

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = getattr(cls, "kind", None)
        if kind is not None and not (isinstance(kind, str) and _KIND.fullmatch(kind)):
            raise TypeError(
                f"{cls.__name__}: kind={kind!r}; allowed: a kebab-case string such as 'twins'"
            )
        for name, field in cls.model_fields.items():
            if not field.description:
                raise TypeError(
                    f"{cls.__name__}: field {name!r} has no description; "
                    "declare it with Field(..., description=...)"
                )
            if _set_typed(field.annotation, set()):
                raise TypeError(
                    f"{cls.__name__}: field {name!r} is set-typed; use a sorted tuple instead "
                    "(set order in JSON is not stable across processes)"
                )

    @model_validator(mode="after")
    def _finite_and_seeds_in_range(self) -> ExperimentSpec:
        for name in type(self).model_fields:
            value = getattr(self, name)
            for where, number in _numbers(name, value):
                if isinstance(number, float) and not math.isfinite(number):
                    raise ValueError(f"{where}={number!r}; allowed: a finite number")
                seedlike = isinstance(number, int) and _SEED_PATH.search(where)
                if seedlike and not 0 <= number < SEED_LIMIT:
                    raise ValueError(f"{where}={number}; allowed: an integer in [0, 2**63)")
        return self

    def execute(self, run: Any) -> None:
        """Train one run of this spec: the declared ``trainer(self, run)``.

        Raises:
            TypeError: the class declares no trainer (and does not override ``execute``).
            ImportError, AttributeError: the declared trainer does not exist.
        """
        trainer = type(self).trainer
        if trainer is None:
            raise TypeError(f"{type(self).__name__} declares no trainer and no execute(run)")
        module, _, name = trainer.partition(":")
        getattr(importlib.import_module(module), name)(self, run)

    @classmethod
    def executable(cls) -> bool:
        """Whether a run of this spec can execute: a declared trainer or its own ``execute``."""
        return cls.trainer is not None or cls.execute is not ExperimentSpec.execute

    def _kind(self) -> str:
        kind = getattr(type(self), "kind", None)
        if kind is None:
            raise TypeError(f"{type(self).__name__} has no class variable 'kind'")
        return kind

    def spec_dict(self) -> dict[str, Any]:
        """The fields in JSON mode (tuples → lists, NaN/±inf → ``"NaN"``/``"Infinity"``)."""
        return json.loads(self.model_dump_json())

    def canonical_json(self) -> str:
        """``{"kind": kind, "spec": fields}`` as canonical JSON (see :func:`canonical_json`).

        Raises:
            TypeError: the class has no ``kind``.
        """
        return canonical_json(self._kind(), self.spec_dict())

    def identity(self) -> str:
        """The run identity: sha256 hex of the canonical JSON + ``"\\n"`` + gaugelab version.

        Raises:
            TypeError: the class has no ``kind``.
        """
        return run_identity(self._kind(), self.spec_dict(), gaugelab.__version__)

    def seed_roles(self) -> dict[str, int]:
        """Every seed of the spec by role.

        Roles are the int fields whose name ends in ``seed`` (the field name is the role) and
        the entries of a ``seeds`` mapping field (its keys are the roles; they win over a field
        of the same name). Subclasses with nested seeds override this.

        Returns:
            role → seed, sorted by role.
        """
        roles: dict[str, int] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name.endswith("seed") and isinstance(value, int) and not isinstance(value, bool):
                roles[name] = value
        seeds = getattr(self, "seeds", None) if "seeds" in type(self).model_fields else None
        if isinstance(seeds, Mapping):
            for role, value in seeds.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    roles[str(role)] = value
        return dict(sorted(roles.items()))

    def dtype_name(self) -> str:
        """The compute dtype: the ``dtype`` field as a string if the spec has one, else
        ``"float32"`` (the experiments' default, DESIGN.md "Dtypes")."""
        if "dtype" in type(self).model_fields:
            return str(self.dtype).removeprefix("torch.")
        return "float32"


class Manifest(BaseModel):
    """The immutable record of one run: its identity, spec and environment.

    Built by :meth:`for_spec`; stored once by the run store. Validation recomputes the identity
    from ``kind``, ``spec`` and ``gaugelab_version``, so a manifest read back from a store (or
    written by hand) cannot claim another run's identity.

    Raises:
        pydantic.ValidationError: (a ``ValueError``) the identity does not match the spec.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    identity: str = Field(description="sha256 hex of the spec's canonical JSON + version")
    kind: str = Field(description="the spec's kind, e.g. 'twins'")
    spec: dict[str, Any] = Field(description="the spec's fields in JSON mode")
    gaugelab_version: str = Field(description="gaugelab.__version__ that built the manifest")
    torch_version: str = Field(description="torch.__version__")
    python_version: str = Field(description="platform.python_version()")
    machine: Machine = Field(description="platform and CPU of the preparing machine")
    dtype: str = Field(description="compute dtype, e.g. 'float32'")
    seeds: dict[str, int] = Field(description="every seed of the spec by role")
    git_commit: str | None = Field(description="HEAD of gaugelab's git checkout, if any")
    created_at: str = Field(description="ISO 8601 UTC time the manifest was built")

    @model_validator(mode="after")
    def _identity_matches(self) -> Manifest:
        expected = run_identity(self.kind, self.spec, self.gaugelab_version)
        if self.identity != expected:
            raise ValueError(
                f"Manifest: identity={self.identity!r} does not match its spec "
                f"(expected {expected!r})"
            )
        return self

    @classmethod
    def for_spec(cls, spec: ExperimentSpec) -> Manifest:
        """The manifest of ``spec`` in this process's environment.

        Raises:
            TypeError: ``spec`` is not an :class:`ExperimentSpec` or its class has no ``kind``.
        """
        if not isinstance(spec, ExperimentSpec):
            raise TypeError(f"Manifest.for_spec: spec={spec!r}; allowed: an ExperimentSpec")
        env = current_environment()
        return cls(
            identity=spec.identity(),
            kind=spec._kind(),
            spec=spec.spec_dict(),
            gaugelab_version=gaugelab.__version__,
            torch_version=env["torch_version"],
            python_version=env["python_version"],
            machine=Machine.model_validate(env["machine"]),
            dtype=spec.dtype_name(),
            seeds=spec.seed_roles(),
            git_commit=git_commit(),
            created_at=datetime.now(UTC).isoformat(timespec="microseconds"),
        )

    def environment_digest(self) -> str:
        """:func:`environment_digest` of the environment recorded in this manifest."""
        return environment_digest(
            {
                "torch_version": self.torch_version,
                "python_version": self.python_version,
                "machine": self.machine.model_dump(),
            }
        )
