"""Adam, AdamW and RMSprop, exactly as ``torch.optim`` implements them.

The torch conventions are the protocol's: Adam's ε is added after the square root of the
bias-corrected second moment (so a zero-state first step is ``η G/(|G| + ε)``), RMSprop's ε is
outside the root and it has no bias correction.
"""

from __future__ import annotations

import torch

from gaugelab.optim._base import COVARIANT, ENTRYWISE, INVARIANT, check_betas, check_range
from gaugelab.optim._zoo import TorchRule


class Adam(TorchRule, torch.optim.Adam):
    """Adam (``torch.optim.Adam``, no weight decay, no amsgrad).

    ``m, v`` EMAs; ``p ← p − η m̂/(√v̂ + ε)`` with bias-corrected ``m̂, v̂``.

    Args:
        params: parameters or param groups.
        lr: η ≥ 0.
        betas: (β1, β2) in [0, 1).
        eps: ε ≥ 0, added outside the root after bias correction.
        member_dims: leading ensemble dims (entrywise rule: no reductions).

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: kingma2015adam; breaks the orthogonal gauge: singh2026lossbasis, Props. 4.3–4.4.
    """

    rule_name = "adam"
    state_kinds = {"exp_avg": COVARIANT, "exp_avg_sq": ENTRYWISE, "step": INVARIANT}

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        member_dims: int = 0,
    ) -> None:
        lr = check_range(self.rule_name, "lr", lr, low=0)
        betas = check_betas(self.rule_name, betas)
        eps = check_range(self.rule_name, "eps", eps, low=0)
        super().__init__(params, lr=lr, betas=betas, eps=eps)
        self._init_members(member_dims)


class AdamW(TorchRule, torch.optim.AdamW):
    """AdamW (``torch.optim.AdamW``): Adam plus decoupled decay ``p ← p (1 − ηλ)``.

    Args:
        params, lr, betas, eps, member_dims: as :class:`Adam`.
        weight_decay: λ ≥ 0 (default 0.01, torch's).

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: loshchilov2019adamw; breaks the orthogonal gauge as Adam does.
    """

    rule_name = "adamw"
    state_kinds = {"exp_avg": COVARIANT, "exp_avg_sq": ENTRYWISE, "step": INVARIANT}

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        member_dims: int = 0,
    ) -> None:
        lr = check_range(self.rule_name, "lr", lr, low=0)
        betas = check_betas(self.rule_name, betas)
        eps = check_range(self.rule_name, "eps", eps, low=0)
        weight_decay = check_range(self.rule_name, "weight_decay", weight_decay, low=0)
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._init_members(member_dims)


class RMSprop(TorchRule, torch.optim.RMSprop):
    """RMSprop (``torch.optim.RMSprop``): ``v ← α v + (1−α) G²``, ``p ← p − η G/(√v + ε)``.

    No momentum, not centred, no bias correction; the first step from zero state is
    ``η G/(√(1−α)|G| + ε)`` ≈ ``10 η sign(G)`` for α = 0.99 and ``|G| ≫ ε``.

    Args:
        params: parameters or param groups.
        lr: η ≥ 0.
        alpha: α ∈ [0, 1) (default 0.99).
        eps: ε ≥ 0.
        member_dims: leading ensemble dims.

    Raises:
        ValueError: hyperparameter out of range.
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient.

    Source: tieleman2012rmsprop; breaks the orthogonal gauge: singh2026lossbasis, Prop. 4.3.
    """

    rule_name = "rmsprop"
    state_kinds = {"square_avg": ENTRYWISE, "step": INVARIANT}

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        alpha: float = 0.99,
        eps: float = 1e-8,
        *,
        member_dims: int = 0,
    ) -> None:
        lr = check_range(self.rule_name, "lr", lr, low=0)
        alpha = check_range(self.rule_name, "alpha", alpha, low=0, high=1, high_open=True)
        eps = check_range(self.rule_name, "eps", eps, low=0)
        super().__init__(params, lr=lr, alpha=alpha, eps=eps)
        self._init_members(member_dims)
