"""The Adam-p dial and scalar-Adam: Adam's denominator interpolated toward one shared scalar.

``denominator = (√v̂ + ε)^p · (s̄ + ε)^(1−p)`` with ``s̄ = √(mean v̂)`` pooled over every entry of
every tensor in the param group, separately per ensemble member. ``p = 1`` is Adam; ``p = 0`` is
scalar-Adam, which is orthogonally gauge-equivariant.
"""

from __future__ import annotations

import math

import torch

from gaugelab.optim._base import (
    COVARIANT,
    ENTRYWISE,
    INVARIANT,
    broadcast_members,
    check_betas,
    check_choice,
    check_range,
    member_sum,
)
from gaugelab.optim._zoo import ZooOptimizer

MEANS = ("rms", "geometric")


class AdamP(ZooOptimizer):
    """Adam-p: per-coordinate denominator to the power p, shared scalar to the power 1 − p.

    Args:
        params: parameters or param groups. The pooled scalar is shared by every tensor of a
            group, so all tensors of a group must have the same member shape.
        lr: η ≥ 0.
        p: the dial, in [0, 1]. 1 is Adam, 0 is scalar-Adam.
        betas: (β1, β2) in [0, 1).
        eps: ε ≥ 0 (inside each factor; no extra ε after the product).
        mean: ``"rms"`` (``s̄ = √mean v̂``, exactly equivariant at p = 0) or ``"geometric"``
            (``exp(mean log(√v̂ + ε))`` replaces ``s̄ + ε``; only approximately equivariant).
        member_dims: leading ensemble dims; pooling is per member.

    Raises:
        ValueError: hyperparameter out of range; tensors of one group with different member
            shapes.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: singh2026lossbasis, §7 (the dial) and Prop. 4.2(2) (p = 0).
    """

    rule_name = "adam-p"

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        p: float = 0.5,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        mean: str = "rms",
        *,
        member_dims: int = 0,
    ) -> None:
        defaults = dict(
            lr=check_range(self.rule_name, "lr", lr, low=0),
            p=check_range(self.rule_name, "p", p, low=0, high=1),
            betas=check_betas(self.rule_name, betas),
            eps=check_range(self.rule_name, "eps", eps, low=0),
            mean=check_choice(self.rule_name, "mean", mean, MEANS),
        )
        super().__init__(params, defaults, member_dims)

    def state_geometry(self, group: dict) -> dict[str, str]:
        # At p = 0 with the RMS mean, v is read only through its pooled mean, which every
        # orthogonal change of basis preserves: the array itself may stay as it is.
        pooled_only = group["p"] == 0 and group["mean"] == "rms"
        return {
            "exp_avg": COVARIANT,
            "exp_avg_sq": INVARIANT if pooled_only else ENTRYWISE,
            "step": INVARIANT,
        }

    def _check_group(self, group: dict) -> None:
        super()._check_group(group)
        md = group["member_dims"]
        shapes = {tuple(q.shape[:md]) for q in group["params"]}
        if len(shapes) > 1:
            raise ValueError(
                f"{self.rule_name}: tensors of one param group must share their member shape "
                f"(member_dims={md}) to pool one scalar per member; got {sorted(shapes)}"
            )

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        lr, p, eps, md = group["lr"], group["p"], group["eps"], group["member_dims"]
        roots = []
        for q in params:
            state = self._state(q, exp_avg=True, exp_avg_sq=True)
            state["step"] += 1
            g = q.grad
            state["exp_avg"].lerp_(g, 1 - beta1)
            state["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
        step = self.state[params[0]]["step"]
        bc1 = 1 - beta1**step
        bc2_sqrt = math.sqrt(1 - beta2**step)
        for q in params:
            roots.append(self.state[q]["exp_avg_sq"].sqrt() / bc2_sqrt)  # √v̂
        count = sum(r[(0,) * md].numel() for r in roots)
        if p != 1:
            if group["mean"] == "rms":
                pooled = sum(member_sum(r * r, md) for r in roots) / count
                shared = pooled.sqrt() + eps
            else:
                pooled = sum(member_sum(torch.log(r + eps), md) for r in roots) / count
                shared = pooled.exp()
        for q, r in zip(params, roots, strict=True):
            if p == 1:
                denom = r.add_(eps)
            elif p == 0:
                denom = broadcast_members(shared, q)
            else:
                denom = r.add_(eps).pow_(p) * broadcast_members(shared, q).pow(1 - p)
            q.addcdiv_(self.state[q]["exp_avg"], denom, value=-lr / bc1)


class ScalarAdam(AdamP):
    """Scalar-Adam: Adam's first moment with one shared second-moment scalar per group.

    ``s = √(mean of v̂ over all entries of all tensors in the group) + ε``;
    ``p ← p − (η/s) m̂``. Identical to :class:`AdamP` at ``p = 0``, ``mean="rms"``.

    Args:
        params: parameters or param groups (pooling is per group and per member).
        lr: η ≥ 0.
        betas: (β1, β2) in [0, 1).
        eps: ε ≥ 0.
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range, or mixed member shapes in one group.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: singh2026lossbasis, Prop. 4.2(2).
    """

    rule_name = "scalar-adam"

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        member_dims: int = 0,
    ) -> None:
        super().__init__(
            params, lr=lr, p=0.0, betas=betas, eps=eps, mean="rms", member_dims=member_dims
        )
