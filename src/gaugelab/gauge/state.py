"""State actions: move an optimizer's state along with a gauge transformation of its parameters.

A rule declares, through ``optimizer.state_geometry(group)``, how each state entry transforms
(see ``gaugelab.optim._base``); this module applies the declared action. It reads that
declaration by duck typing and never imports the optimizer layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from gaugelab.gauge.actions import contragredient
from gaugelab.gauge.groups import SignedPermutation

_COVARIANT, _INVARIANT, _ENTRYWISE = "covariant", "invariant", "entrywise"
_COLUMN_STATS, _CONGRUENCE = "column-stats", "congruence"


def _is_signed_permutation(M: torch.Tensor) -> bool:
    return SignedPermutation(M.shape[-1]).contains(M, atol=64 * torch.finfo(M.dtype).eps)


def _move(kind: str, value, M: torch.Tensor, where: str):
    if not isinstance(value, torch.Tensor):
        return value
    if kind == _INVARIANT:  # a copy: the twin must not share in-place-updated state with its base
        return value.clone()
    if kind == _COVARIANT:
        return value @ contragredient(M)
    if kind == _CONGRUENCE:  # R = Σ GᵀG with G ↦ G M⁻ᵀ gives M⁻¹ R M⁻ᵀ (QᵀRQ when orthogonal)
        N = contragredient(M)
        return N.mT @ value @ N
    if kind in (_ENTRYWISE, _COLUMN_STATS):
        if _is_signed_permutation(M):
            P = M.abs()
            if kind == _ENTRYWISE:
                return value @ P
            return (value.unsqueeze(-2) @ P).squeeze(-2)
        if not bool((value == 0).all()):
            raise ValueError(
                f"transform_state: {where} is a per-coordinate statistic ({kind}); no state "
                f"action moves it under a non-permutation element and it is nonzero. Start the "
                f"twin from a zero state, or use a signed permutation"
            )
        return value.clone()
    raise ValueError(f"transform_state: {where} declares unknown kind {kind!r}")


def transform_state(
    optimizer: torch.optim.Optimizer,
    params: Sequence[torch.Tensor] | Mapping[torch.Tensor, torch.Tensor],
    element: torch.Tensor | None = None,
) -> None:
    """Move an optimizer's state to gauge-transformed parameters, in place.

    When parameter ``p`` is replaced by ``p @ M`` (the orthogonal gauge ``(U Q, V Q)`` or the
    GL gauge ``(U A, V A⁻ᵀ)``), a gauge-equivariant rule's state must move with it for the twin
    to follow the transformed trajectory: momentum buffers by ``M⁻ᵀ`` (``Q`` when orthogonal),
    Shampoo's right accumulator and root by congruence (``Qᵀ R Q``), step counters, shared
    scalars and left accumulators unchanged. Per-coordinate statistics (Adam's ``v``, Adafactor's
    column statistics) move only under signed permutations; otherwise they must still be zero.
    Every moved entry is a new tensor, so a twin whose optimizer was loaded from its base's
    ``state_dict`` shares no state with the base afterwards.

    Args:
        optimizer: an optimizer that declares ``state_geometry(group) -> {key: kind}`` (every
            rule of ``gaugelab.optim`` does).
        params: the transformed parameters, either a sequence (all with the same ``element``)
            or a mapping parameter → its own element ``M`` (``[k, k]`` or ``[*members, k, k]``,
            acting on the parameter's last dim). Parameters not listed keep their state.
        element: the shared ``[k, k]`` element when ``params`` is a sequence.

    Raises:
        TypeError: the optimizer declares no state geometry.
        ValueError: a parameter does not belong to the optimizer, an element has the wrong
            shape, or a nonzero state entry has no action under the element. Nothing is
            modified when an error is raised.

    Source: singh2026lossbasis, Def. 3.1 (state action) and Prop. 4.2 (its proof gives the
    actions).
    """
    if not callable(getattr(optimizer, "state_geometry", None)):
        raise TypeError(
            f"transform_state: {type(optimizer).__name__} declares no state geometry "
            f"(state_geometry(group)); no state action is known for it"
        )
    if isinstance(params, Mapping):
        elements = dict(params)
    else:
        if element is None:
            raise ValueError("transform_state: element is required when params is a sequence")
        elements = {p: element for p in params}
    owner = {}
    for gi, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            owner[p] = (gi, group)
    moved: dict[torch.Tensor, dict] = {}
    for p, M in elements.items():
        if p not in owner:
            raise ValueError(
                f"transform_state: a parameter of shape {tuple(p.shape)} is not in the optimizer"
            )
        if M.dim() < 2 or M.shape[-1] != M.shape[-2] or M.shape[-1] != p.shape[-1]:
            raise ValueError(
                f"transform_state: element shape {tuple(M.shape)} does not act on a parameter "
                f"of shape {tuple(p.shape)}; allowed: [..., k, k] with k = {p.shape[-1]}"
            )
        gi, group = owner[p]
        geometry = optimizer.state_geometry(group)
        state = optimizer.state.get(p, {})
        new = {}
        for key, value in state.items():
            if key not in geometry:
                raise ValueError(
                    f"transform_state: state entry {key!r} of {type(optimizer).__name__} has no "
                    f"declared geometry"
                )
            where = f"state {key!r} of parameter {tuple(p.shape)} in group {gi}"
            new[key] = _move(geometry[key], value, M.to(p.dtype), where)
        moved[p] = new
    for p, new in moved.items():
        if new:
            optimizer.state[p] = new
