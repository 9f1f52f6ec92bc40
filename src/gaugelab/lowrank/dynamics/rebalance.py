"""Rebalancing LoRA factors, ``(B, A) ↦ (B G, G⁻¹ A)``, with the optimizer state moved or reset.

Public through :mod:`gaugelab.lowrank.dynamics.diagnostics` (:func:`rebalance_factors`,
:class:`Rebalance`).

Source: seed 003 §0x08J (periodic rebalancing: optimizer moments must be transformed or reset),
§0x08K (the rebalance history of a checkpoint), §0x08L (post-transform finite checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from gaugelab.gauge import transform_state

__all__ = [
    "FOREIGN_STATE_POLICIES",
    "STATE_POLICIES",
    "ForeignStatePolicy",
    "Rebalance",
    "StatePolicy",
    "rebalance_factors",
]

StatePolicy = Literal["auto", "transform", "reset"]
STATE_POLICIES: tuple[str, ...] = ("auto", "transform", "reset")
ForeignStatePolicy = Literal["raise", "reset"]
FOREIGN_STATE_POLICIES: tuple[str, ...] = ("raise", "reset")
_TRANSPOSABLE = ("covariant", "invariant", "entrywise")  # kinds whose action commutes with ᵀ


@dataclass(frozen=True)
class Rebalance:
    """What :func:`rebalance_factors` did (one entry of the factor history, §0x08K).

    Attributes:
        state: ``"transformed"`` (the optimizer state moved with the gauge element through
            :func:`gaugelab.gauge.transform_state`), ``"reset"`` (the factors' state cleared:
            the next step starts their moments from zero) or ``"none"`` (no optimizer given,
            or it held no state for the factors).
        reason: why, in words (for ``"reset"`` under ``policy="auto"``: what refused the
            transformation).
        product_change: ``‖B' A' − B A‖_F / ‖B A‖_F`` after the rebalance, computed in float64
            (round-off of the re-expression; 0 for ``‖B A‖ = 0``).
    """

    state: str
    reason: str
    product_change: float


class _Transposed:
    """A's optimizer state presented as the state of ``Aᵀ`` (rank on the last dim), so that
    :func:`gaugelab.gauge.transform_state` applies the rule's declared action to it."""

    def __init__(self, optimizer: torch.optim.Optimizer, A: torch.Tensor, group: dict) -> None:
        self.key = A.detach().mT
        self.param_groups = [{**group, "params": [self.key]}]
        self._geometry = optimizer.state_geometry(group)  # type: ignore[attr-defined]
        state = optimizer.state[A]
        self.flipped = {
            k for k, v in state.items() if isinstance(v, torch.Tensor) and v.shape == A.shape
        }
        self.state = {self.key: {k: (v.mT if k in self.flipped else v) for k, v in state.items()}}

    def state_geometry(self, group: dict) -> dict[str, str]:
        return self._geometry


def _group_of(optimizer: torch.optim.Optimizer, p: torch.Tensor) -> dict:
    for group in optimizer.param_groups:
        if any(q is p for q in group["params"]):
            return group
    raise ValueError(
        f"rebalance_factors: a factor of shape {tuple(p.shape)} is not in the optimizer"
    )


def _moved_state(optimizer, A, B, G) -> dict[torch.Tensor, dict]:
    """The transformed states of A and B (nothing written). Raises ValueError when the rule's
    declared geometry has no action for a nonzero entry under ``G``."""
    group_A = _group_of(optimizer, A)
    kinds = optimizer.state_geometry(group_A)
    odd = sorted(k for k in optimizer.state[A] if kinds.get(k) not in _TRANSPOSABLE)
    if odd:
        raise ValueError(f"state entries {odd} of A act on its rank rows, not a last dim")
    shim = _Transposed(optimizer, A, group_A)
    transform_state(shim, {shim.key: torch.linalg.inv(G).mT})  # Aᵀ ↦ Aᵀ G⁻ᵀ (nothing written)
    moved_A = {
        k: (v.mT.contiguous() if k in shim.flipped else v) for k, v in shim.state[shim.key].items()
    }
    transform_state(optimizer, {B: G})  # B ↦ B G (raises before writing anything)
    moved_B = optimizer.state[B]
    return {A: moved_A, B: moved_B}


def rebalance_factors(
    B: torch.Tensor,
    A: torch.Tensor,
    G: torch.Tensor,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    state: StatePolicy = "auto",
    foreign_state: ForeignStatePolicy = "raise",
) -> Rebalance:
    """Re-express a LoRA update in another factor basis, in place: ``(B, A) ↦ (B G, G⁻¹ A)``.

    The product ``B A`` is preserved up to round-off (reported). The optimizer's state of the
    two factors is moved with ``G`` by :func:`gaugelab.gauge.transform_state` (momentum
    buffers ``m_B ↦ m_B G⁻ᵀ``, ``m_A ↦ Gᵀ m_A``; invariant entries copied) or reset (cleared,
    so the rule re-initialises it at the next step). Per-coordinate statistics (Adam's second
    moment) have no action under a non-permutation ``G``: ``state="auto"`` then resets, and
    the record says so. An optimizer that declares no state geometry (``torch.optim.Adam``,
    any rule outside :mod:`gaugelab.optim`) has no known action at all: its moments of the
    factors would go stale, so it is refused unless ``foreign_state="reset"`` (or
    ``state="reset"``) asks for them to be cleared.

    Args:
        B: ``[*members, d_out, r]`` up factor (a leaf tensor, modified in place).
        A: ``[*members, r, d_in]`` down factor (modified in place).
        G: ``[*members, r, r]`` or ``[r, r]`` invertible element (e.g. ``c·I`` for the scalar
            gauge ``(c B, A / c)``).
        optimizer: the optimizer training ``B`` and ``A`` (a rule of :mod:`gaugelab.optim`
            declares its state geometry, ``state_geometry(group)``; any other is *foreign*),
            or ``None``.
        state: ``"auto"`` (transform when the rule's geometry allows, else reset),
            ``"transform"`` (raise when it does not) or ``"reset"``.
        foreign_state: what ``state="auto"`` does with a foreign optimizer's state of the
            factors: ``"raise"`` (the default: a ``ValueError`` naming the optimizer's class)
            or ``"reset"`` (clear it; the record names the class). ``state="transform"``
            always raises for a foreign optimizer, ``state="reset"`` always resets.

    Returns:
        The :class:`Rebalance` record: which state policy was applied and why.

    Raises:
        ValueError: bad shapes or policy; a singular ``G``; factors that would not be finite
            in their dtype after the transformation (a gauge outside the dtype's range, seed
            003 §0x08I); ``state="transform"`` with state that cannot move under ``G``; a
            foreign optimizer holding state of the factors under ``state="transform"``, or
            under ``state="auto"`` with ``foreign_state="raise"``. Nothing is modified when an
            error is raised.

    Source: seed 003 §0x08J (rebalancing: moments transformed or reset), §0x08L (the
    post-transform finite check).
    """
    where = "rebalance_factors"
    if state not in STATE_POLICIES:
        raise ValueError(f"{where}: state={state!r}; allowed: {', '.join(STATE_POLICIES)}")
    if foreign_state not in FOREIGN_STATE_POLICIES:
        raise ValueError(
            f"{where}: foreign_state={foreign_state!r}; allowed: "
            f"{', '.join(FOREIGN_STATE_POLICIES)}"
        )
    r = A.shape[-2] if A.dim() >= 2 else -1
    if (
        B.dim() < 2
        or A.dim() < 2
        or B.shape[-1] != r
        or B.shape[:-2] != A.shape[:-2]
        or G.shape[-2:] != (r, r)
    ):
        raise ValueError(
            f"{where}: B {tuple(B.shape)}, A {tuple(A.shape)}, G {tuple(G.shape)}; allowed: "
            f"B [*, d_out, r], A [*, r, d_in], G [*, r, r] or [r, r]"
        )
    G64 = G.detach().double()
    if bool((torch.linalg.matrix_rank(G64) < r).any()):
        raise ValueError(f"{where}: G is singular; allowed: an invertible [r, r] element")
    B64, A64 = B.detach().double(), A.detach().double()  # for float64, views of B and A
    before = B64 @ A64  # taken before B and A are written below
    new_B, new_A = B64 @ G64, torch.linalg.solve(G64, A64)
    cast_B, cast_A = new_B.to(B.dtype), new_A.to(A.dtype)
    if not (bool(torch.isfinite(cast_B).all()) and bool(torch.isfinite(cast_A).all())):
        raise ValueError(
            f"{where}: the rebalanced factors are not finite in {B.dtype} (the gauge "
            f"exceeds the dtype's range); nothing was changed"
        )
    held = optimizer is not None and bool(optimizer.state.get(A) or optimizer.state.get(B))
    moved, applied, reason = None, "none", "no optimizer state for these factors"
    declared = callable(getattr(optimizer, "state_geometry", None))
    if held and state != "reset" and not declared:
        name = type(optimizer).__name__
        if state == "transform" or foreign_state == "raise":
            raise ValueError(
                f"{where}: {name} declares no state geometry (state_geometry(group)), so its "
                f"moments of these factors cannot be transformed with G and would be stale "
                f"(state={state!r}, foreign_state={foreign_state!r}); choices: "
                f"foreign_state='reset' (clear them; the rule restarts its moments) or "
                f"'raise' (the default), state='reset', or a rule of gaugelab.optim"
            )
        applied, reason = "reset", f"reset: {name} declares no state geometry"
    elif held and state != "reset":
        try:
            moved = _moved_state(optimizer, A, B, G.detach().to(B.dtype))
            applied, reason = "transformed", "moved with G by gauge.transform_state"
        except ValueError as exc:
            if state == "transform":
                raise ValueError(f"{where}: the state cannot move with G ({exc})") from None
            applied, reason = "reset", f"reset: the state cannot move with G ({exc})"
    elif held:
        applied, reason = "reset", "reset on request"
    with torch.no_grad():
        B.copy_(cast_B)
        A.copy_(cast_A)
    if held and optimizer is not None:
        for p in (A, B):
            optimizer.state[p] = moved[p] if moved is not None else {}
    norm = float(torch.linalg.matrix_norm(before).max()) if before.numel() else 0.0
    change = float(torch.linalg.matrix_norm(cast_B.double() @ cast_A.double() - before).max())
    return Rebalance(applied, reason, change / norm if norm > 0 else 0.0)
