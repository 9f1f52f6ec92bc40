"""The atlas's configuration: which optimizers, under which groups, on which problems.

:class:`AtlasSpec` is both the study and each of its runs: the study lists every candidate
(an optimizer class as ``module:Class`` with the version of the code that defines it), group and
problem; a run holds one of each (:func:`gaugelab.experiments.atlas.run.plan`). A run's identity
is its (optimizer, version, group, problem, steps, draws, seed, dtype): a rerun reuses every
stored check of the same code, and checks again only what is missing or whose version changed.
The time limit is how a check runs, not what it checks, so it is left out of the identity.

Source: singh2026lossbasis, Def. 3.1 and §6 (the twin triplet, one check per cell);
docs/commands/atlas.md.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gaugelab.equivariance.problems import PROBLEMS
from gaugelab.gauge import GROUPS
from gaugelab.study.spec import ExperimentSpec

DEFAULT_GROUPS: tuple[str, ...] = ("orthogonal", "general-linear")
DEFAULT_PROBLEMS: tuple[str, ...] = ("sensing", "attention")
DEFAULT_TIMEOUT = 300.0
"""Seconds a check may take (the slowest torch.optim check, LBFGS on attention, takes about a
minute on two shared cores)."""


class Candidate(BaseModel):
    """One optimizer of the atlas: the class to check and the version of its code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str = Field(description="The class as 'module:Class', e.g. 'torch.optim:Adam'.")
    version: str = Field(
        description="The code's version: '<distribution> <version>' (e.g. 'torch 2.13.0'), or "
        "'sha256:<16 hex>' of the module's file when no distribution owns it."
    )

    @field_validator("target")
    @classmethod
    def _module_class(cls, target: str) -> str:
        module, sep, name = target.partition(":")
        if not (sep and module and name.isidentifier()):
            raise ValueError(f"target={target!r}; allowed: 'module:Class'")
        return target

    @property
    def name(self) -> str:
        """The exported class name (``Adam``)."""
        return self.target.partition(":")[2]

    @property
    def source(self) -> str:
        """The module it is exported from (``torch.optim``)."""
        return self.target.partition(":")[0]


def _distinct(values: tuple, what: str, allowed: tuple[str, ...] | None = None) -> tuple:
    if not values:
        raise ValueError(f"{what} is empty; allowed: one or more")
    if len(set(values)) != len(values):
        raise ValueError(f"{what}={list(values)} repeats a value; allowed: distinct values")
    if allowed is not None:
        unknown = [v for v in values if v not in allowed]
        if unknown:
            raise ValueError(f"{what}={','.join(unknown)}; allowed: {', '.join(allowed)}")
    return values


class AtlasSpec(ExperimentSpec):
    """Every candidate × group × problem, each one run of
    :func:`gaugelab.equivariance.check_equivariance` (its defaults: lr 3e-2, noise scale 1e-7).

    Raises:
        pydantic.ValidationError: (a ``ValueError``) no or repeated candidates, groups or
            problems; an unknown group or problem; steps or draws < 1; a time limit that is not
            a finite number > 0.
    """

    kind: ClassVar[str] = "atlas"
    trainer: ClassVar[str] = "gaugelab.experiments.atlas.checks:run_check"

    optimizers: tuple[Candidate, ...] = Field(
        description="The optimizers, each a class as 'module:Class' with its code's version."
    )
    groups: tuple[str, ...] = Field(
        DEFAULT_GROUPS, description="Gauge groups (gaugelab.gauge.GROUPS names)."
    )
    problems: tuple[str, ...] = Field(
        DEFAULT_PROBLEMS, description="Check problems: sensing, quadratic, attention."
    )
    steps: int = Field(10, ge=1, description="Optimizer steps per run of the triplet.")
    draws: int = Field(3, ge=1, description="Independent group elements per check.")
    seed: int = Field(0, description="Seeds the problem and the draws.")
    dtype: Literal["float64", "float32"] = Field(
        "float64", description="Compute dtype: float64 (certification) or float32."
    )
    timeout: float = Field(
        DEFAULT_TIMEOUT,
        description="Seconds one check may take; over it the check is recorded as 'timeout'. "
        "Not part of the identity (how a check runs, not what it checks).",
    )

    @field_validator("optimizers")
    @classmethod
    def _candidates(cls, values: tuple[Candidate, ...]) -> tuple[Candidate, ...]:
        _distinct(tuple(c.target for c in values), "optimizers")
        return values

    @field_validator("groups")
    @classmethod
    def _groups(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(values, "groups", tuple(sorted(GROUPS)))

    @field_validator("problems")
    @classmethod
    def _problems(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(values, "problems", PROBLEMS)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"timeout={value!r}; allowed: a finite number of seconds > 0")
        return value

    def spec_dict(self) -> dict[str, Any]:
        """The fields in JSON mode, without ``timeout`` (not part of the identity)."""
        data = super().spec_dict()
        data.pop("timeout")
        return data

    @property
    def check(self) -> tuple[Candidate, str, str]:
        """A run spec's one ``(candidate, group, problem)``.

        Raises:
            ValueError: the spec holds several (a study's spec, not a run's).
        """
        if len(self.optimizers) * len(self.groups) * len(self.problems) != 1:
            raise ValueError(
                f"AtlasSpec: {len(self.optimizers)} optimizers × {len(self.groups)} groups × "
                f"{len(self.problems)} problems; a run holds one of each (plan(spec))"
            )
        return self.optimizers[0], self.groups[0], self.problems[0]

    def run_label(self) -> str:
        """A run's check as ``gaugelab runs list`` and the report name it:
        ``torch.optim:Adam orthogonal / sensing``.

        Raises:
            ValueError: the spec holds several checks (a study's spec).
        """
        candidate, group, problem = self.check
        return f"{candidate.target} {group} / {problem}"

    def dtype_name(self) -> str:
        return self.dtype


__all__ = ["DEFAULT_GROUPS", "DEFAULT_PROBLEMS", "DEFAULT_TIMEOUT", "AtlasSpec", "Candidate"]
