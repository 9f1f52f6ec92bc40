"""Sign-based rules: ``sign-sgd``, ``signum`` and ``lion``. ``sign(0) = 0`` throughout.

All three are entrywise nonlinear maps, so none is orthogonally gauge-equivariant
(singh2026lossbasis, Prop. 4.3 and its sign witness in App. B.4).
"""

from __future__ import annotations

import torch

from gaugelab.optim._base import COVARIANT, INVARIANT, check_betas, check_range
from gaugelab.optim._zoo import ZooOptimizer


class SignSGD(ZooOptimizer):
    """signSGD: ``p ← p − η sign(G)``.

    Args:
        params: parameters or param groups.
        lr: η ≥ 0.
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: bernstein2018signsgd.
    """

    rule_name = "sign-sgd"
    state_kinds = {"step": INVARIANT}

    def __init__(self, params, lr: float = 1e-3, *, member_dims: int = 0) -> None:
        super().__init__(params, dict(lr=check_range(self.rule_name, "lr", lr, low=0)), member_dims)

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        for q in params:
            self._state(q)["step"] += 1
            q.add_(torch.sign(q.grad), alpha=-group["lr"])


class Signum(ZooOptimizer):
    """Signum: ``m ← β m + (1−β) G``, ``p ← p − η sign(m)``.

    Args:
        params: parameters or param groups.
        lr: η ≥ 0.
        momentum: β ∈ [0, 1) (default 0.9).
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: bernstein2018signsgd (Signum).
    """

    rule_name = "signum"
    state_kinds = {"momentum_buffer": COVARIANT, "step": INVARIANT}

    def __init__(
        self, params, lr: float = 1e-3, momentum: float = 0.9, *, member_dims: int = 0
    ) -> None:
        defaults = dict(
            lr=check_range(self.rule_name, "lr", lr, low=0),
            momentum=check_range(
                self.rule_name, "momentum", momentum, low=0, high=1, high_open=True
            ),
        )
        super().__init__(params, defaults, member_dims)

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        for q in params:
            state = self._state(q, momentum_buffer=True)
            state["step"] += 1
            m = state["momentum_buffer"].lerp_(q.grad, 1 - group["momentum"])
            q.add_(torch.sign(m), alpha=-group["lr"])


class Lion(ZooOptimizer):
    """Lion: ``c = sign(β1 m + (1−β1) G)``, ``p ← p − η c``, ``m ← β2 m + (1−β2) G``.

    Args:
        params: parameters or param groups.
        lr: η ≥ 0.
        betas: (β1, β2) in [0, 1) (default (0.9, 0.99)).
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: chen2023lion.
    """

    rule_name = "lion"
    state_kinds = {"exp_avg": COVARIANT, "step": INVARIANT}

    def __init__(
        self,
        params,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        *,
        member_dims: int = 0,
    ) -> None:
        defaults = dict(
            lr=check_range(self.rule_name, "lr", lr, low=0),
            betas=check_betas(self.rule_name, betas),
        )
        super().__init__(params, defaults, member_dims)

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        for q in params:
            state = self._state(q, exp_avg=True)
            state["step"] += 1
            m, g = state["exp_avg"], q.grad
            q.add_(torch.sign(m.lerp(g, 1 - beta1)), alpha=-group["lr"])
            m.lerp_(g, 1 - beta2)
