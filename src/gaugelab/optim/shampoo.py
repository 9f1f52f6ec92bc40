"""Full-matrix Shampoo with left and right accumulators (no grafting, no blocking)."""

from __future__ import annotations

import torch

from gaugelab.linalg import psd_power
from gaugelab.optim._base import CONGRUENCE, INVARIANT, check_range
from gaugelab.optim._zoo import ZooOptimizer


class Shampoo(ZooOptimizer):
    """Shampoo: ``L ← L + G Gᵀ``, ``R ← R + Gᵀ G``, ``p ← p − η L̃ G R̃``.

    Every ``update_every`` steps (and at step 1) the roots ``L̃ = (L + λI)^{−1/4}`` and
    ``R̃ = (R + λI)^{−1/4}`` are recomputed by symmetric eigendecomposition with eigenvalues
    clamped at ``clamp``. With ``damping = 0`` one step from zero state equals ``msign(G)``.

    Args:
        params: matrices ``[*members, m, n]``.
        lr: η ≥ 0.
        damping: λ ≥ 0 (default 1.0).
        update_every: root recomputation interval in steps, ≥ 1 (default 20).
        clamp: eigenvalue floor > 0 before the −1/4 power (default 1e-6).
        member_dims: leading ensemble dims (accumulators are per member).

    Raises:
        ValueError: hyperparameter out of range; a parameter that is not a matrix.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: gupta2018shampoo; equivariance: singh2026lossbasis, Prop. 4.2(4).
    """

    rule_name = "shampoo"
    requires_matrices = True
    state_kinds = {
        "left": INVARIANT,
        "left_root": INVARIANT,
        "right": CONGRUENCE,
        "right_root": CONGRUENCE,
        "step": INVARIANT,
    }

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        damping: float = 1.0,
        update_every: int = 20,
        clamp: float = 1e-6,
        *,
        member_dims: int = 0,
    ) -> None:
        owner = self.rule_name
        if isinstance(update_every, bool) or not isinstance(update_every, int) or update_every < 1:
            raise ValueError(f"{owner}: update_every={update_every!r}; allowed: an integer >= 1")
        defaults = dict(
            lr=check_range(owner, "lr", lr, low=0),
            damping=check_range(owner, "damping", damping, low=0),
            update_every=update_every,
            clamp=check_range(owner, "clamp", clamp, low=0, low_open=True),
        )
        super().__init__(params, defaults, member_dims)

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        damping, clamp = group["damping"], group["clamp"]
        for q in params:
            g = q.grad
            state = self.state[q]
            if not state:
                state["step"] = 0
                state["left"] = g.new_zeros(g.shape[:-1] + g.shape[-2:-1])
                state["right"] = g.new_zeros(g.shape[:-2] + g.shape[-1:] + g.shape[-1:])
            state["step"] += 1
            state["left"].add_(g @ g.mT)
            state["right"].add_(g.mT @ g)
            if (state["step"] - 1) % group["update_every"] == 0:
                state["left_root"] = psd_power(state["left"], -0.25, damping=damping, clamp=clamp)
                state["right_root"] = psd_power(state["right"], -0.25, damping=damping, clamp=clamp)
            q.sub_(state["left_root"] @ g @ state["right_root"], alpha=group["lr"])
