"""Several zoo rules stepped together, each on its own parameters — e.g. the Muon hybrid.

The Muon hybrid of the reference transformer runs is stated once here: ``muon`` on every 2-D
hidden matrix (attention and MLP projections), ``adam`` on everything else (embeddings,
positions, the output head, normalization gains).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch

from gaugelab.optim._base import ZooMixin
from gaugelab.optim.registry import make_optimizer


class Hybrid:
    """Named parts, each a ``torch.optim.Optimizer`` over disjoint parameters, stepped as one.

    ``step(closure)`` evaluates the closure once, checks every part's gradients for NaN/inf
    (raising :class:`gaugelab.NonFiniteError` before any part moves), then steps each part.

    Args:
        parts: part name → optimizer (insertion order is the stepping order).

    Raises:
        ValueError: no parts, or a parameter shared by two parts.
    """

    def __init__(self, parts: Mapping[str, torch.optim.Optimizer]) -> None:
        if not parts:
            raise ValueError("Hybrid: parts is empty; allowed: at least one optimizer")
        seen: set[int] = set()
        for name, opt in parts.items():
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) in seen:
                        raise ValueError(f"Hybrid: a parameter appears in part {name!r} twice")
                    seen.add(id(p))
        self.parts = dict(parts)

    @property
    def param_groups(self) -> list[dict]:
        """Every part's param groups, in part order."""
        return [g for opt in self.parts.values() for g in opt.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts.values():
            opt.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.parts.values():
            if isinstance(opt, ZooMixin):
                opt._evaluate(None)  # finiteness of this part's gradients, before anything moves
        for opt in self.parts.values():
            opt.step()
        return loss

    def state_dict(self) -> dict:
        """``{part name: part.state_dict()}``."""
        return {name: opt.state_dict() for name, opt in self.parts.items()}

    def load_state_dict(self, state: Mapping[str, dict]) -> None:
        """Restore every part.

        Raises:
            ValueError: the part names differ.
        """
        if set(state) != set(self.parts):
            raise ValueError(
                f"Hybrid.load_state_dict: parts {sorted(state)}; allowed: {sorted(self.parts)}"
            )
        for name, opt in self.parts.items():
            opt.load_state_dict(state[name])


def is_hidden_matrix(name: str, param: torch.Tensor, member_dims: int = 0) -> bool:
    """True for a 2-D attention or MLP projection weight (``…attn.*_proj.weight``, ``…mlp.…``)."""
    hidden = ".attn." in name or ".mlp." in name or name.startswith(("attn.", "mlp."))
    return hidden and name.endswith("weight") and param.dim() - member_dims == 2


def muon_hybrid(
    named_params: Iterable[tuple[str, torch.Tensor]],
    *,
    lr: float = 0.02,
    adam_lr: float = 1e-3,
    member_dims: int = 0,
    **muon_hyper,
) -> Hybrid:
    """Muon on every 2-D hidden matrix, Adam on the rest.

    Args:
        named_params: ``(name, parameter)`` pairs, e.g. ``model.named_parameters()``; names
            follow ``gaugelab.models.Transformer`` (``blocks.0.attn.q_proj.weight`` …).
        lr: Muon's learning rate (default 0.02).
        adam_lr: Adam's learning rate (default 1e-3).
        member_dims: leading ensemble dims of every parameter.
        **muon_hyper: further Muon hyperparameters.

    Returns:
        A :class:`Hybrid` with parts ``"muon"`` and ``"adam"``.

    Raises:
        ValueError: no hidden matrix or nothing else to give Adam; bad hyperparameters.

    Source: docs/protocols.md §1 (the hybrid used for transformers); jordan2024muon.
    """
    muon, adam = [], []
    for name, p in named_params:
        (muon if is_hidden_matrix(name, p, member_dims) else adam).append(p)
    if not muon or not adam:
        raise ValueError(
            f"muon_hybrid: {len(muon)} hidden matrices and {len(adam)} other parameters; "
            f"allowed: at least one of each"
        )
    return Hybrid(
        {
            "muon": make_optimizer("muon", muon, lr=lr, member_dims=member_dims, **muon_hyper),
            "adam": make_optimizer("adam", adam, lr=adam_lr, member_dims=member_dims),
        }
    )
