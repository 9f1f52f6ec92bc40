"""The one training loop: steps, checkpoint cadence and resume, the NaN guard, progress.

Every experiment's training (twins, sensing rules, LoRA pretrain and fine-tuning, LoRA twins,
kernel paths, intrinsic trials; the learn–forget cells through the fine-tuning loop) runs its
updates through :func:`fit`. The caller owns what one update is (a closure over its model,
optimizer and data); :func:`fit` owns the order of things around it:

1. with a run context and a :class:`Resume`, the run's latest checkpoint is loaded (a corrupt
   one, or one that does not fit this run, raises one :class:`StoreError` naming the file and
   the run);
2. for ``t`` = the resumed step … ``steps − 1`` (``t`` updates applied so far): when
   ``Resume.due(t)`` and ``t`` is past the resume point, the state after ``t`` updates is
   checkpointed; then update ``t + 1`` runs; then progress is reported;
3. an update that returns ``False`` ends training early (e.g. every sensing member stopped).

A resumed run writes the same tensors in the same order as the uninterrupted one, so it
reproduces it bit for bit (:mod:`gaugelab.study.checkpoint`). Ctrl-C is not caught here: it
reaches the executor, which records the attempt as cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from gaugelab.errors import NonFiniteError
from gaugelab.study.checkpoint import Checkpoint
from gaugelab.study.store.db import StoreError

__all__ = ["Resume", "Snapshot", "fit", "require_finite", "restore_tensors"]

FIT_ERRORS = (KeyError, TypeError, ValueError, RuntimeError, AttributeError)
"""What a :attr:`Resume.restore` may raise for a checkpoint that does not fit the run."""


@dataclass(frozen=True)
class Snapshot:
    """The state after some updates, as :meth:`RunContext.checkpoint` stores it.

    Attributes:
        model_state: name → tensor (the trained parameters and any other tensors).
        optimizer_state: ``optimizer.state_dict()``.
        rng_states: name → ``uint8`` state of each generator the loop draws from.
        data_position: how far the data stream was consumed (the caller's unit).
        extra: JSON-able values (curves, records, statuses).
    """

    model_state: dict[str, Any]
    optimizer_state: dict[str, Any]
    rng_states: dict[str, torch.Tensor] = field(default_factory=dict)
    data_position: int = 0
    extra: dict[str, Any] | None = None


@dataclass(frozen=True)
class Resume:
    """How a loop checkpoints and resumes.

    Attributes:
        snapshot: ``snapshot(t)`` → the :class:`Snapshot` after ``t`` updates.
        restore: loads a :class:`~gaugelab.study.checkpoint.Checkpoint` into the loop's
            objects; raises one of ``KeyError, TypeError, ValueError, RuntimeError,
            AttributeError`` (its message says what differs) when it does not fit the run.
        due: ``due(t)`` → checkpoint the state after ``t`` updates (``0 < t < steps``).
        scope: the checkpoint sub-folder (one per thing a run trains in turn; ``""``: none).
    """

    snapshot: Callable[[int], Snapshot]
    restore: Callable[[Checkpoint], None]
    due: Callable[[int], bool]
    scope: str = ""


def fit(
    update: Callable[[int], bool | None],
    *,
    steps: int,
    label: str,
    run: Any = None,
    resume: Resume | None = None,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 1,
) -> int:
    """Run updates ``first + 1 … steps`` (see the module docstring for the order).

    Args:
        update: ``update(t)`` applies update ``t + 1`` (``t`` applied so far); returning
            ``False`` ends training after it (``None`` or ``True`` go on).
        steps: the number of updates of an uninterrupted run, ≥ 0.
        label: names the loop in progress reports and errors (e.g. ``"lora r=8"``).
        run: a :class:`gaugelab.study.context.RunContext` or ``None`` (no checkpoints, no
            resume; progress only through ``progress``).
        resume: checkpoint cadence and state (only with ``run``).
        progress: called with the updates applied; default with a run:
            ``run.progress(label, done, steps)``.
        progress_every: report when ``done`` is a multiple of it, and at ``steps``.

    Returns:
        The step training resumed from (0 for a fresh start).

    Raises:
        StoreError: the latest checkpoint is corrupt, or does not fit this run (the file, the
            run and what differs are named; deleting the file restarts from step 0).
        NonFiniteError: from ``update`` (see :func:`require_finite`).
    """
    first = _resume(run, resume, steps, label) if run is not None and resume else 0
    if progress is None and run is not None:
        progress = lambda done: run.progress(label, done, steps)  # noqa: E731
    for t in range(first, steps):
        if run is not None and resume is not None and t > first and resume.due(t):
            snap = resume.snapshot(t)
            run.checkpoint(t, scope=resume.scope, model_state=snap.model_state,
                           optimizer_state=snap.optimizer_state, rng_states=snap.rng_states,
                           data_position=snap.data_position, extra=snap.extra)  # fmt: skip
        go_on = update(t)
        if progress is not None and ((t + 1) % progress_every == 0 or t + 1 == steps):
            progress(t + 1)
        if go_on is False:
            break
    return first


def _resume(run: Any, resume: Resume, steps: int, label: str) -> int:
    where = f"run {str(getattr(run, 'identity', ''))[:12]} ({label})"
    try:
        saved = run.resume(scope=resume.scope)
    except (StoreError, OSError) as exc:
        raise StoreError(f"{where}: cannot resume: {exc}") from None
    if saved is None:
        return 0
    try:
        if not 0 < saved.step < steps:
            raise ValueError(f"step {saved.step} outside 1..{steps - 1}")
        resume.restore(saved)
    except FIT_ERRORS as exc:
        raise StoreError(
            f"{saved.path}: checkpoint of {where} does not fit this run ({exc}); delete it to "
            "restart from step 0"
        ) from None
    return saved.step


def restore_tensors(
    targets: dict[str, torch.Tensor], saved: dict[str, torch.Tensor], what: str = "parameters"
) -> None:
    """Copy ``saved`` into ``targets`` in place, after checking both name the same tensors
    with the same shapes and dtypes.

    Raises:
        ValueError: a name missing on either side, or a shape or dtype differs (named).
    """
    if set(saved) != set(targets):
        odd = sorted(set(saved) ^ set(targets))[:4]
        raise ValueError(f"its {what} differ from this run's ({', '.join(odd)})")
    for name, p in targets.items():
        got = saved[name]
        if got.shape != p.shape or got.dtype != p.dtype:
            raise ValueError(f"{name} is {got.dtype} {tuple(got.shape)}, not "
                             f"{p.dtype} {tuple(p.shape)}")  # fmt: skip
    with torch.no_grad():
        for name, p in targets.items():
            p.copy_(saved[name])


def require_finite(values: torch.Tensor | Iterable[torch.Tensor], what: str) -> None:
    """Raise :class:`NonFiniteError` (message ``what`` and the values) unless every entry of
    ``values`` (a tensor, or tensors such as gradients; ``None`` entries skipped) is finite.

    Example: ``require_finite(losses, f"{label}: training loss at step {t + 1}")``.
    """
    tensors = [values] if isinstance(values, torch.Tensor) else [v for v in values if v is not None]
    for v in tensors:
        if not bool(torch.isfinite(v).all()):
            shown = v.tolist() if v.numel() <= 8 else "some entries"
            raise NonFiniteError(f"{what} is not finite: {shown}")
