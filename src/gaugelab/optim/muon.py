"""Muon: heavy-ball momentum followed by the orthogonal polar factor (msign) of the buffer."""

from __future__ import annotations

import torch

from gaugelab.linalg import msign
from gaugelab.optim._base import COVARIANT, INVARIANT, check_choice, check_range
from gaugelab.optim._zoo import ZooOptimizer

MSIGN_METHODS = ("newton_schulz", "svd")
SHAPE_SCALINGS = ("none", "original")


class Muon(ZooOptimizer):
    """Muon: ``b ← μ b + G`` (sum form), ``p ← p − η msign(b)``.

    msign is computed in the parameter's dtype (no bfloat16 cast), per matrix and hence per
    ensemble member: by Newton–Schulz (``X₀ = b/(‖b‖_F + 1e-7)``, 5 quintic steps with
    (a, b, c) = (3.4445, −4.7750, 2.0315); not the exact polar factor, but exactly equivariant) or
    exactly by SVD.

    Args:
        params: matrices ``[*members, m, n]``; route vectors (gains, biases, embeddings if
            wanted) to another rule.
        lr: η ≥ 0.
        momentum: μ ∈ [0, 1) (default 0.9).
        nesterov: use ``G + μ b`` instead of ``b`` (changes the direction).
        msign: ``"newton_schulz"`` or ``"svd"``.
        ns_steps: Newton–Schulz iterations ≥ 1.
        ns_coefficients: (a, b, c).
        ns_eps: the Frobenius-normalisation floor.
        shape_scaling: ``"none"`` or ``"original"`` (multiply by ``max(1, m/n)^{1/2}``).
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range; a parameter whose non-member part is not a
            matrix.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: jordan2024muon; equivariance: singh2026lossbasis, Prop. 4.2(3).
    """

    rule_name = "muon"
    state_kinds = {"momentum_buffer": COVARIANT, "step": INVARIANT}
    requires_matrices = True

    def __init__(
        self,
        params,
        lr: float = 2e-2,
        momentum: float = 0.9,
        nesterov: bool = False,
        msign: str = "newton_schulz",
        ns_steps: int = 5,
        ns_coefficients: tuple[float, float, float] = (3.4445, -4.7750, 2.0315),
        ns_eps: float = 1e-7,
        shape_scaling: str = "none",
        *,
        member_dims: int = 0,
    ) -> None:
        owner = self.rule_name
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1:
            raise ValueError(f"{owner}: ns_steps={ns_steps!r}; allowed: an integer >= 1")
        if len(tuple(ns_coefficients)) != 3:
            raise ValueError(f"{owner}: ns_coefficients={ns_coefficients!r}; allowed: (a, b, c)")
        defaults = dict(
            lr=check_range(owner, "lr", lr, low=0),
            momentum=check_range(owner, "momentum", momentum, low=0, high=1, high_open=True),
            nesterov=bool(check_choice(owner, "nesterov", nesterov, (False, True))),
            msign=check_choice(owner, "msign", msign, MSIGN_METHODS),
            ns_steps=ns_steps,
            ns_coefficients=tuple(float(c) for c in ns_coefficients),
            ns_eps=check_range(owner, "ns_eps", ns_eps, low=0),
            shape_scaling=check_choice(owner, "shape_scaling", shape_scaling, SHAPE_SCALINGS),
        )
        super().__init__(params, defaults, member_dims)

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        mu = group["momentum"]
        for q in params:
            state = self._state(q, momentum_buffer=True)
            state["step"] += 1
            g = q.grad
            b = state["momentum_buffer"].mul_(mu).add_(g)
            direction = g.add(b, alpha=mu) if group["nesterov"] else b
            update = msign(
                direction,
                method=group["msign"],
                steps=group["ns_steps"],
                coefficients=group["ns_coefficients"],
                eps=group["ns_eps"],
            )
            scale = 1.0
            if group["shape_scaling"] == "original":
                scale = max(1.0, q.shape[-2] / q.shape[-1]) ** 0.5
            q.add_(update, alpha=-group["lr"] * scale)
