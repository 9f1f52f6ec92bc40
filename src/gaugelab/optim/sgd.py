"""Gradient descent and momentum: ``gd``, ``heavy-ball``, ``nesterov`` (``torch.optim.SGD``).

Source: singh2026lossbasis, Prop. 4.2(1) — all three are orthogonally gauge-equivariant.
"""

from __future__ import annotations

import torch

from gaugelab.optim._base import COVARIANT, check_range
from gaugelab.optim._zoo import TorchRule


class GD(TorchRule, torch.optim.SGD):
    """Plain gradient descent ``p ← p − η G``.

    Args:
        params: parameters or param groups (each group may set ``lr`` and ``member_dims``).
        lr: learning rate η ≥ 0.
        member_dims: leading ensemble dims of every parameter (entrywise rule: no reductions).

    Raises:
        ValueError: negative or non-finite ``lr``; bad ``member_dims``.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: singh2026lossbasis, Prop. 4.2(1).
    """

    rule_name = "gd"
    state_kinds = {}

    def __init__(self, params, lr: float = 1e-2, *, member_dims: int = 0) -> None:
        lr = check_range(self.rule_name, "lr", lr, low=0)
        super().__init__(params, lr=lr, momentum=0.0)
        self._init_members(member_dims)


class HeavyBall(TorchRule, torch.optim.SGD):
    """Polyak heavy-ball momentum, sum form: ``b ← μ b + G``, ``p ← p − η b`` (no dampening).

    Args:
        params: parameters or param groups.
        lr: learning rate η ≥ 0.
        momentum: μ ∈ [0, 1).
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: singh2026lossbasis, Prop. 4.2(1).
    """

    rule_name = "heavy-ball"
    state_kinds = {"momentum_buffer": COVARIANT}
    nesterov = False

    def __init__(
        self, params, lr: float = 1e-2, momentum: float = 0.9, *, member_dims: int = 0
    ) -> None:
        lr = check_range(self.rule_name, "lr", lr, low=0)
        momentum = check_range(self.rule_name, "momentum", momentum, low=0, high=1, high_open=True)
        super().__init__(params, lr=lr, momentum=momentum, dampening=0.0, nesterov=self.nesterov)
        self._init_members(member_dims)


class Nesterov(HeavyBall):
    """Nesterov momentum in torch's SGD form: ``b ← μ b + G``, ``p ← p − η (G + μ b)``.

    Same arguments and errors as :class:`HeavyBall`.

    Source: singh2026lossbasis, Prop. 4.2(1) (look-ahead points transform covariantly).
    """

    rule_name = "nesterov"
    nesterov = True
