"""Sweeps: a grid of specs with seeds as an axis, run locally or on a Ray cluster.

``Sweep(spec, grid={...}, variants=[...], seeds=[...])`` expands to run specs; :func:`run_sweep`
— the project's only executor — registers every run in the store, skips runs whose identity
already completed, executes the rest on a process pool (``local``) or Ray (``ray``), keeps going
past failures, retries only infrastructure failures, and reports every failure with its
termination class at the end. A run killed mid-way resumes from its latest checkpoint when the
same sweep is run again (see :meth:`gaugelab.study.runner.RunContext.resume`).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

from gaugelab.study.runner import Outcome, execute_run, spec_reference
from gaugelab.study.spec import ExperimentSpec, Manifest
from gaugelab.study.store import DEFAULT_STORE_PATH, RunStore

EXECUTORS = ("local", "ray")


def _set_path(data: dict, path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            raise ValueError(f"Sweep: {path!r} does not name a field of the spec")
        node = node[key]
    if keys[-1] not in node:
        raise ValueError(f"Sweep: {path!r} does not name a field of the spec")
    node[keys[-1]] = value


@dataclass(frozen=True)
class Sweep:
    """A grid of runs around one spec.

    Args:
        spec: the base spec.
        grid: field path (dots reach into nested models, e.g. ``"twin.optimizer"``) → values;
            the runs are the Cartesian product.
        variants: an explicit list of runs as mappings of field path → value applied together
            (e.g. one per rule: ``{"rules": ("adam",), "convex": False}``); crossed with the
            grid and the seeds.
        seeds: the seed axis: ints (set on ``seed_field``) or mappings of field path → value
            (e.g. ``{"twin.init_seed": 1, "twin.gauge_seed": 778}``) applied together.
        seed_field: the field the int seeds set.
        name: the study name (default: the spec's kind).

    Raises:
        ValueError: (from :meth:`specs`) a path that is not a field, a value the spec rejects,
            or int seeds without ``seed_field``.
    """

    spec: ExperimentSpec
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    variants: Sequence[Mapping[str, Any]] = ()
    seeds: Sequence[int | Mapping[str, Any]] = ()
    seed_field: str | None = None
    name: str | None = None

    @property
    def study(self) -> str:
        """The study name."""
        return self.name or type(self.spec).kind

    def specs(self) -> list[ExperimentSpec]:
        """The run specs: grid × variants × seeds, in row-major order, each validated."""
        keys = list(self.grid)
        seed_updates: list[dict[str, Any]] = []
        for seed in self.seeds or [None]:
            if seed is None:
                seed_updates.append({})
            elif isinstance(seed, Mapping):
                seed_updates.append(dict(seed))
            elif self.seed_field is None:
                raise ValueError("Sweep: int seeds need seed_field (the field they set)")
            else:
                seed_updates.append({self.seed_field: seed})
        out = []
        variants = [dict(v) for v in self.variants] or [{}]
        for values in itertools.product(*(self.grid[k] for k in keys)):
            for variant in variants:
                for seeds in seed_updates:
                    data = self.spec.spec_dict()
                    updates = [*zip(keys, values, strict=True), *variant.items(), *seeds.items()]
                    for path, value in updates:
                        _set_path(data, path, value)
                    out.append(type(self.spec).model_validate(data))
        return out


@dataclass
class SweepResult:
    """What a sweep did.

    Attributes:
        completed: identities completed in this sweep.
        skipped: identities already completed in the store (not run again).
        failed: final outcome of every run that did not complete (its termination class and
            message), after retries.
        outcomes: every attempt's outcome, retries included.
    """

    completed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def resumed(self) -> dict[str, int]:
        """Identity → the checkpoint step its attempt resumed from (runs that resumed)."""
        return {o.identity: o.resumed_from for o in self.outcomes if o.resumed_from is not None}


def _execute(threads: int | None, *args: Any) -> Outcome:
    """:func:`execute_run` with ``threads`` torch threads in this worker (None: as is)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return execute_run(*args)


def _in_process(threads: int | None, *args: Any, progress=None) -> Outcome:
    """:func:`execute_run` in this process with ``threads`` torch threads, restoring the thread
    count afterwards; the run's progress reports reach ``progress``."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return execute_run(*args, progress=progress)
    finally:
        torch.set_num_threads(before)


def _ray_executor(max_workers: int | None, address: str | None):
    try:
        import ray
    except ImportError:
        raise ValueError(
            "run_sweep: executor='ray' needs Ray; install gaugelab[ray] (pip install 'ray')"
        ) from None
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            # a local cluster imports what this process can: spec classes outside gaugelab too
            path = os.pathsep.join(p for p in sys.path if p)
            ray.init(
                num_cpus=max_workers or os.cpu_count(),
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": {"PYTHONPATH": path}},
            )
    remote = ray.remote(num_cpus=1, max_retries=0)(_execute)
    return ray, remote


def run_sweep(
    sweep: Sweep,
    *,
    executor: str = "local",
    max_workers: int | None = None,
    store: str | os.PathLike[str] = DEFAULT_STORE_PATH,
    retries: int = 1,
    address: str | None = None,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    step_progress: Callable[[str, int, int], None] | None = None,
) -> SweepResult:
    """Run every spec of a sweep that has not completed yet.

    Args:
        sweep: the sweep.
        executor: ``"local"`` (a ``ProcessPoolExecutor`` with the ``spawn`` start method; with
            ``max_workers=1`` the runs execute one after another in this process, so a script
            without an ``if __name__ == "__main__":`` guard works) or ``"ray"``
            (``ray.init(address=address)``, or a local Ray of ``max_workers`` CPUs).
        max_workers: worker processes (default: the CPU count).
        store: the run store path (created if missing).
        retries: extra attempts for a retryable infrastructure failure (never chosen by score).
        address: a Ray cluster address (``executor="ray"``).
        threads: torch threads in each worker (``None``: torch's default, or
            ``OMP_NUM_THREADS``). Small models run fastest with 1 on a shared machine.
        progress: called as ``progress(done, total)`` once before the first attempt (with
            ``done = 0``; ``total`` counts the runs still to do) and after every finished one.
        step_progress: ``step_progress(label, step, total)`` from inside the runs (e.g. a
            rule's steps), when they execute in this process (``max_workers=1``, local).

    Returns:
        A :class:`SweepResult`.

    Raises:
        ValueError: unknown executor, negative retries, ``max_workers`` or ``threads`` < 1, a
            spec without ``execute``, or Ray missing.
        StoreError: ``store`` is not a gaugelab run store.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"run_sweep: executor={executor!r}; allowed: {', '.join(EXECUTORS)}")
    if retries < 0:
        raise ValueError(f"run_sweep: retries={retries}; allowed: an integer >= 0")
    for arg, value in (("max_workers", max_workers), ("threads", threads)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"run_sweep: {arg}={value!r}; allowed: an integer >= 1 or None")
    if not callable(getattr(sweep.spec, "execute", None)):
        raise ValueError(f"run_sweep: {type(sweep.spec).__name__} defines no execute(run)")
    result = SweepResult()
    pending: dict[str, tuple[str, str, str]] = {}
    with RunStore(store) as db:
        db.add_study(sweep.study, sweep.spec)
        for spec in sweep.specs():
            identity = spec.identity()
            db.register_run(Manifest.for_spec(spec), study=sweep.study)
            if identity in pending or db.completed(identity):
                if identity not in pending:
                    result.skipped.append(identity)
                continue
            pending[identity] = spec_reference(spec)
    store_path = os.fspath(store)
    total, done = len(pending), 0
    if progress is not None:
        progress(0, total)
    attempts_left = {identity: retries for identity in pending}
    queue = list(pending)
    while queue:
        outcomes = _dispatch(
            executor, queue, pending, store_path, max_workers, address, threads, step_progress
        )
        queue = []
        for outcome in outcomes:
            result.outcomes.append(outcome)
            if outcome.termination == "completed":
                result.completed.append(outcome.identity)
            elif outcome.retryable and attempts_left[outcome.identity] > 0:
                attempts_left[outcome.identity] -= 1
                queue.append(outcome.identity)
                continue
            else:
                result.failed.append(outcome)
            done += 1
            if progress is not None:
                progress(done, total)
    return result


def _dispatch(
    executor, identities, pending, store_path, max_workers, address, threads, step_progress
) -> list[Outcome]:
    if executor == "ray":
        ray, remote = _ray_executor(max_workers, address)
        refs = {identity: remote.remote(threads, store_path, identity, *pending[identity])
                for identity in identities}  # fmt: skip
        outcomes = []
        for identity, ref in refs.items():
            try:
                outcomes.append(ray.get(ref))
            except Exception as exc:  # the worker died: the environment failed, not the run
                outcomes.append(_lost(store_path, identity, f"{type(exc).__name__}: {exc}"))
        return outcomes
    if max_workers == 1:
        return [
            _in_process(threads, store_path, i, *pending[i], progress=step_progress)
            for i in identities
        ]
    outcomes = []
    with ProcessPoolExecutor(max_workers=max_workers, mp_context=get_context("spawn")) as pool:
        futures = {
            pool.submit(_execute, threads, store_path, i, *pending[i]): i for i in identities
        }
        for future in as_completed(futures):
            identity = futures[future]
            try:
                outcomes.append(future.result())
            except BrokenProcessPool as exc:
                outcomes.append(_lost(store_path, identity, f"worker process died: {exc}"))
    return outcomes


def _lost(store_path: str, identity: str, message: str) -> Outcome:
    """Record an attempt whose worker vanished (its own record may be missing or open)."""
    with RunStore(store_path, create=False) as db:
        attempts = db.attempts(identity)
        if attempts and attempts[-1].termination is None:
            db.end_attempt(attempts[-1].id, "infrastructure_failure", message)
            ordinal = attempts[-1].ordinal
        else:
            attempt_id = db.start_attempt(identity)
            db.end_attempt(attempt_id, "infrastructure_failure", message)
            ordinal = db.attempts(identity)[-1].ordinal
    return Outcome(identity, ordinal, "infrastructure_failure", message, retryable=True)
