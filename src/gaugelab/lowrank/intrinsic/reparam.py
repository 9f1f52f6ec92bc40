"""DID and SAID: any ``nn.Module`` trained in a fixed random subspace, without parameter surgery.

The module is never modified: its parameters (all trainable ones, or a named subset) are read
once into ``θ₀``, and every call runs ``torch.func.functional_call(module, θ(u), …)`` with the
reparameterized values. The only trainable tensors are the subspace coordinates (DID: ``u``;
SAID: ``z`` and the group scales ``λ``) and, when asked, parameters trained *directly* beside
them (``direct=``: a classification head, say), which the ledger discloses separately.

Source: seed 003 §0x02A (DID), §0x02E (SAID, its ledger and initialization blocking), §0x02J
(the head inside ``d`` or disclosed); li2018intrinsic; aghajanyan2021intrinsic.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from gaugelab.lowrank.intrinsic.projections import Projection

__all__ = [
    "DIDReparameterization",
    "DegenerateBudget",
    "ParameterLayout",
    "SAIDReparameterization",
    "said_ledger",
]


class DegenerateBudget(ValueError):
    """SAID with ``d = m``: every coordinate is a group scale, the shared projected update
    ``z`` is empty, and with ``θ = θ₀ + λ ⊙ P(z)`` nothing can move — a legal count but a
    no-update budget. Raised instead of reinterpreting ``d`` as the shared width.

    Attributes:
        d: the total budget; m: the group scales.
    """

    def __init__(self, d: int, m: int) -> None:
        super().__init__(
            f"SAID budget d={d} with m={m} group scales leaves no shared coordinate (d - m = 0): "
            "a degenerate, no-update budget (seed 003 §0x02E); it is reported as such, not "
            "reinterpreted"
        )
        self.d, self.m = d, m


def said_ledger(d: int, m: int) -> dict[str, int]:
    """The SAID coordinate ledger ``d = (d − m) + m``.

    Args:
        d: the total trainable-coordinate budget; m: the declared parameter groups.

    Returns:
        ``{"d": d, "shared": d - m, "scales": m}``.

    Raises:
        DegenerateBudget: ``d == m`` (no shared coordinate).
        ValueError: ``m < 1`` or ``d < m``.

    Source: seed 003 §0x02E.
    """
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"said_ledger: m={m!r}; allowed: an integer >= 1")
    if isinstance(d, bool) or not isinstance(d, int) or d < m:
        raise ValueError(f"said_ledger: d={d!r} with m={m}; allowed: an integer d >= m")
    if d == m:
        raise DegenerateBudget(d, m)
    return {"d": d, "shared": d - m, "scales": m}


@dataclass(frozen=True)
class ParameterLayout:
    """How named tensors flatten into one vector ``θ ∈ ℝ^D``: in ``names`` order, each
    row-major (``reshape(-1)``).

    Attributes:
        names: parameter names; shapes: their shapes; offsets: where each starts in ``θ``.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]

    @classmethod
    def of(cls, tensors: Mapping[str, torch.Tensor]) -> ParameterLayout:
        """The layout of ``tensors`` in their mapping order."""
        names, shapes, offsets, at = [], [], [], 0
        for name, t in tensors.items():
            names.append(name)
            shapes.append(tuple(t.shape))
            offsets.append(at)
            at += t.numel()
        return cls(tuple(names), tuple(shapes), tuple(offsets))

    @property
    def size(self) -> int:
        """``D``."""
        if not self.names:
            return 0
        last = self.shapes[-1]
        return self.offsets[-1] + int(torch.Size(last).numel())

    def flatten(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``[D]``: the tensors concatenated in layout order."""
        return torch.cat([tensors[n].reshape(-1) for n in self.names])

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Name → ``theta``'s slice reshaped to the tensor's shape (views; differentiable)."""
        out = {}
        for name, shape, at in zip(self.names, self.shapes, self.offsets, strict=True):
            n = int(torch.Size(shape).numel())
            out[name] = theta[at : at + n].view(shape)
        return out


def _select(
    module: nn.Module, names: Sequence[str] | None, direct: Sequence[str], where: str
) -> tuple[dict[str, nn.Parameter], dict[str, nn.Parameter]]:
    params = dict(module.named_parameters())
    for label, group in (("names", names or ()), ("direct", direct)):
        unknown = [n for n in group if n not in params]
        if unknown:
            raise ValueError(
                f"{where}: {label}={unknown}: not parameters of the module; "
                f"allowed: {', '.join(params)}"
            )
    both = set(names or ()) & set(direct)
    if both:
        raise ValueError(f"{where}: {sorted(both)} are in both names and direct")
    chosen = [
        n
        for n in params
        if (n in names if names is not None else params[n].requires_grad and n not in direct)
    ]
    if not chosen:
        raise ValueError(f"{where}: no parameter to reparameterize")
    return {n: params[n] for n in chosen}, {n: params[n] for n in direct}


def _resolve(
    projection: Projection | Callable[[int], Projection], D: int, d: int | None, where: str
) -> Projection:
    proj = projection(D) if not isinstance(projection, Projection) else projection
    if proj.ambient_dim != D:
        raise ValueError(
            f"{where}: the projection writes D={proj.ambient_dim} parameters; the "
            f"reparameterized tensors have D={D}"
        )
    if d is not None and proj.subspace_dim != d:
        raise ValueError(
            f"{where}: the projection reads d={proj.subspace_dim} coordinates; the budget needs {d}"
        )
    return proj


class _Subspace(nn.Module, abc.ABC):
    """Shared machinery: the wrapped module (unregistered), ``θ₀``, the layout, direct params."""

    def _setup(self, module, names, direct, where):
        chosen, self._direct = _select(module, names, tuple(direct), where)
        object.__setattr__(self, "_wrapped", module)  # not a submodule: its params not ours
        self.layout = ParameterLayout.of(chosen)
        dtypes = {p.dtype for p in chosen.values()}
        if len(dtypes) != 1:
            raise ValueError(
                f"{where}: the reparameterized tensors mix dtypes {sorted(map(str, dtypes))}"
            )
        self.register_buffer(
            "theta0", self.layout.flatten(chosen).detach().clone(), persistent=False
        )
        frozen = dict(module.named_parameters())
        self._others = {
            n: p.detach() for n, p in frozen.items() if n not in chosen and n not in self._direct
        }
        for n, p in self._direct.items():
            self.register_parameter("direct_" + n.replace(".", "_"), p)

    @property
    def module(self) -> nn.Module:
        """The wrapped module (unchanged; its own parameter values are ``θ₀``)."""
        return self._wrapped

    @abc.abstractmethod
    def delta(self) -> torch.Tensor:
        """``[D]`` ``Δθ`` at the current coordinates (differentiable)."""

    def parameters_now(self) -> dict[str, torch.Tensor]:
        """Name → the value the module computes with: ``θ₀ + Δθ`` for the reparameterized
        tensors, the live tensor for ``direct`` ones, the detached value for the rest."""
        theta = self.layout.unflatten(self.theta0 + self.delta())
        return {**self._others, **self._direct, **theta}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The module's forward at the reparameterized parameters (``functional_call``)."""
        return functional_call(self._wrapped, self.parameters_now(), args, kwargs, strict=False)

    def direct_count(self) -> int:
        """Parameters trained directly beside the subspace coordinates (disclosed)."""
        return sum(p.numel() for p in self._direct.values())


class DIDReparameterization(_Subspace):
    """Direct intrinsic dimension: ``θ = θ₀ + P u``, ``u = 0`` at the start.

    Args:
        module: any ``nn.Module`` (never modified).
        projection: a :class:`Projection` with ``ambient_dim = D`` (the reparameterized
            parameters' count), or a factory ``D → Projection``.
        names: the parameters to reparameterize (default: every trainable one not in
            ``direct``), flattened in the module's parameter order, each row-major.
        direct: parameters trained directly, outside ``d`` (disclosed in :meth:`ledger`).

    Attributes:
        u: ``[d]`` the trainable coordinates (zeros); ``theta0``: ``[D]`` buffer.

    Raises:
        ValueError: unknown names, nothing to reparameterize, mixed dtypes, a projection of
            the wrong ``D`` or dtype.

    Source: seed 003 §0x02A.
    """

    def __init__(
        self,
        module: nn.Module,
        projection: Projection | Callable[[int], Projection],
        *,
        names: Sequence[str] | None = None,
        direct: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self._setup(module, names, direct, "DIDReparameterization")
        self.projection = _resolve(projection, self.layout.size, None, "DIDReparameterization")
        if self.projection.dtype != self.theta0.dtype:
            raise ValueError(
                f"DIDReparameterization: projection dtype {self.projection.dtype} "
                f"≠ parameter dtype {self.theta0.dtype}"
            )
        self.u = nn.Parameter(torch.zeros(self.projection.subspace_dim, dtype=self.theta0.dtype))

    def delta(self) -> torch.Tensor:
        return self.projection.apply(self.u)

    def ledger(self) -> dict[str, Any]:
        """The coordinate budget: ``d``, ``D``, what is inside ``d`` and what is disclosed."""
        return {
            "method": "DID",
            "d": self.projection.subspace_dim,
            "shared": self.projection.subspace_dim,
            "scales": 0,
            "ambient_dim": self.layout.size,
            "reparameterized": list(self.layout.names),
            "direct": list(self._direct),
            "direct_parameters": self.direct_count(),
            "projection": self.projection.identity.as_dict(),
        }


class SAIDReparameterization(_Subspace):
    """Structure-aware intrinsic dimension: ``θ_i = θ₀_i + λ_i R_i P(z)``, ``d = (d − m) + m``.

    Args:
        module: any ``nn.Module`` (never modified).
        projection: a :class:`Projection` ``ℝ^{d−m} → ℝ^D`` or a factory ``(D, d − m) →
            Projection``.
        d: the total budget (the shared width is ``d − m``; :func:`said_ledger`).
        groups: the ``m`` groups as lists of parameter names (each reparameterized tensor in
            exactly one), or ``"tensor"`` (one group per tensor) or ``"module"`` (one per
            owning module, the name before the last dot).
        names, direct: as :class:`DIDReparameterization`.
        scale_init: the initial ``λ`` (default 1: ``z`` receives a gradient at ``z = 0``;
            with 0 both paths are blocked — §0x02E, initialization is part of the protocol).

    Attributes:
        z: ``[d − m]`` shared coordinates (zeros); scales: ``[m]`` the ``λ_i``.

    Raises:
        DegenerateBudget: ``d == m``.
        ValueError: ``d < m``, bad groups, or what :class:`DIDReparameterization` raises.

    Source: seed 003 §0x02E.
    """

    def __init__(
        self,
        module: nn.Module,
        projection: Projection | Callable[[int, int], Projection],
        d: int,
        *,
        groups: str | Sequence[Sequence[str]] = "module",
        names: Sequence[str] | None = None,
        direct: Sequence[str] = (),
        scale_init: float = 1.0,
    ) -> None:
        super().__init__()
        self._setup(module, names, direct, "SAIDReparameterization")
        self.groups = _groups(self.layout, groups)
        ledger = said_ledger(d, len(self.groups))
        D = self.layout.size
        proj = projection if isinstance(projection, Projection) else projection(D, ledger["shared"])
        self.projection = _resolve(proj, D, ledger["shared"], "SAIDReparameterization")
        dtype = self.theta0.dtype
        if self.projection.dtype != dtype:
            raise ValueError(
                f"SAIDReparameterization: projection dtype {self.projection.dtype} ≠ parameter "
                f"dtype {dtype}"
            )
        index = torch.empty(D, dtype=torch.long)
        for i, members in enumerate(self.groups):
            for name in members:
                k = self.layout.names.index(name)
                at, n = self.layout.offsets[k], int(torch.Size(self.layout.shapes[k]).numel())
                index[at : at + n] = i
        self.register_buffer("group_index", index, persistent=False)
        self.z = nn.Parameter(torch.zeros(ledger["shared"], dtype=dtype))
        self.scales = nn.Parameter(torch.full((len(self.groups),), float(scale_init), dtype=dtype))
        self.budget = ledger["d"]

    def delta(self) -> torch.Tensor:
        q = self.projection.apply(self.z)  # [D] the shared projected update
        return self.scales[self.group_index] * q  # λ_i R_i q, group by group

    def ledger(self) -> dict[str, Any]:
        """The coordinate budget ``d = (d − m) + m``, the groups, and what is disclosed."""
        return {
            "method": "SAID",
            "d": self.budget,
            "shared": self.budget - len(self.groups),
            "scales": len(self.groups),
            "ambient_dim": self.layout.size,
            "groups": [list(g) for g in self.groups],
            "reparameterized": list(self.layout.names),
            "direct": list(self._direct),
            "direct_parameters": self.direct_count(),
            "projection": self.projection.identity.as_dict(),
        }


def _groups(
    layout: ParameterLayout, groups: str | Sequence[Sequence[str]]
) -> list[tuple[str, ...]]:
    if groups == "tensor":
        return [(n,) for n in layout.names]
    if groups == "module":
        by: dict[str, list[str]] = {}
        for n in layout.names:
            by.setdefault(n.rpartition(".")[0], []).append(n)
        return [tuple(v) for v in by.values()]
    if isinstance(groups, str):
        raise ValueError(
            f"SAIDReparameterization: groups={groups!r}; allowed: 'tensor', "
            "'module' or lists of parameter names"
        )
    out = [tuple(g) for g in groups]
    flat = [n for g in out for n in g]
    if sorted(flat) != sorted(layout.names) or len(set(flat)) != len(flat) or not all(out):
        raise ValueError(
            f"SAIDReparameterization: groups={[list(g) for g in out]}; allowed: "
            f"non-empty groups covering {list(layout.names)} each exactly once"
        )
    return out
