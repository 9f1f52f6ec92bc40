"""Base classes for the two kinds of zoo rule: wrapped ``torch.optim`` rules and our own."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gaugelab.optim._base import ZooMixin
from gaugelab.optim._compiler_guard import torch_method


class TorchRule(ZooMixin):
    """Mixin for a ``torch.optim`` class whose rule is exactly the protocol's.

    Subclass as ``class Adam(TorchRule, torch.optim.Adam)``; the torch update runs unchanged
    after the closure and the finiteness check.
    """

    def step(self, closure: Callable[[], torch.Tensor] | None = None):  # type: ignore[override]
        loss = self._evaluate(closure)
        # torch's step wrapper sets this grad mode; see gaugelab.optim._compiler_guard
        with torch.set_grad_enabled(self.defaults.get("differentiable", False)):
            torch_method(super().step)()  # type: ignore[misc]
        return loss


class ZooOptimizer(ZooMixin, torch.optim.Optimizer):
    """Base of the rules written here: subclasses implement ``_update_group``.

    ``_update_group(group, params)`` runs under ``torch.no_grad()`` with the parameters of
    ``group`` that have a gradient, after the finiteness check.
    """

    def __init__(self, params, defaults: dict, member_dims: int) -> None:
        super().__init__(params, defaults)
        self._init_members(member_dims)

    def step(self, closure: Callable[[], torch.Tensor] | None = None):  # type: ignore[override]
        loss = self._evaluate(closure)
        with torch.no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if params:
                    self._update_group(group, params)
        return loss

    def _state(self, p: torch.Tensor, **zeros_like: bool) -> dict:
        """The state of ``p``, created on first use with a step counter and zero buffers."""
        state = self.state[p]
        if not state:
            state["step"] = 0
            for key in zeros_like:
                state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state
