"""The twin protocol's training: the base and its twins as one ensemble, resumable.

Every member sees the same batches; the loss is the sum of the members' mean cross-entropies,
so members never interact. At every measured step the members are compared
(:func:`gaugelab.equivariance.twins.measure_twins`); given a run context, a checkpoint
(parameters, optimizer state, records, stream position) is written at every measured step before
the last, and an interrupted run resumes from the latest one, bit for bit.

Source: singh2026lossbasis, §6; docs/protocols.md §5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from gaugelab.determinism import deterministic
from gaugelab.equivariance.twins import (
    Invariants,
    TwinData,
    TwinResult,
    measure_twins,
    triplet_verdict,
)
from gaugelab.models import Ensemble, Transformer
from gaugelab.study.checkpoint import Checkpoint
from gaugelab.study.train import Resume, Snapshot, fit, require_finite, restore_tensors

__all__ = ["train_twins"]


def train_twins(
    members: list[Transformer] | list[torch.nn.Module],
    names: list[str],
    make_optimizer: Callable[[Ensemble], torch.optim.Optimizer],
    data: TwinData,
    *,
    steps: int,
    checkpoints: Sequence[int],
    compile: bool = False,
    sink: Callable[[int, dict[str, float]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    run: Any = None,
    invariants: Invariants | None = None,
) -> TwinResult:
    """Train the members as one ensemble and measure them at every checkpoint step.

    Runs under :func:`gaugelab.determinism.deterministic` (the identity twin must stay
    bit-identical).

    Args:
        members, names: from :func:`gaugelab.equivariance.twins.make_twins`.
        make_optimizer: builds the optimizer on the ensemble (``member_dims = 1``).
        data: the task (:class:`~gaugelab.equivariance.twins.TwinData`).
        steps: training steps ≥ 1.
        checkpoints: steps at which to measure (those in ``[0, steps]`` are used).
        compile: train through ``torch.compile`` (:class:`gaugelab.models.Ensemble`).
        sink: called as ``sink(step, metrics)`` at every measured step (e.g. a run's logger).
        progress: called with the number of steps done after every step.
        run: a :class:`gaugelab.study.context.RunContext` or ``None`` (see the module
            docstring).
        invariants: the members' head invariants from stacked parameters (a Hugging Face
            model's); ``None``: those of the members' ``config``
            (:func:`~gaugelab.equivariance.twins.measure_twins`).

    Returns:
        The :class:`~gaugelab.equivariance.twins.TwinResult` (its verdict from
        :func:`~gaugelab.equivariance.verdicts.triplet_verdict`).

    Raises:
        NonFiniteError: a loss or gradient became NaN/inf.
        StoreError: the checkpoint to resume from is corrupt or does not fit this run.

    Source: singh2026lossbasis, §6; docs/protocols.md §5.
    """
    with deterministic():
        ensemble = Ensemble(members, compile=compile)
        optimizer = make_optimizer(ensemble)
        measured = sorted({s for s in checkpoints if 0 <= s <= steps})
        records: dict[int, dict[str, float]] = {}
        E = ensemble.n_members
        config = None if invariants is not None else members[0].config
        params = ensemble.stacked_parameters()

        def record(step: int, extra: dict[str, float] | None = None) -> None:
            metrics = measure_twins(ensemble, names, data, config, invariants=invariants)
            metrics.update(extra or {})
            records[step] = metrics
            if sink is not None:
                sink(step, metrics)

        def snapshot(t: int) -> Snapshot:
            extra = {"records": {str(s): m for s, m in records.items()}}
            return Snapshot(params, optimizer.state_dict(), data_position=t, extra=extra)

        def restore(saved: Checkpoint) -> None:
            restored = {int(s): dict(m) for s, m in saved.extra["records"].items()}
            restore_tensors(params, saved.model_state)
            optimizer.load_state_dict(saved.optimizer_state)
            data.skip(saved.data_position)
            records.update(restored)

        def update(t: int) -> None:
            if t == 0 and 0 in measured:  # a fresh start: measure the untrained members
                record(0)
            x, y = data.batch()
            optimizer.zero_grad()
            logits = data.logits(ensemble(x))  # [E, N, V]
            losses = (
                F.cross_entropy(logits.flatten(0, 1), data.labels(y).repeat(E), reduction="none")
                .view(E, -1)
                .mean(dim=1)
            )  # [E]: members never interact
            require_finite(losses, f"twins: training loss at step {t + 1}")
            losses.sum().backward()
            optimizer.step()
            if t + 1 in measured:
                batch = zip(names, losses.detach().tolist(), strict=True)
                record(t + 1, {f"{n}/batch_loss": v for n, v in batch})

        resume = Resume(snapshot, restore, lambda t: t in measured)
        fit(update, steps=steps, label="twins", run=run, resume=resume,
            progress=progress or (lambda done: None))  # fmt: skip
        verdict, why = triplet_verdict(records)
        trained = [ensemble.member(e) for e in range(E)]
        return TwinResult(records, verdict, why, trained)
