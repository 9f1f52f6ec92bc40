"""Adafactor as the protocol defines it: factored second moment and nothing else.

No momentum, no bias correction, no update clipping, no relative step size (unlike
``torch.optim.Adafactor``).
"""

from __future__ import annotations

import torch

from gaugelab.optim._base import COLUMN_STATS, ENTRYWISE, INVARIANT, check_range
from gaugelab.optim._zoo import ZooOptimizer

_TINY = 1e-30  # the floor on mean(R) in v̂ = R Cᵀ / mean(R)


class Adafactor(ZooOptimizer):
    """Factored second moment over the last two dims of each parameter.

    For ``G`` of shape ``[..., r, c]``: ``R ← β2 R + (1−β2) mean_c G²`` (``[..., r]``),
    ``C ← β2 C + (1−β2) mean_r G²`` (``[..., c]``), ``v̂ = R Cᵀ / (mean(R) + 1e-30)``,
    ``p ← p − η G/(√v̂ + ε)``. A parameter with fewer than two non-member dims keeps an
    unfactored ``v ← β2 v + (1−β2) G²``. Every statistic is per matrix, hence per member; the
    update satisfies ``update(Gᵀ) = update(G)ᵀ``.

    Args:
        params: parameters or param groups.
        lr: η ≥ 0.
        beta2: β2 ∈ [0, 1) (default 0.999).
        eps: ε ≥ 0.
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: shazeer2018adafactor; breaks the orthogonal gauge: singh2026lossbasis, App. B.4.
    """

    rule_name = "adafactor"
    state_kinds = {
        "exp_avg_sq_row": INVARIANT,  # row means of G² do not see a right rotation
        "exp_avg_sq_col": COLUMN_STATS,
        "exp_avg_sq": ENTRYWISE,
        "step": INVARIANT,
    }

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        beta2: float = 0.999,
        eps: float = 1e-8,
        *,
        member_dims: int = 0,
    ) -> None:
        defaults = dict(
            lr=check_range(self.rule_name, "lr", lr, low=0),
            beta2=check_range(self.rule_name, "beta2", beta2, low=0, high=1, high_open=True),
            eps=check_range(self.rule_name, "eps", eps, low=0),
        )
        super().__init__(params, defaults, member_dims)

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        beta2, eps, md = group["beta2"], group["eps"], group["member_dims"]
        for q in params:
            g = q.grad
            state = self.state[q]
            factored = q.dim() - md >= 2
            if not state:
                state["step"] = 0
                if factored:
                    state["exp_avg_sq_row"] = g.new_zeros(g.shape[:-1])
                    state["exp_avg_sq_col"] = g.new_zeros(g.shape[:-2] + g.shape[-1:])
                else:
                    state["exp_avg_sq"] = torch.zeros_like(g)
            state["step"] += 1
            g2 = g * g
            if factored:
                row = state["exp_avg_sq_row"].lerp_(g2.mean(dim=-1), 1 - beta2)
                col = state["exp_avg_sq_col"].lerp_(g2.mean(dim=-2), 1 - beta2)
                scale = row.mean(dim=-1, keepdim=True).unsqueeze(-1) + _TINY
                v_hat = row.unsqueeze(-1) * col.unsqueeze(-2) / scale
            else:
                v_hat = state["exp_avg_sq"].lerp_(g2, 1 - beta2)
            q.addcdiv_(g, v_hat.sqrt().add_(eps), value=-group["lr"])
