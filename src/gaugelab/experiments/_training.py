"""The sensing training loop: one rule's (seed × rate) ensemble to its stopping rule, resumable.

A member that interpolates stops (its updates are masked) and keeps the step at which it
stopped; a member that diverges is rolled back to its last parameters with a finite, bounded
loss and masked (divergence of one member is an outcome, not an error of the ensemble). Given a
run context, the loop writes a checkpoint every ``checkpoint_every`` steps and, when the run was
interrupted, continues from the latest one bit for bit.

Source: docs/protocols.md §3 (stopping and divergence rules, cosine decay).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch

from gaugelab.experiments._sensing import SensingBatch, SensingExperiment
from gaugelab.experiments._study import RunState, run_states, study_row
from gaugelab.optim import MemberLearningRates, cosine_factor, make_optimizer
from gaugelab.tasks import balancedness, effective_rank

S = TypeVar("S", bound=SensingExperiment)
INTERPOLATED, DIVERGED, BUDGET = "interpolated", "diverged", "budget"
CHECKS_PER_CHECKPOINT = 10
"""A run context gets a checkpoint every this many interpolation checks (2,000 steps at the
protocol's ``check_every = 200``)."""


@dataclass
class RuleResult:
    """What one rule's ensemble did. Lists are JSON-able; indices are ``[seed][rate]``.

    Attributes:
        rule: registry name (or a label such as ``adam-p@0.5``).
        hyper: extra hyperparameters of the rule.
        decayed: whether the cosine schedule applied.
        lrs: ``[L]`` learning rates; seeds: ``[S]``.
        recovery, loss, effective_rank, balancedness: ``[S][L]`` final metrics.
        steps: ``[S][L]`` updates applied to the final parameters.
        status: ``[S][L]`` ``"interpolated"``, ``"diverged"`` or ``"budget"``.
        spectra: ``[S][L][n]`` singular values of the final ``U Vᵀ``.
        curve_steps: ``[C]``; curve_loss, curve_recovery: ``[C][S][L]`` at every check.
        seconds: wall time of the ensemble.
    """

    rule: str
    hyper: dict[str, Any]
    decayed: bool
    lrs: list[float]
    seeds: list[int]
    recovery: list[list[float]]
    loss: list[list[float]]
    effective_rank: list[list[float]]
    balancedness: list[list[float]]
    steps: list[list[int]]
    status: list[list[str]]
    spectra: list[list[list[float]]]
    curve_steps: list[int]
    curve_loss: list[list[list[float]]]
    curve_recovery: list[list[list[float]]]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (non-finite floats as strings ``"nan"``/``"inf"``)."""
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**_unjson(data))


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def _unjson(x: Any) -> Any:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    if isinstance(x, dict):
        return {k: _unjson(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_unjson(v) for v in x]
    return x


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
) -> RuleResult:
    """Train one rule on every (seed × learning rate) as one ensemble.

    At every step ``t = 0..steps`` the loss of each active member is evaluated at its
    parameters after ``t`` updates (the *pre-update* loss). A non-finite loss or one above
    ``divergence_loss`` marks the member diverged: it is rolled back to its parameters after
    ``t − 1`` updates and frozen. At multiples of ``check_every`` a loss below
    ``interpolation_loss`` marks it interpolated and frozen at ``t``. Then every member steps
    (frozen ones stay bit-identical) at ``η_e`` times the cosine factor when ``decay``.

    Args:
        spec: the protocol (sizes, budget, thresholds, dtype).
        batch: :meth:`SensingBatch.build` of ``spec``.
        rule: zoo registry name.
        lrs: ``[L]`` learning rates, each > 0.
        decay: cosine schedule ``η_t = η·½(1 + cos(π t/T))`` (else constant).
        hyper: the rule's other hyperparameters (e.g. ``{"p": 0.5}`` for ``adam-p``).
        label: the name recorded (default ``rule``); it also names the checkpoint scope.
        run: a :class:`gaugelab.study.runner.RunContext` (or ``None``): checkpoints go to its
            checkpoint folder, and an interrupted run resumes from the latest one.
        checkpoint_every: steps between checkpoints (default ``CHECKS_PER_CHECKPOINT ·
            check_every``); only with ``run``.

    Returns:
        The :class:`RuleResult` (``seconds`` counts this attempt's wall time only).

    Raises:
        ValueError: an unknown rule or bad hyperparameter (from ``make_optimizer``), an
            empty / non-positive rate grid, or ``checkpoint_every < 1``.

    Source: docs/protocols.md §3 (stopping and divergence rules, cosine decay).
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
    U = batch.U0[:, None].expand(S, L, *batch.U0.shape[1:]).clone()  # [S, L, n, k]
    V = batch.V0[:, None].expand(S, L, *batch.V0.shape[1:]).clone()
    inner = make_optimizer(rule, [U, V], lr=1.0, member_dims=2, **hyper)
    opt = MemberLearningRates(inner, torch.tensor(list(lrs), dtype=torch.float64).expand(S, L))
    status = [[BUDGET] * L for _ in range(S)]
    stopped = torch.full((S, L), spec.steps, dtype=torch.int64)
    curves: dict[str, list] = {"steps": [], "loss": [], "recovery": []}
    first = 0
    saved = run.resume(scope=label) if run is not None else None
    if saved is not None:
        with torch.no_grad():
            U.copy_(saved.model_state["U"])
            V.copy_(saved.model_state["V"])
        opt.load_state_dict(saved.optimizer_state)
        status, curves = saved.extra["status"], saved.extra["curves"]
        stopped = saved.model_state["stopped"].clone()
        first = saved.step

    def mark(mask: torch.Tensor, what: str, step: int) -> None:
        for s, lr_index in mask.nonzero().tolist():
            status[s][lr_index] = what
        stopped[mask] = step

    for t in range(first, spec.steps + 1):
        if run is not None and first < t < spec.steps and t % every == 0:
            run.checkpoint(
                t,
                scope=label,
                model_state={"U": U, "V": V, "stopped": stopped},
                optimizer_state=opt.state_dict(),
                extra={"status": status, "curves": curves},
            )
        loss, U.grad, V.grad = batch.loss_and_grad(U, V)  # [S, L], the factors' gradients
        bad = opt.active & (~torch.isfinite(loss) | (loss > spec.divergence_loss))
        if bool(bad.any()):
            opt.deactivate(bad, rollback=True)
            mark(bad, DIVERGED, max(t - 1, 0))
            loss, U.grad, V.grad = batch.loss_and_grad(U, V)
        if t % spec.check_every == 0:
            curves["steps"].append(t)
            curves["loss"].append(loss.double().tolist())
            curves["recovery"].append(batch.recovery_error(U @ V.mT).double().tolist())
            done = opt.active & (loss < spec.interpolation_loss)
            opt.deactivate(done)
            mark(done, INTERPOLATED, t)
            if run is not None:
                run.progress(label, t, spec.steps)
        if t == spec.steps or not bool(opt.active.any()):
            break
        opt.step(scale=cosine_factor(t, spec.steps) if decay else 1.0)
    U.grad = V.grad = None
    if run is not None:
        run.progress(label, spec.steps, spec.steps)

    with torch.no_grad():
        W = (U @ V.mT).double()
        final = dict(
            recovery=batch.recovery_error(W.to(U.dtype)).double(),
            loss=batch.loss(U @ V.mT).double(),
            effective_rank=effective_rank(W),
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


def record_result(run: Any, result: RuleResult, final_step: int) -> None:
    """Log a rule's curves and final metrics to the store and save its result artifact.

    Metric names are ``{label}/{metric}/lr={lr}/seed={seed}``: ``loss`` and ``recovery`` at
    every check step; ``final_recovery``, ``final_loss``, ``effective_rank``,
    ``balancedness``, ``stop_step`` at ``final_step``. Non-finite values are not logged (the
    artifact keeps them). The full :class:`RuleResult` is written as
    ``result-{label}.json`` (artifact kind ``"result"``).
    """

    def name(metric: str, s: int, j: int) -> str:
        return f"{result.rule}/{metric}/lr={result.lrs[j]:g}/seed={result.seeds[s]}"

    def finite(values: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in values.items() if math.isfinite(v)}

    S, L = len(result.seeds), len(result.lrs)
    members = [(s, j) for s in range(S) for j in range(L)]
    for c, step in enumerate(result.curve_steps):
        values = {}
        for s, j in members:
            values[name("loss", s, j)] = result.curve_loss[c][s][j]
            values[name("recovery", s, j)] = result.curve_recovery[c][s][j]
        run.log(step, finite(values))
    final = {}
    for s, j in members:
        final[name("final_recovery", s, j)] = result.recovery[s][j]
        final[name("final_loss", s, j)] = result.loss[s][j]
        final[name("effective_rank", s, j)] = result.effective_rank[s][j]
        final[name("balancedness", s, j)] = result.balancedness[s][j]
        final[name("stop_step", s, j)] = float(result.steps[s][j])
    run.log(final_step, finite(final))
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in result.rule)
    path = run.directory / f"result-{safe}.json"
    path.write_text(json.dumps(result.to_dict(), allow_nan=False), encoding="utf-8")
    run.artifact(path, "result")


def read_study(store: Any, study: str, spec_class: type[S]) -> tuple[S, list[RunState], dict]:
    """A sensing study from the store: its spec, every run's state, and label → the
    :class:`RuleResult` of every completed run.

    Raises:
        ValueError: no such study, or one of another kind than ``spec_class``.
    """
    row = study_row(store, study)
    if row.kind != spec_class.kind:
        raise ValueError(
            f"collect: study {study!r} is a {row.kind!r} study, not a {spec_class.kind!r} study"
        )
    runs = run_states(store, study)
    results: dict[str, RuleResult] = {}
    for run in runs:
        if run.completed:
            results.update(read_results(store, run.identity))
    return spec_class.model_validate(row.spec), runs, results


def read_results(store: Any, identity: str) -> dict[str, RuleResult]:
    """The ``result`` artifacts of a run's latest completed attempt, label → :class:`RuleResult`
    (empty when the run has not completed)."""
    attempts = [a for a in store.attempts(identity) if a.termination == "completed"]
    if not attempts:
        return {}
    ordinal = attempts[-1].ordinal
    results = {}
    for art in store.artifacts(identity):
        if art.kind == "result" and art.ordinal == ordinal:
            result = RuleResult.from_dict(json.loads(art.path.read_text(encoding="utf-8")))
            results[result.rule] = result
    return results
