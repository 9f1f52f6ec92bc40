"""Logging the §0x08L factor diagnostics of an ensemble's LoRA modules during training.

:class:`FactorLog` says which steps and members are recorded; before such a step it keeps the
factors (:meth:`FactorLog.before`), after it it builds one
:class:`gaugelab.lowrank.dynamics.diagnostics.FactorDiagnostics` per module and member, read at
those kept factors (where the step's gradients were taken, seed 003 §0x07H), and flattens them
into metrics ``diag/<module><suffix>/<field>`` for a run's log (:meth:`FactorLog.metrics`). The
LoRA twin phase logs the base adapter at every checkpoint; the fine-tuning loop
(``_lora_train.train_members``) logs when given one (``FinetuneSpec.diagnostics_every``; off by
default, so stored fine-tuning runs are unchanged).

Source: seed 003 §0x07H (the state a step's diagnostics are read at), §0x08L (the minimum
diagnostic record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from gaugelab.lowrank.dynamics.diagnostics import factor_diagnostics
from gaugelab.models import Ensemble

__all__ = ["FactorLog", "lora_pairs"]

Previous = dict[str, tuple[torch.Tensor, torch.Tensor]]


def lora_pairs(ensemble: Ensemble) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(module, B [E, d_out, r], A [E, r, d_in])`` of every adapted module, in order."""
    stacked = ensemble.stacked_parameters()
    modules = [n.removesuffix(".lora_A") for n in stacked if n.endswith(".lora_A")]
    return [(m, stacked[f"{m}.lora_B"], stacked[f"{m}.lora_A"]) for m in modules]


@dataclass(frozen=True)
class FactorLog:
    """Which factor diagnostics to record.

    Attributes:
        scale: the LoRA scale ``s`` of every module (``α/r`` or ``α/√r``).
        members: member index → metric-name suffix (e.g. ``{0: "/seed=0"}``); default: every
            member, suffix ``/member=<e>``.
        every: record after every ``every``-th update (update ``t`` with ``t % every == 0``);
            ``steps`` (when given) replaces it.
        steps: the updates to record after (1-based), or ``None``.
        tokens_per_step: tokens each update consumes (batch × block), for the record.
        step_offset: updates applied before this loop (the warm-up), added to ``step``.
        eval_protocol: how the logged loss was measured.
    """

    scale: float
    members: Mapping[int, str] | None = None
    every: int = 1
    steps: frozenset[int] | None = None
    tokens_per_step: int = 0
    step_offset: int = 0
    eval_protocol: str = "training minibatch, mean cross-entropy"

    def records(self, step: int) -> bool:
        """Whether update ``step`` (1-based) is recorded."""
        if self.steps is not None:
            return step in self.steps
        return self.every > 0 and step % self.every == 0

    def before(self, ensemble: Ensemble, step: int) -> Previous | None:
        """Copies of the recorded members' factors before update ``step`` (or ``None`` when
        the step is not recorded)."""
        if not self.records(step):
            return None
        members = self._members(ensemble)
        return {f"{m}#{e}": (A[e].detach().clone(), B[e].detach().clone())
                for m, B, A in lora_pairs(ensemble) for e in members}  # fmt: skip

    def _members(self, ensemble: Ensemble) -> Mapping[int, str]:
        if self.members is not None:
            return self.members
        return {e: f"/member={e}" for e in range(ensemble.n_members)}

    def metrics(
        self,
        ensemble: Ensemble,
        optimizer: torch.optim.Optimizer,
        previous: Previous,
        step: int,
        losses: torch.Tensor,
        lr: float,
    ) -> dict[str, float]:
        """The records of update ``step`` as flat metrics ``diag/<module><suffix>/…``.

        Each record is read at the factors the update's gradients were taken at
        (``previous``), with the factors after the update for the product and factor steps
        (seed 003 §0x07H).

        Args:
            ensemble, optimizer: the trained ensemble (after the update) and its optimizer
                (state per member).
            previous: :meth:`before` of this step.
            step: the update just applied (1-based, before ``step_offset``).
            losses: ``[E]`` the members' losses of this step (at ``previous``).
            lr: the learning rate the step used (both factors).
        """
        out: dict[str, float] = {}
        members = self._members(ensemble)
        E = ensemble.n_members
        for module, B, A in lora_pairs(ensemble):
            states = [optimizer.state.get(p, {}) for p in (A, B)]
            for e, suffix in members.items():
                sliced = [{k: v[e] for k, v in s.items()
                           if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == E}
                          for s in states]  # fmt: skip
                A0, B0 = previous[f"{module}#{e}"]  # the state the gradients were taken at
                record = factor_diagnostics(
                    A=A0, B=B0, scale=self.scale, step=self.step_offset + step,
                    tokens=(self.step_offset + step) * self.tokens_per_step,
                    loss=float(losses[e]), lr_A=lr, lr_B=lr,
                    grad_A=None if A.grad is None else A.grad[e],
                    grad_B=None if B.grad is None else B.grad[e],
                    after=(A[e], B[e]), state_A=sliced[0],
                    state_B=sliced[1], eval_protocol=self.eval_protocol,
                )  # fmt: skip
                out.update(record.metrics(prefix=f"diag/{module}{suffix}/"))
        return out
