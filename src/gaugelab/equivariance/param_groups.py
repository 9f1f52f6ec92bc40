"""The adapter table: optimizers that need their parameter groups declared their own way.

Most optimizers take a plain list of parameters. Some read a flag or a layout from each
parameter group and fail — or, worse, quietly run another rule — without it: pytorch-optimizer's
Muon family needs ``use_muon`` in every group (``True``: Newton–Schulz on a matrix, ``False``:
the AdamW it falls back to); LoRA-RITE pairs the parameters of a group two by two as LoRA factors
and needs each factor's rank dimension; GaLore-style projections act only on the matrices of a
group that declares ``rank`` (without it they are AdamW). :data:`ADAPTERS` holds, per optimizer
class, how the check declares those groups for a problem's parameters; an optimizer is looked
up along its MRO, so a subclass is adapted as its base (``MuonClip`` as ``Muon``). An optimizer
without an entry is given the plain list, never another layout: when it then fails, the check's
error names what its source reads from its groups (:func:`needed_group_keys`).

Every parameter of the check's problems is a matrix; ``pairs`` (:class:`FactorPair`) names
the problem's gauge factor pairs — ``(U, V)`` of the factored problems, ``(W_Q, W_K)`` of each
attention layer — with the dimension the gauge acts on.

Source: the optimizers' own documentation (pytorch-optimizer 4.1.0: ``Muon``, ``LoRARite``,
``GaLore``, ``Fira``); docs/commands/check.md (the table, for users).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Groups = list[dict]


@dataclass(frozen=True)
class FactorPair:
    """Two parameters whose product the gauge leaves unchanged.

    Attributes:
        left, right: indices into the problem's parameter list.
        left_dim, right_dim: the dimension of each that the gauge acts on (the rank
            dimension: ``-1`` for ``U [n, k]``, ``0`` for a head-major ``W_Q [h·d, d_model]``).
    """

    left: int
    right: int
    left_dim: int
    right_dim: int


@dataclass(frozen=True)
class GroupAdapter:
    """How the check builds one optimizer's parameter groups.

    Attributes:
        needs: one line: what the optimizer needs its groups to declare.
        build: ``(params, pairs) ↦ param groups`` (a list of dicts with ``"params"``); it
            never sets ``lr``, so the check's learning rate reaches every group.
        layout: one line: the groups the check builds.
    """

    needs: str
    build: Callable[[Sequence[torch.Tensor], Sequence[FactorPair]], Groups]
    layout: str


def _muon_groups(params: Sequence[torch.Tensor], pairs: Sequence[FactorPair]) -> Groups:
    matrices = [p for p in params if p.ndim == 2]
    rest = [p for p in params if p.ndim != 2]
    groups = [{"params": matrices, "use_muon": True}]
    return groups + ([{"params": rest, "use_muon": False}] if rest else [])


def _lora_pairs(params: Sequence[torch.Tensor], pairs: Sequence[FactorPair]) -> Groups:
    paired = {i for pair in pairs for i in (pair.left, pair.right)}
    groups = [
        {"params": [params[pr.left], params[pr.right]], "lora_l_dim": pr.left_dim,
         "lora_r_dim": pr.right_dim}
        for pr in pairs
    ]  # fmt: skip
    return groups + [{"params": [p]} for i, p in enumerate(params) if i not in paired]


GALORE_RANK = 2
"""The projection rank the check gives GaLore-style rules: below every matrix's smaller side in
the check's problems (3 for ``U [6, 3]``), so the projection is a real one."""


def _galore_groups(params: Sequence[torch.Tensor], pairs: Sequence[FactorPair]) -> Groups:
    matrices = [p for p in params if p.ndim == 2]
    rest = [p for p in params if p.ndim != 2]
    projected = {"params": matrices, "rank": GALORE_RANK, "update_proj_gap": 1, "scale": 1.0,
                 "projection_type": "std"}  # fmt: skip
    return [projected] + ([{"params": rest}] if rest else [])


_MUON = GroupAdapter(
    "use_muon in every parameter group (True: Newton–Schulz, False: its AdamW fallback)",
    _muon_groups,
    "the matrices in one group with use_muon=True, any other parameter with use_muon=False",
)
_LORA = GroupAdapter(
    "LoRA factor pairs, two by two in a group, with each factor's rank dimension "
    "(lora_l_dim, lora_r_dim)",
    _lora_pairs,
    "each gauge factor pair in a group of its own with the dimensions the gauge acts on; "
    "every other parameter alone in a group (which LoRA-RITE leaves as it is)",
)
_GALORE = GroupAdapter(
    "rank, update_proj_gap, scale and projection_type in the group of the matrices "
    "(without them the rule is AdamW)",
    _galore_groups,
    f"the matrices in one group with rank={GALORE_RANK}, update_proj_gap=1, scale=1, "
    "projection_type='std'",
)

ADAPTERS: dict[str, GroupAdapter] = {
    "pytorch_optimizer.optimizer.muon.base:MuonBase": _MUON,
    "pytorch_optimizer.optimizer.lora_rite:LoRARite": _LORA,
    "pytorch_optimizer.optimizer.galore:GaLore": _GALORE,
    "pytorch_optimizer.optimizer.fira:Fira": _GALORE,
}
"""``"module:Class"`` of the class that defines the convention → its :class:`GroupAdapter`."""


def _key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def find_adapter(cls: type) -> tuple[str, GroupAdapter] | None:
    """The first entry of :data:`ADAPTERS` along ``cls``'s MRO, as ``(key, adapter)``, or
    ``None`` when the optimizer takes a plain list."""
    for base in inspect.getmro(cls):
        if _key(base) in ADAPTERS:
            return _key(base), ADAPTERS[_key(base)]
    return None


_READS = re.compile(r"""['"]([A-Za-z_]\w*)['"]\s+not\s+in\s+(?:param_)?group\b""")


def needed_group_keys(cls: type) -> list[str]:
    """The keys the constructors of ``cls`` and its bases (up to ``torch.optim.Optimizer``)
    require of a parameter group, read from their source (``if 'use_muon' not in group``);
    ``[]`` when none is found or no source can be read."""
    keys: list[str] = []
    for base in inspect.getmro(cls):
        if base is torch.optim.Optimizer or not issubclass(base, torch.optim.Optimizer):
            break
        if "__init__" not in vars(base):
            continue
        try:
            source = inspect.getsource(vars(base)["__init__"])
        except (OSError, TypeError):
            continue
        keys += [k for k in _READS.findall(source) if k not in keys]
    return keys


def group_factory(cls: type, hyper: dict, pairs: Sequence[FactorPair]):
    """``params ↦ cls(groups, **hyper)``: the groups of ``cls``'s adapter for ``pairs``, or the
    plain parameter list when :data:`ADAPTERS` has no entry for it."""
    found = find_adapter(cls)
    if found is None:
        return lambda params: cls(params, **hyper)
    build = found[1].build
    return lambda params: cls(build(params, pairs), **hyper)


__all__ = [
    "ADAPTERS",
    "GALORE_RANK",
    "FactorPair",
    "GroupAdapter",
    "find_adapter",
    "group_factory",
    "needed_group_keys",
]
