"""What every rule of the zoo shares: ensemble member dims, finiteness checks, validation.

Each rule declares the *geometry* of its state (how each state entry transforms when the
parameter is gauge-transformed); :func:`gaugelab.gauge.transform_state` reads that declaration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from gaugelab.errors import NonFiniteError
from gaugelab.optim._compiler_guard import torch_method

# How a state entry transforms when its parameter ``p`` becomes ``p @ M``:
COVARIANT = (
    "covariant"  # built linearly from gradients: ``b -> b @ M⁻ᵀ`` (``b @ Q`` for orthogonal)
)
INVARIANT = "invariant"  # step counters, shared scalars, left accumulators: unchanged
ENTRYWISE = "entrywise"  # per-entry statistics: only a signed permutation acts (``v -> v @ |P|``)
COLUMN_STATS = "column-stats"  # ``[..., k]`` per-column statistics: only signed permutations act
CONGRUENCE = "congruence"  # right accumulators ``[..., k, k]``: ``R -> M⁻¹ R M⁻ᵀ`` (``QᵀRQ``)

STATE_KINDS = (COVARIANT, INVARIANT, ENTRYWISE, COLUMN_STATS, CONGRUENCE)


def check_range(
    owner: str,
    name: str,
    value: float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Validate one scalar hyperparameter and return it as a float.

    Raises:
        ValueError: ``value`` is not a finite real number in the stated interval; the message
            names ``owner``, ``name``, the value and the allowed interval.
    """
    lo = "(" if low_open or low is None else "["
    hi = ")" if high_open or high is None else "]"
    allowed = f"{lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {name}={value!r} is not a number; allowed: {allowed}") from None
    bad = not math.isfinite(x)
    if low is not None:
        bad |= x <= low if low_open else x < low
    if high is not None:
        bad |= x >= high if high_open else x > high
    if bad:
        raise ValueError(f"{owner}: {name}={value!r} is out of range; allowed: {allowed}")
    return x


def check_choice(owner: str, name: str, value: object, allowed: Iterable[object]) -> object:
    """Validate a categorical hyperparameter.

    Raises:
        ValueError: ``value`` not in ``allowed``; the message lists the allowed values.
    """
    allowed = tuple(allowed)
    if value not in allowed:
        shown = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{owner}: {name}={value!r} is not allowed; allowed: {shown}")
    return value


def check_betas(owner: str, betas: object) -> tuple[float, float]:
    """Validate a pair of EMA coefficients (β1, β2), each in [0, 1)."""
    try:
        b1, b2 = betas  # type: ignore[misc]
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: betas={betas!r}; allowed: a pair (β1, β2) in [0, 1)") from None
    return (
        check_range(owner, "betas[0]", b1, low=0, high=1, high_open=True),
        check_range(owner, "betas[1]", b2, low=0, high=1, high_open=True),
    )


def check_member_dims(owner: str, value: object) -> int:
    """Validate ``member_dims`` (number of leading ensemble dims, a non-negative int)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{owner}: member_dims={value!r}; allowed: an integer >= 0")
    return value


class ZooMixin:
    """Behaviour shared by every rule of the zoo.

    * ``member_dims`` per param group: the number of leading *ensemble* dims of every
      parameter in the group. Reductions (pooled scalars, msign, accumulators) never mix
      members.
    * ``step(closure)`` evaluates the closure, then raises :class:`NonFiniteError` if the loss
      or any gradient is NaN/inf — before any parameter or state is touched.
    * ``state_geometry(group)`` declares how each state entry moves under a gauge element.
    """

    rule_name: str = "zoo"
    state_kinds: dict[str, str] = {}
    requires_matrices: bool = False  # every parameter must be [*members, m, n]

    def state_geometry(self, group: dict) -> dict[str, str]:
        """Map each state key of ``group``'s parameters to its transformation kind."""
        return dict(self.state_kinds)

    def _init_members(self, member_dims: int) -> None:
        member_dims = check_member_dims(self.rule_name, member_dims)
        self.defaults["member_dims"] = member_dims
        for group in self.param_groups:
            group.setdefault("member_dims", member_dims)
            self._check_group(group)

    def add_param_group(self, param_group: dict) -> None:  # type: ignore[override]
        torch_method(super().add_param_group)(param_group)  # type: ignore[misc]
        group = self.param_groups[-1]
        if "member_dims" in self.defaults:
            group.setdefault("member_dims", self.defaults["member_dims"])
            self._check_group(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``torch.optim.Optimizer.zero_grad`` (see :mod:`gaugelab.optim._compiler_guard`)."""
        torch_method(super().zero_grad)(set_to_none)  # type: ignore[misc]

    def state_dict(self) -> dict:
        """``torch.optim.Optimizer.state_dict`` (see :mod:`gaugelab.optim._compiler_guard`)."""
        return torch_method(super().state_dict)()  # type: ignore[misc]

    def load_state_dict(self, state_dict: dict) -> None:
        """``torch.optim.Optimizer.load_state_dict`` (see
        :mod:`gaugelab.optim._compiler_guard`)."""
        torch_method(super().load_state_dict)(state_dict)  # type: ignore[misc]

    def _check_group(self, group: dict) -> None:
        """Validate a group's parameters against the rule (shapes, member dims)."""
        md = check_member_dims(self.rule_name, group["member_dims"])
        for i, p in enumerate(group["params"]):
            if p.dim() < md:
                raise ValueError(
                    f"{self.rule_name}: parameter {i} has shape {tuple(p.shape)}, fewer dims "
                    f"than member_dims={md}"
                )
            if not p.is_floating_point():
                raise ValueError(
                    f"{self.rule_name}: parameter {i} has dtype {p.dtype}; allowed: floating"
                )
            if self.requires_matrices and p.dim() - md != 2:
                raise ValueError(
                    f"{self.rule_name}: parameter {i} has shape {tuple(p.shape)} with "
                    f"member_dims={md}; allowed: matrices [*members, m, n] — route vectors "
                    f"(gains, biases) to another rule such as adam"
                )

    def _evaluate(self, closure: Callable[[], torch.Tensor] | None) -> torch.Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss).all()):
                raise NonFiniteError(f"{self.rule_name}.step: the closure returned loss {loss}")
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                    raise NonFiniteError(
                        f"{self.rule_name}.step: non-finite gradient in param group {gi}, "
                        f"parameter {pi} (shape {tuple(p.shape)}); no parameter was updated"
                    )
        return loss


def member_sum(x: torch.Tensor, member_dims: int) -> torch.Tensor:
    """Sum ``[*members, *rest]`` over ``rest``; returns ``[*members]``."""
    dims = tuple(range(member_dims, x.dim()))
    return x.sum(dim=dims) if dims else x.clone()


def broadcast_members(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape a ``[*members]`` tensor to broadcast against ``like`` ``[*members, *rest]``."""
    return x.reshape(x.shape + (1,) * (like.dim() - x.dim()))
