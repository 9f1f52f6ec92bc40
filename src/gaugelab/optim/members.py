"""Per-member learning rates and an active mask for any zoo rule stepped over an ensemble.

Every rule of the zoo updates ``p ← p − η·u`` with a direction ``u`` that does not depend on η
(AdamW's decoupled decay ``p(1 − ηλ)`` is linear in η too). So an ensemble in which member ``e``
has its own rate ``η_e`` is one inner optimizer stepped at ``lr = 1`` followed by

    p ← p_old + η_e · s · (p_stepped − p_old)

with ``s`` a common schedule factor, per member. A boolean *active* mask freezes members: an
inactive member's parameters are kept bit for bit (``torch.where``, so even a non-finite inner
update of that member cannot leak in), its gradient is replaced by zeros before the inner step,
and its inner state may keep updating on those zero gradients (harmless: it never moves again).
Members that diverge can be rolled back to their parameters before the last step and have
their inner state zeroed (:meth:`MemberLearningRates.deactivate`), so no NaN is ever computed on.

Precision: ``p_stepped − p_old`` carries a rounding error of about ``ε_mach·max(|p|, |u|)`` per
entry, so the added error per step is about ``η·ε_mach·|p|`` — below the rounding of ``p``
itself whenever ``η < 1``. In float64 an ensemble equals separate runs with native learning
rates to ~1e-15 relative per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from gaugelab.errors import NonFiniteError
from gaugelab.optim._base import broadcast_members

__all__ = ["MemberLearningRates", "cosine_factor"]


def cosine_factor(step: int, total: int) -> float:
    """The cosine schedule ``½(1 + cos(π t / T))`` at update index ``t`` (0-based) of ``T``.

    The first update (``t = 0``) runs at the full rate and the last (``t = T − 1``) at
    ``½(1 + cos(π (T−1)/T))``: the convention of ``torch.optim.lr_scheduler.CosineAnnealingLR``
    with ``T_max = T`` and ``eta_min = 0`` stepped once after every update.

    Args:
        step: t ≥ 0, the number of updates already taken.
        total: T ≥ 1, the step budget.

    Returns:
        The factor in ``[0, 1]`` (a Python float).

    Raises:
        ValueError: ``total < 1`` or ``step < 0``.

    Source: loshchilov2017sgdr (cosine annealing); docs/protocols.md §3 (the decayed set).
    """
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        raise ValueError(f"cosine_factor: total={total!r}; allowed: an integer >= 1")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"cosine_factor: step={step!r}; allowed: an integer >= 0")
    return 0.5 * (1.0 + math.cos(math.pi * step / total))


class MemberLearningRates:
    """Step an ensemble optimizer with one learning rate per member and an active mask.

    Args:
        optimizer: a zoo rule (any ``torch.optim.Optimizer`` whose update is ``p ← p − lr·u``
            with ``u`` independent of ``lr``) built with ``lr=1`` in every param group. Every
            parameter must start with the member dims ``[*member_shape, ...]``.
        lr: ``[*member_shape]`` learning rates η_e ≥ 0 (cast to each parameter's dtype).

    Attributes:
        optimizer: the inner optimizer.
        lr: ``[*member_shape]`` the rates, float64.
        member_shape: the leading member dims shared by every parameter.

    Raises:
        ValueError: a param group with ``lr != 1``; a parameter whose leading dims are not
            ``lr.shape``; a negative or non-finite rate.

    Source: ours (an exact rewriting of per-run learning rates; DESIGN.md "Members").
    """

    def __init__(self, optimizer: torch.optim.Optimizer, lr: torch.Tensor) -> None:
        lr = torch.as_tensor(lr, dtype=torch.float64)
        if not bool(torch.isfinite(lr).all()) or bool((lr < 0).any()):
            raise ValueError(f"MemberLearningRates: lr={lr.tolist()}; allowed: finite rates >= 0")
        shape = tuple(lr.shape)
        for gi, group in enumerate(optimizer.param_groups):
            if float(group["lr"]) != 1.0:
                raise ValueError(
                    f"MemberLearningRates: param group {gi} has lr={group['lr']!r}; allowed: "
                    f"1.0 (build the inner optimizer with lr=1; the member rates come from lr)"
                )
            for pi, p in enumerate(group["params"]):
                if tuple(p.shape[: len(shape)]) != shape:
                    raise ValueError(
                        f"MemberLearningRates: parameter {pi} of group {gi} has shape "
                        f"{tuple(p.shape)}; allowed: leading member dims {shape} (lr.shape)"
                    )
        self.optimizer = optimizer
        self.lr = lr.clone()
        self.member_shape = shape
        self._active = torch.ones(shape, dtype=torch.bool)
        self._previous: list[torch.Tensor] | None = None

    @property
    def params(self) -> list[torch.Tensor]:
        """Every parameter of the inner optimizer, in group order."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    @property
    def active(self) -> torch.Tensor:
        """``[*member_shape]`` bool: members that still move (a copy)."""
        return self._active.clone()

    def state_dict(self) -> dict:
        """Everything a resumed run needs: the inner optimizer's ``state_dict()``, the active
        mask ``[*member_shape]`` and the parameters before the last step (for a rollback)."""
        previous = None if self._previous is None else [p.clone() for p in self._previous]
        return {
            "inner": self.optimizer.state_dict(),
            "active": self._active.clone(),
            "previous": previous,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (the member rates themselves are not part of it).

        Raises:
            ValueError: the active mask or a previous parameter has the wrong shape.
        """
        active = torch.as_tensor(state["active"], dtype=torch.bool)
        previous = state["previous"]
        shapes = [tuple(p.shape) for p in self.params]
        if tuple(active.shape) != self.member_shape or (
            previous is not None and [tuple(p.shape) for p in previous] != shapes
        ):
            raise ValueError(
                "MemberLearningRates.load_state_dict: the state does not match these "
                f"parameters (member shape {self.member_shape}, parameter shapes {shapes})"
            )
        self.optimizer.load_state_dict(state["inner"])
        self._active = active.clone()
        self._previous = None if previous is None else [p.clone() for p in previous]

    def deactivate(self, members: torch.Tensor, *, rollback: bool = False) -> None:
        """Freeze ``members`` from now on.

        Args:
            members: ``[*member_shape]`` bool; True entries are frozen (already frozen ones
                stay frozen).
            rollback: also restore those members' parameters to their values before the last
                :meth:`step` and zero their inner state (every state tensor with the leading
                member dims; NaN/inf included): for a member that diverged, so nothing
                non-finite is ever computed on again. No effect before the first step except
                the state zeroing.

        Raises:
            ValueError: ``members`` has the wrong shape or is not bool.
        """
        if members.dtype != torch.bool or tuple(members.shape) != self.member_shape:
            raise ValueError(
                f"MemberLearningRates.deactivate: members of shape {tuple(members.shape)} and "
                f"dtype {members.dtype}; allowed: bool {self.member_shape}"
            )
        self._active &= ~members
        if not rollback or not bool(members.any()):
            return
        with torch.no_grad():
            if self._previous is not None:
                for p, old in zip(self.params, self._previous, strict=True):
                    p.copy_(torch.where(broadcast_members(members, p), old, p))
            for state in self.optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor) and self._has_members(value):
                        value.masked_fill_(broadcast_members(members, value), 0)

    def compact(self, keep: torch.Tensor) -> None:
        """Keep only the members ``keep`` (the others leave the ensemble), in that order.

        Every parameter, its gradient, the rates, the active mask, the parameters before the
        last step and every inner state tensor with the leading member dim are re-indexed in
        place (``index_select``: exact), so the kept members continue bit for bit while the
        step's batched work shrinks to them. The parameters stay the same tensor objects (the
        inner optimizer's state stays keyed by them); their shape changes.

        Args:
            keep: ``[E']`` int64 indices into the current members, increasing; only with one
                member dim (``lr`` of shape ``[E]``).

        Raises:
            ValueError: more than one member dim, or ``keep`` not increasing indices in
                ``[0, E)``.

        Source: ours (issue "member compaction": a member that stopped leaves the batch).
        """
        if len(self.member_shape) != 1:
            raise ValueError(
                f"MemberLearningRates.compact: member shape {self.member_shape}; allowed: one "
                "member dim (flatten the members first)"
            )
        (size,) = self.member_shape
        keep = torch.as_tensor(keep, dtype=torch.int64)
        if keep.dim() != 1 or (
            keep.numel()
            and (int(keep[0]) < 0 or int(keep[-1]) >= size or bool((keep.diff() <= 0).any()))
        ):
            raise ValueError(
                f"MemberLearningRates.compact: keep={keep.tolist()}; allowed: increasing "
                f"indices in [0, {size})"
            )
        with torch.no_grad():
            for p in self.params:
                p.data = p.data.index_select(0, keep)
                if p.grad is not None:
                    p.grad = p.grad.index_select(0, keep)
            for state in self.optimizer.state.values():
                for name, value in state.items():
                    if isinstance(value, torch.Tensor) and self._has_members(value):
                        state[name] = value.index_select(0, keep)
            if self._previous is not None:
                self._previous = [old.index_select(0, keep) for old in self._previous]
        self.lr = self.lr.index_select(0, keep)
        self._active = self._active.index_select(0, keep)
        self.member_shape = (keep.numel(),)

    def _has_members(self, x: torch.Tensor) -> bool:
        n = len(self.member_shape)
        return x.dim() >= n and tuple(x.shape[:n]) == self.member_shape

    def step(
        self, closure: Callable[[], torch.Tensor] | None = None, *, scale: float = 1.0
    ) -> torch.Tensor | None:
        """One step: member ``e`` moves by ``lr[e]·scale`` times the rule's update; frozen
        members do not move.

        Args:
            closure: re-evaluates the loss and gradients (optional). A returned loss of shape
                ``[*member_shape]`` is checked on active members only; any other shape is
                checked whole.
            scale: a common factor ≥ 0 on every rate (the schedule, e.g. :func:`cosine_factor`).

        Returns:
            The closure's loss, or ``None``.

        Raises:
            NonFiniteError: a non-finite loss or gradient of an active member (from here or the
                inner rule), raised before any parameter or state is modified.
            ValueError: a negative or non-finite ``scale``.
        """
        if not (scale >= 0 and scale != float("inf")):
            raise ValueError(f"MemberLearningRates.step: scale={scale!r}; allowed: a finite >= 0")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            if isinstance(loss, torch.Tensor):
                checked = loss[self._active] if tuple(loss.shape) == self.member_shape else loss
                if not bool(torch.isfinite(checked).all()):
                    raise NonFiniteError(
                        f"MemberLearningRates.step: the closure returned a non-finite loss for "
                        f"an active member ({loss})"
                    )
        params = self.params
        frozen = ~self._active
        with torch.no_grad():
            if bool(frozen.any()):
                for p in params:
                    if p.grad is not None:
                        p.grad.masked_fill_(broadcast_members(frozen, p.grad), 0)
            previous = [p.detach().clone() for p in params]
            self.optimizer.step()  # raises NonFiniteError before anything moves
            rate = self.lr * float(scale)  # [*member_shape], float64
            all_active = not bool(frozen.any())
            for p, old in zip(params, previous, strict=True):
                eta = broadcast_members(rate.to(p.dtype), p)
                if all_active:  # p ← (p − old)·η + old, in place
                    p.sub_(old).mul_(eta).add_(old)
                else:  # bit for bit: a frozen member keeps `old` even if its update is not finite
                    moved = old + eta * (p - old)
                    p.copy_(torch.where(broadcast_members(self._active, p), moved, old))
        self._previous = previous
        return loss
