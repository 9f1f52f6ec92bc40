"""The engine the sensing experiments share: batched members, stopping rules, rate selection.

One rule trains one ensemble whose members are (seed × learning rate): factors
``U, V [S, L, n, k]`` (``member_dims = 2``), each seed with its own measurements, each rate
applied through :class:`gaugelab.optim.MemberLearningRates`. A member that interpolates stops
(its updates are masked) and keeps the step at which it stopped; a member that diverges is
rolled back to its last parameters with a finite, bounded loss and masked (divergence of one
member is an outcome, not an error of the ensemble). Source: PROTOCOLS §3.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from typing import Any, Literal

import torch
from pydantic import Field, field_validator, model_validator

from gaugelab.optim import MemberLearningRates, cosine_factor, make_optimizer
from gaugelab.study import Manifest, RunStore, execute_run
from gaugelab.study.runner import spec_reference
from gaugelab.study.spec import ExperimentSpec
from gaugelab.tasks import MatrixSensing, balancedness, effective_rank

INTERPOLATED, DIVERGED, BUDGET = "interpolated", "diverged", "budget"
SCHEDULES = ("reference", "constant", "cosine")
_DTYPES = {"float32": torch.float32, "float64": torch.float64}

Progress = Callable[[str, int, int], None]
"""``progress(label, step, total)``: called every check interval while a rule trains."""

PROGRESS: ContextVar[Progress | None] = ContextVar("gaugelab_experiments_progress", default=None)
"""The progress callback of runs executed in this process (set by :func:`progress_hook`)."""


@contextlib.contextmanager
def progress_hook(callback: Progress | None) -> Iterator[None]:
    """Route the progress of runs executed in this process (and thread) to ``callback``."""
    token = PROGRESS.set(callback)
    try:
        yield
    finally:
        PROGRESS.reset(token)


class SensingExperiment(ExperimentSpec):
    """Fields every matrix-sensing experiment shares; defaults are PROTOCOLS §3.

    Subclasses set ``kind``, their step budget and their rules.
    """

    n: int = Field(40, ge=1, description="Matrix size n (X* is n × n). PROTOCOLS §3: 40.")
    rank: int = Field(3, ge=1, description="Planted rank r*. PROTOCOLS §3: 3.")
    k: int | None = Field(None, ge=1, description="Factor width k; None means k = n (§3).")
    m: int | None = Field(
        None, ge=1, description="Measurements; None means 2·r*(2n − r*) (462 for n=40, r*=3)."
    )
    init_scale: float = Field(
        1e-3, gt=0, description="Factor init scale: U, V = scale·randn(n, k), seed + 7 (§3)."
    )
    seeds: tuple[int, ...] = Field(
        (42, 123, 456), min_length=1, description="Instance seeds (factors use seed + 7)."
    )
    steps: int = Field(20_000, ge=1, description="Step budget per member (§3: 20,000).")
    interpolation_loss: float = Field(
        1e-7, gt=0, description="A member interpolates when its pre-update train loss is below."
    )
    check_every: int = Field(
        200, ge=1, description="Interpolation check (and curve record) interval in steps."
    )
    divergence_loss: float = Field(
        1e8, gt=0, description="A member diverges when its loss is non-finite or above this."
    )
    schedule: Literal["reference", "constant", "cosine"] = Field(
        "reference",
        description="reference: cosine decay for the decayed set only (§3); constant: no "
        "decay; cosine: η_t = η·½(1 + cos(π t/T)) for every rule.",
    )
    tail: float = Field(
        0.0, ge=0, lt=1, description="Spectral-tail weight τ of the target (0: exactly low rank)."
    )
    dtype: Literal["float32", "float64"] = Field(
        "float32", description="Compute dtype (float32 as the reference runs)."
    )

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds={seeds}; allowed: distinct integers")
        return seeds

    @model_validator(mode="after")
    def _check_sizes(self) -> SensingExperiment:
        if self.rank > self.n:
            raise ValueError(f"rank={self.rank}; allowed: 1 <= rank <= n={self.n}")
        if self.tail > 0 and self.rank == self.n:
            raise ValueError(f"tail={self.tail} needs rank < n; got rank={self.rank}")
        return self

    @property
    def torch_dtype(self) -> torch.dtype:
        """The compute dtype as a ``torch.dtype``."""
        return _DTYPES[self.dtype]

    def decays(self, rule: str, decayed: Sequence[str] = ()) -> bool:
        """Whether ``rule`` runs on the cosine schedule under :attr:`schedule`."""
        return self.schedule == "cosine" or (self.schedule == "reference" and rule in decayed)


@dataclass(frozen=True, eq=False)
class SensingBatch:
    """The sensing instances of every seed, stacked.

    Attributes:
        seeds: ``[S]`` instance seeds.
        A: ``[S, m, n²]``; y: ``[S, m]``; target: ``[S, n, n]``; U0, V0: ``[S, n, k]``.
        AT: ``[S, n², m]``, ``A`` transposed and contiguous (the forward product with a few
            rows per seed runs about twice as fast against it on CPU).
    """

    seeds: tuple[int, ...]
    A: torch.Tensor
    y: torch.Tensor
    target: torch.Tensor
    U0: torch.Tensor
    V0: torch.Tensor
    AT: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.AT is None:
            object.__setattr__(self, "AT", self.A.mT.contiguous())

    @classmethod
    def build(cls, spec: SensingExperiment) -> SensingBatch:
        """Draw every seed's instance and initial factors (PROTOCOLS §3 draw order)."""
        tasks = [
            MatrixSensing(
                n=spec.n,
                rank=spec.rank,
                k=spec.k,
                m=spec.m,
                init_scale=spec.init_scale,
                seed=s,
                tail=spec.tail,
                dtype=spec.torch_dtype,
            )
            for s in spec.seeds
        ]
        factors = [t.init_factors() for t in tasks]
        return cls(
            seeds=tuple(spec.seeds),
            A=torch.stack([t.A for t in tasks]),
            y=torch.stack([t.y for t in tasks]),
            target=torch.stack([t.target for t in tasks]),
            U0=torch.stack([u for u, _ in factors]),
            V0=torch.stack([v for _, v in factors]),
        )

    def loss(self, W: torch.Tensor) -> torch.Tensor:
        """Mean squared residual per member: ``W`` ``[S, L, n, n]`` → ``[S, L]``."""
        residual = W.flatten(-2) @ self.AT - self.y[:, None]  # [S, L, m]
        return (residual * residual).mean(dim=-1)

    def loss_and_grad(
        self, U: torch.Tensor, V: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The loss and its gradients with respect to both factors, in closed form.

        With ``r = A vec(U Vᵀ) − y`` and ``L = mean(r²)``: ``∇_W L = (2/m) mat(Aᵀ r)``,
        ``∇_U L = ∇_W L · V``, ``∇_V L = (∇_W L)ᵀ U`` — what autograd computes, without its
        per-step overhead, and with both products against ``A`` in their fast layout.

        Args:
            U: ``[S, L, n, k]``; V: ``[S, L, n, k]``.

        Returns:
            ``(loss [S, L], grad_U [S, L, n, k], grad_V [S, L, n, k])``.
        """
        W = U @ V.mT  # [S, L, n, n]
        residual = W.flatten(-2) @ self.AT - self.y[:, None]  # [S, L, m]
        loss = (residual * residual).mean(dim=-1)
        grad_W = (residual @ self.A).view_as(W) * (2.0 / residual.shape[-1])  # [S, L, n, n]
        return loss, grad_W @ V, grad_W.mT @ U

    def recovery_error(self, W: torch.Tensor) -> torch.Tensor:
        """``‖W − target‖_F / ‖target‖_F`` per member: ``[S, L, n, n]`` → ``[S, L]``."""
        target = self.target[:, None]
        return torch.linalg.matrix_norm(W - target) / torch.linalg.matrix_norm(target)


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
        label: the name recorded and shown in progress (default ``rule``).

    Returns:
        The :class:`RuleResult`.

    Raises:
        ValueError: an unknown rule or bad hyperparameter (from ``make_optimizer``), or an
            empty / non-positive rate grid.

    Source: PROTOCOLS §3 (stopping and divergence rules, cosine decay).
    """
    if not lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise ValueError(f"train_rule: lrs={list(lrs)}; allowed: a non-empty list of rates > 0")
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
    curve_steps: list[int] = []
    curve_loss: list[list[list[float]]] = []
    curve_recovery: list[list[list[float]]] = []
    progress = PROGRESS.get()

    def mark(mask: torch.Tensor, what: str, step: int) -> None:
        for s, lr_index in mask.nonzero().tolist():
            status[s][lr_index] = what
        stopped[mask] = step

    for t in range(spec.steps + 1):
        loss, U.grad, V.grad = batch.loss_and_grad(U, V)  # [S, L], the factors' gradients
        bad = opt.active & (~torch.isfinite(loss) | (loss > spec.divergence_loss))
        if bool(bad.any()):
            opt.deactivate(bad, rollback=True)
            mark(bad, DIVERGED, max(t - 1, 0))
            loss, U.grad, V.grad = batch.loss_and_grad(U, V)
        if t % spec.check_every == 0:
            curve_steps.append(t)
            curve_loss.append(loss.double().tolist())
            curve_recovery.append(batch.recovery_error(U @ V.mT).double().tolist())
            done = opt.active & (loss < spec.interpolation_loss)
            opt.deactivate(done)
            mark(done, INTERPOLATED, t)
            if progress is not None:
                progress(label, t, spec.steps)
        if t == spec.steps or not bool(opt.active.any()):
            break
        opt.step(scale=cosine_factor(t, spec.steps) if decay else 1.0)
    U.grad = V.grad = None
    if progress is not None:
        progress(label, spec.steps, spec.steps)

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
        curve_steps=curve_steps,
        curve_loss=curve_loss,
        curve_recovery=curve_recovery,
        seconds=time.perf_counter() - start,
    )


@dataclass(frozen=True)
class RateChoice:
    """The learning rate chosen for one rule.

    Attributes:
        index: position in the grid, or ``None`` when every rate diverged on some seed.
        lr: the rate, or ``None``.
        interpolated: whether the chosen rate interpolated on every seed (the protocol's rule
            applied); False means the fallback was used and the row is flagged.
        reason: one line saying how it was chosen.
    """

    index: int | None
    lr: float | None
    interpolated: bool
    reason: str


def select_rate(result: RuleResult) -> RateChoice:
    """The protocol's selection rule, applied to one rule's grid.

    Among rates whose *worst* seed interpolates (every seed interpolated), the one with the
    lowest mean recovery error. If no rate interpolates on every seed, **ours**: the lowest
    mean recovery among rates with no diverged seed, flagged. Ties go to the smaller rate
    (grid order).

    Returns:
        The :class:`RateChoice`.

    Source: PROTOCOLS §3 (selection rule); the fallback is ours.
    """
    L = len(result.lrs)

    def mean_rec(j: int) -> float:
        return sum(row[j] for row in result.recovery) / len(result.recovery)

    def column(j: int) -> list[str]:
        return [row[j] for row in result.status]

    full = [j for j in range(L) if all(s == INTERPOLATED for s in column(j))]
    if full:
        j = min(full, key=lambda i: (mean_rec(i), i))
        return RateChoice(
            j, result.lrs[j], True, "lowest mean recovery among rates whose worst seed interpolates"
        )
    finite = [j for j in range(L) if DIVERGED not in column(j)]
    if finite:
        j = min(finite, key=lambda i: (mean_rec(i), i))
        return RateChoice(
            j,
            result.lrs[j],
            False,
            "no rate interpolates on every seed: lowest mean recovery among non-diverged rates",
        )
    return RateChoice(None, None, False, "every rate diverged on at least one seed")


# --- running a study: one run per rule, in this process or in worker processes -----------


@dataclass
class RunOutcome:
    """One run of a study as the experiments read it back.

    Attributes:
        spec: the run's spec.
        identity: its run identity.
        termination: the latest attempt's termination class (``"completed"``, …).
        message: that attempt's message ("" when completed).
        results: the ``result`` artifacts of the completed attempt, parsed (label → dict).
        cached: the run had completed before this call and was not executed again.
    """

    spec: ExperimentSpec
    identity: str
    termination: str
    message: str
    results: dict[str, dict[str, Any]]
    cached: bool


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


def _set_threads(threads: int) -> None:  # worker initializer
    torch.set_num_threads(threads)


def run_study(
    name: str,
    spec: ExperimentSpec,
    runs: Sequence[ExperimentSpec],
    *,
    store: Any,
    workers: int = 1,
    threads: int = 1,
    progress: Progress | None = None,
) -> list[RunOutcome]:
    """Register a study of ``runs`` in the run store, execute the runs that have not completed,
    and read every run's results back.

    Args:
        name: the study's name (studies are immutable: one name, one spec).
        spec: the study's spec (recorded with the study).
        runs: the run specs (each with ``execute(run)``).
        store: the run store path (created if missing).
        workers: 1 runs in this process (with per-step progress); more runs that many spawned
            worker processes (progress per finished run).
        threads: torch threads per run (restored after in this process). Default 1: the
            sensing products are small and memory-bound, a second thread gains little and, on
            a busy machine, stalls every product; use ``workers`` for more cores.
        progress: ``progress(label, step, total)``.

    Returns:
        One :class:`RunOutcome` per run, in order. Failed runs are returned, not raised.

    Raises:
        ValueError: ``workers`` or ``threads`` < 1; a study ``name`` used by another spec.
        StoreError: ``store`` is not a gaugelab run store.
    """
    for arg, value in (("workers", workers), ("threads", threads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"run_study: {arg}={value!r}; allowed: an integer >= 1")
    identities = [r.identity() for r in runs]
    with RunStore(store) as db:
        db.add_study(name, spec)
        for r in runs:
            db.register_run(Manifest.for_spec(r), study=name)
        cached = {i for i in identities if db.completed(i)}
        store_path = os.fspath(db.path)
    pending = [(i, r) for i, r in zip(identities, runs, strict=True) if i not in cached]
    if workers == 1:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with progress_hook(progress):
                for identity, r in pending:
                    execute_run(store_path, identity, *spec_reference(r))
        finally:
            torch.set_num_threads(before)
    elif pending:
        context = get_context("spawn")
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_set_threads, initargs=(threads,)
        ) as pool:
            futures = {
                pool.submit(execute_run, store_path, i, *spec_reference(r)): r for i, r in pending
            }
            for future in as_completed(futures):
                with contextlib.suppress(BrokenProcessPool):  # the open attempt is closed below
                    future.result()
                if progress is not None:
                    label = ",".join(getattr(futures[future], "labels", lambda: [])())
                    progress(label or "run", 1, 1)
    outcomes = []
    with RunStore(store_path, create=False) as db:
        for identity, r in zip(identities, runs, strict=True):
            attempts = db.attempts(identity)
            last = attempts[-1] if attempts else None
            if last is not None and last.termination is None and identity in dict(pending):
                message = "the worker process died"  # the runner never closed the attempt
                last = db.end_attempt(last.id, "infrastructure_failure", message)
            termination = (last.termination or "open") if last else "not-run"
            results: dict[str, dict[str, Any]] = {}
            if termination == "completed":
                for art in db.artifacts(identity):
                    if art.kind == "result" and art.ordinal == last.ordinal:
                        data = json.loads(art.path.read_text(encoding="utf-8"))
                        results[data["rule"]] = data
            outcomes.append(
                RunOutcome(
                    r,
                    identity,
                    termination,
                    last.message if last else "",
                    results,
                    identity in cached,
                )
            )
    return outcomes
