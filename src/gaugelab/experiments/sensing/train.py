"""The sensing training loop: one rule's (seed × rate) ensemble to its stopping rule, resumable.

Steps run in the reference's order (its ``optimizer_zoo_bias.py``): at step ``s`` the loss after
``s − 1`` updates is read, update ``s`` is applied, and at ``s ≡ 0 (mod check_every)`` a member
whose loss read at that step was below the threshold stops, with ``s`` updates. A member that
interpolates stops and keeps the step at which it stopped; a member that diverges is rolled
back to its last parameters with a finite, bounded loss and stops (divergence of one member is
an outcome, not an error of the ensemble). A member that stops leaves the batch (the ensemble is
compacted, see :meth:`SensingBatch.member_loss_and_grad` for why no remaining member's number
changes); ``compact=False`` keeps it in the batch, masked, for the test that says so. Given a
run context, the loop writes a checkpoint every ``checkpoint_every`` steps and, when the run was
interrupted, continues from the latest one bit for bit. What it returns, and how that is
recorded in the store and read back, is :mod:`gaugelab.experiments.sensing.records`.

Source: docs/protocols.md §3 (stopping and divergence rules, cosine decay).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from gaugelab.errors import NonFiniteError
from gaugelab.experiments.sensing.problem import SensingBatch, SensingExperiment
from gaugelab.experiments.sensing.records import (
    BUDGET,
    DIVERGED,
    INTERPOLATED,
    STATUSES,
    RuleResult,
)
from gaugelab.optim import MemberLearningRates, cosine_factor, make_optimizer
from gaugelab.study.checkpoint import Checkpoint
from gaugelab.study.train import Resume, Snapshot, fit
from gaugelab.tasks import balancedness, effective_rank

CHECKS_PER_CHECKPOINT = 10
"""A run context gets a checkpoint every this many interpolation checks (2,000 steps at the
protocol's ``check_every = 200``)."""


def train_rule(
    spec: SensingExperiment,
    batch: SensingBatch,
    rule: str,
    lrs: Sequence[float],
    *,
    decay: bool,
    hyper: dict[str, Any] | None = None,
    label: str | None = None,
    run: Any = None,
    checkpoint_every: int | None = None,
    compact: bool = True,
) -> RuleResult:
    """Train one rule on every (seed × learning rate) as one ensemble.

    Step ``s = 1..steps`` is the reference's loop: the loss of each active member at its
    parameters after ``s − 1`` updates (the *pre-update* loss of step ``s``) is evaluated; a
    non-finite loss or one above ``divergence_loss`` marks the member diverged: it is rolled
    back to its parameters after ``s − 2`` updates and frozen (**ours**; the reference drops the
    run). Then every member takes update ``s`` (frozen ones stay bit-identical) at ``η_e`` times
    ``½(1 + cos(π s/T))`` when ``decay``; and at every ``s ≡ 0 (mod check_every)`` a member
    whose pre-update loss of step ``s`` was below ``interpolation_loss`` has interpolated: it
    stops there, with ``s`` updates applied. A member still active after the budget is checked
    for divergence once more (its last update).

    Args:
        spec: the protocol (sizes, budget, thresholds, dtype).
        batch: :meth:`SensingBatch.build` of ``spec``.
        rule: zoo registry name.
        lrs: ``[L]`` learning rates, each > 0.
        decay: cosine schedule ``η_s = η·½(1 + cos(π s/T))`` at step ``s`` (else constant).
        hyper: the rule's other hyperparameters (e.g. ``{"p": 0.5}`` for ``adam-p``).
        label: the name recorded (default ``rule``); it also names the checkpoint scope.
        run: a :class:`gaugelab.study.runner.RunContext` (or ``None``): checkpoints go to its
            checkpoint folder, and an interrupted run resumes from the latest one.
        checkpoint_every: steps between checkpoints (default ``CHECKS_PER_CHECKPOINT ·
            check_every``); only with ``run``.
        compact: a member that stops leaves the batch (default); ``False`` masks it instead
            (the same numbers, bit for bit, at the cost of computing every member every step).

    Returns:
        The :class:`RuleResult` (``seconds`` counts this attempt's wall time only). Its curves
        hold the loss and recovery error at the initial factors (step 0) and at every check
        step ``s`` (the pre-update values of step ``s``: the ones the check reads).

    Raises:
        NonFiniteError: the loss at the initial factors is not finite for some seed (e.g.
            ``init_scale = 1e200``): the initialisation itself failed, no rate can train.
        StoreError: the checkpoint to resume from is corrupt or does not fit this run (the
            message names the file and the run).
        ValueError: an unknown rule or bad hyperparameter (from ``make_optimizer``), an
            empty / non-positive rate grid, or ``checkpoint_every < 1``.

    Source: docs/protocols.md §3 (stopping and divergence rules, cosine decay); the reference's
    ``optimizer_zoo_bias.py`` loop (pre-update loss, update, then the check).
    """
    if not lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise ValueError(f"train_rule: lrs={list(lrs)}; allowed: a non-empty list of rates > 0")
    every = checkpoint_every or CHECKS_PER_CHECKPOINT * spec.check_every
    if every < 1:
        raise ValueError(f"train_rule: checkpoint_every={checkpoint_every}; allowed: >= 1")
    hyper = dict(hyper or {})
    label = label or rule
    start = time.perf_counter()
    S, L = len(batch.seeds), len(lrs)
    E = S * L
    U = batch.U0.repeat_interleave(L, dim=0)  # [E, n, k], member e = seed·L + rate
    V = batch.V0.repeat_interleave(L, dim=0)
    rows = torch.arange(E)  # the members still in the batch (flat indices, increasing)
    inner = make_optimizer(rule, [U, V], lr=1.0, member_dims=1, **hyper)
    opt = MemberLearningRates(inner, torch.tensor(list(lrs), dtype=torch.float64).repeat(S))
    status = [[BUDGET] * L for _ in range(S)]
    stopped = torch.full((S, L), spec.steps, dtype=torch.int64)
    out_U, out_V = U.clone(), V.clone()  # a member's parameters when it left the batch
    out_loss = torch.zeros(E, dtype=U.dtype)  # and its loss there (what later curves show)
    curves: dict[str, list] = {"steps": [], "loss": [], "recovery": []}
    def mark(members: torch.Tensor, what: str, step: int) -> None:
        for e in members.tolist():
            status[e // L][e % L] = what
        stopped.view(-1)[members] = step

    def leave(mask: torch.Tensor) -> None:
        """Members ``mask`` (of the batch) stop: record where they are, then drop or freeze."""
        nonlocal rows
        if not bool(mask.any()):
            return
        gone = rows[mask]
        with torch.no_grad():
            out_U[gone], out_V[gone] = U[mask], V[mask]
            out_loss[gone] = batch.member_loss_and_grad(U[mask], V[mask], gone, L, grad=False)[0]
        if compact:
            opt.compact((~mask).nonzero().squeeze(1))
            rows = rows[~mask]
        else:
            opt.deactivate(mask)

    def everyone() -> tuple[torch.Tensor, torch.Tensor]:
        """``[S, L, n, k]`` factors of every member: present ones where they are now."""
        all_U, all_V = out_U.clone(), out_V.clone()
        all_U[rows], all_V[rows] = U.detach(), V.detach()
        return all_U.view(S, L, *U.shape[1:]), all_V.view(S, L, *V.shape[1:])

    def record(step: int, loss: torch.Tensor) -> None:
        every_loss = out_loss.clone()
        every_loss[rows] = loss.detach() if compact else loss.detach().where(opt.active, out_loss)
        all_U, all_V = everyone()
        curves["steps"].append(step)
        curves["loss"].append(every_loss.view(S, L).double().tolist())
        curves["recovery"].append(batch.recovery_error(all_U @ all_V.mT).double().tolist())

    def snapshot(t: int) -> Snapshot:
        all_U, all_V = everyone()
        state = {"U": all_U, "V": all_V, "stopped": stopped, "rows": rows, "out_loss": out_loss}
        return Snapshot(state, opt.state_dict(), extra={"status": status, "curves": curves})

    def restore(saved: Checkpoint) -> None:
        nonlocal stopped, status, curves, rows, out_U, out_V, out_loss
        stopped, status, curves, rows, out_U, out_V, out_loss = _restore(
            saved, spec, (S, L), U, V, opt
        )

    last = 0  # the updates applied when training ended

    def update(t: int) -> bool:  # t updates applied: this is step s = t + 1
        nonlocal last
        last, s = t, t + 1
        loss, U.grad, V.grad = batch.member_loss_and_grad(U, V, rows, L)  # pre-update loss of s
        if t == 0:
            _require_finite_start(loss.view(S, L), spec, batch, label)
            record(0, loss)
        bad = opt.active & (~torch.isfinite(loss) | (loss > spec.divergence_loss))
        if bool(bad.any()):
            opt.deactivate(bad, rollback=True)
            mark(rows[bad], DIVERGED, max(t - 1, 0))
            leave(bad)
            if compact:  # the gradients left with their members (MemberLearningRates.compact)
                loss = loss[~bad]
            else:
                loss, U.grad, V.grad = batch.member_loss_and_grad(U, V, rows, L)
        if not rows.numel():
            return False
        check = s % spec.check_every == 0
        if check:
            record(s, loss)
        opt.step(scale=cosine_factor(s, spec.steps) if decay else 1.0)
        if check:
            done = opt.active & (loss < spec.interpolation_loss)
            mark(rows[done], INTERPOLATED, s)
            leave(done)
        return bool(opt.active.any())

    fit(update, steps=spec.steps, label=label, run=run,
        resume=Resume(snapshot, restore, lambda t: t % every == 0, scope=label),
        progress_every=spec.check_every)  # fmt: skip
    t = last  # fit runs at least the update after its resume point
    U.grad = V.grad = None
    with torch.no_grad():  # the last update of a member nothing checked after
        if rows.numel():
            final = batch.member_loss_and_grad(U, V, rows, L, grad=False)[0]
            bad = opt.active & (~torch.isfinite(final) | (final > spec.divergence_loss))
            if bool(bad.any()):
                opt.deactivate(bad, rollback=True)
                mark(rows[bad], DIVERGED, t)
                leave(bad)
    if run is not None:
        run.progress(label, spec.steps, spec.steps)
    U, V = everyone()

    with torch.no_grad():
        W = (U @ V.mT).double()
        final = dict(
            recovery=batch.recovery_error(W.to(U.dtype)).double(),
            loss=batch.loss(U @ V.mT).double(),
            effective_rank=effective_rank(W, convention="roy_vetterli"),
            balancedness=balancedness(U.double(), V.double()),
        )
        spectra = torch.linalg.svdvals(W)
    return RuleResult(
        rule=label,
        hyper=hyper,
        decayed=decay,
        lrs=[float(x) for x in lrs],
        seeds=list(batch.seeds),
        recovery=final["recovery"].tolist(),
        loss=final["loss"].tolist(),
        effective_rank=final["effective_rank"].tolist(),
        balancedness=final["balancedness"].tolist(),
        steps=stopped.tolist(),
        status=status,
        spectra=spectra.tolist(),
        curve_steps=curves["steps"],
        curve_loss=curves["loss"],
        curve_recovery=curves["recovery"],
        seconds=time.perf_counter() - start,
    )


def _require_finite_start(
    loss: torch.Tensor, spec: SensingExperiment, batch: SensingBatch, label: str
) -> None:
    """Raise :class:`NonFiniteError` when the loss at the initial factors is not finite."""
    finite = torch.isfinite(loss).all(dim=1)  # [S]: one initialisation per seed
    if bool(finite.all()):
        return
    seeds = [seed for seed, ok in zip(batch.seeds, finite.tolist(), strict=True) if not ok]
    factors = bool(torch.isfinite(batch.U0).all() and torch.isfinite(batch.V0).all())
    what = "the loss at the initial factors" if factors else "the initial factors"
    raise NonFiniteError(
        f"train_rule: {label}: {what} not finite for seed(s) {seeds} at init_scale="
        f"{spec.init_scale:g} in {spec.dtype}: a non-finite initialisation (lower init_scale)"
    )


def _restore(
    saved: Checkpoint,
    spec: SensingExperiment,
    grid: tuple[int, int],
    U: torch.Tensor,
    V: torch.Tensor,
    opt: MemberLearningRates,
) -> tuple:
    """Load a checkpoint of one rule: compact ``opt`` (and ``U``, ``V``) to the members still
    in the batch and load their state.

    Returns:
        ``(stopped, status, curves, rows, out_U, out_V, out_loss)``.

    Raises:
        KeyError, TypeError, ValueError, RuntimeError, AttributeError: it does not fit this
            rule's ensemble (:func:`gaugelab.study.train.fit` names the file and the run).
    """
    S, L = grid
    state, extra, step = saved.model_state, saved.extra or {}, saved.step
    expected = {"U": (S, L, *U.shape[1:]), "V": (S, L, *V.shape[1:])}
    for name, shape in expected.items():
        got = state[name]
        if tuple(got.shape) != shape or got.dtype != U.dtype:
            raise ValueError(f"{name} is {got.dtype} {tuple(got.shape)}, not {U.dtype} {shape}")
    stopped, rows, out_loss = state["stopped"], state["rows"], state["out_loss"]
    if stopped.shape != (S, L) or stopped.dtype != torch.int64:
        raise ValueError(f"stopped is {stopped.dtype} {tuple(stopped.shape)}")
    if rows.dtype != torch.int64 or out_loss.shape != (S * L,):
        raise ValueError(f"rows {rows.dtype} / out_loss {tuple(out_loss.shape)}")
    status, curves = extra["status"], extra["curves"]
    if [len(row) for row in status] != [L] * S or any(
        x not in STATUSES for row in status for x in row
    ):
        raise ValueError(f"status {status!r} is not [{S}][{L}] of {STATUSES}")
    checks = [0, *range(spec.check_every, step + 1, spec.check_every)]
    if curves["steps"] != checks or not len(curves["loss"]) == len(curves["recovery"]) == len(
        checks
    ):
        raise ValueError(f"curves at steps {curves['steps']!r}, expected {checks}")
    if rows.numel() < S * L:
        opt.compact(rows)
    opt.load_state_dict(saved.optimizer_state)
    out_U, out_V = state["U"].flatten(0, 1).clone(), state["V"].flatten(0, 1).clone()
    with torch.no_grad():
        U.copy_(out_U[rows])
        V.copy_(out_V[rows])
    return stopped.clone(), status, curves, rows.clone(), out_U, out_V, out_loss.clone()
