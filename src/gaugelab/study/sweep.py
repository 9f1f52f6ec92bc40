"""Sweeps: a grid of specs with seeds as an axis, run locally or on a Ray cluster.

``Sweep(spec, grid={...}, variants=[...], seeds=[...])`` expands to run specs; :func:`run_sweep`
— the project's only executor — registers every run in the store, skips runs whose identity
already completed (and whose recorded artifacts still verify), executes the rest in this
process, on a process pool (``local``) or on Ray (``ray``), keeps going past failures, retries
only infrastructure failures, and reports every failure with its termination class at the end.
Each run is claimed in the store before it trains, so two identical sweeps into one store train
each run once and both end with every run complete. A run killed mid-way resumes from its
latest checkpoint when the same sweep is run again (see
:meth:`gaugelab.study.context.RunContext.resume`); Ctrl-C stops a sweep within seconds with
:class:`SweepInterrupted`, its running runs recorded as ``cancelled``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gaugelab.study.executors.local import POLL_SECONDS, InProcess, Labels, LocalPool, Task
from gaugelab.study.executors.ray import RAY_MISSING, RayPool, ray_available
from gaugelab.study.runner import HELD, REUSED, Outcome, RunInterrupted, spec_reference
from gaugelab.study.spec import ExperimentSpec, Manifest
from gaugelab.study.store.db import DEFAULT_STORE_PATH, RunStore

__all__ = ["EXECUTORS", "Sweep", "SweepInterrupted", "SweepResult", "run_sweep"]

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

    Every field of ``spec`` is carried into the run specs, including one its ``spec_dict``
    leaves out of the identity (e.g. a time limit: how a run executes, not what it computes).

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
                    # every field, also one the spec leaves out of its identity (spec_dict):
                    # how a run executes (a time limit) travels with the run spec
                    data = json.loads(self.spec.model_dump_json())
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
        skipped: identities already completed in the store (not run again), including runs
            that another live process was executing and completed while this sweep waited.
        failed: final outcome of every run that did not complete (its termination class and
            message), after retries.
        outcomes: every attempt's outcome, retries included.
        reexecuted: identity → why a completed run was executed again: its recorded artifacts
            or metric rows failed verification
            (:meth:`~gaugelab.study.store.db.RunStore.verify_artifacts`, ``verify_metrics``;
            one problem per line, joined by ``"; "``).
        waited: identities that another live process held when this sweep reached them (the
            sweep waited for it, then reused its result — or ran the run itself if it died).
    """

    completed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    reexecuted: dict[str, str] = field(default_factory=dict)
    waited: list[str] = field(default_factory=list)

    @property
    def resumed(self) -> dict[str, int]:
        """Identity → the checkpoint step its attempt resumed from (runs that resumed)."""
        return {o.identity: o.resumed_from for o in self.outcomes if o.resumed_from is not None}

    @property
    def restarted(self) -> dict[str, str]:
        """Identity → why its latest checkpoint was set aside (files differing from the
        store's record) and the run started from step 0."""
        return {o.identity: o.checkpoint_rejected for o in self.outcomes if o.checkpoint_rejected}

    @property
    def done(self) -> int:
        """Runs of the sweep that are complete: completed here or reused."""
        return len(set(self.completed) | set(self.skipped))


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :func:`run_sweep`; completed runs are kept in the store.

    Runs that were executing are recorded as ``cancelled``; running the same sweep again
    resumes them from their latest checkpoints.

    Attributes:
        done: runs of the sweep that are complete (completed before or during it, or reused).
        total: all runs of the sweep.
        result: the :class:`SweepResult` so far.
    """

    def __init__(self, done: int, total: int, result: SweepResult) -> None:
        super().__init__(f"interrupted: {done} of {total} runs complete")
        self.done, self.total, self.result = done, total, result


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

    Several processes may run the same sweep into one store at once: each run is claimed
    atomically (:meth:`~gaugelab.study.store.db.RunStore.claim`), so no run trains twice; a run
    that another live process holds is waited for (polled every
    :data:`~gaugelab.study.executors.local.POLL_SECONDS`) while this sweep goes on with the others,
    then reused — or executed, resuming from its checkpoint, if its owner died. A completed run
    is reused only if its recorded artifacts still match their sha256
    (:meth:`~gaugelab.study.store.db.RunStore.verify_artifacts`) and its metric rows their seal
    (:meth:`~gaugelab.study.store.db.RunStore.verify_metrics`); otherwise it is executed again
    as a new attempt (:attr:`SweepResult.reexecuted`).

    Args:
        sweep: the sweep.
        executor: ``"local"`` (a ``ProcessPoolExecutor`` with the ``spawn`` start method; with
            ``max_workers=1`` the runs execute one after another in this process, so a script
            without an ``if __name__ == "__main__":`` guard works) or ``"ray"``
            (``ray.init(address=address)``, or a local Ray of ``max_workers`` CPUs; a Ray this
            call initialised is shut down before it returns).
        max_workers: worker processes (default: the CPU count).
        store: the run store path (created if missing).
        retries: extra attempts for a retryable infrastructure failure (never chosen by score).
        address: a Ray cluster address (``executor="ray"``).
        threads: torch threads in each worker (``None``: torch's default, or
            ``OMP_NUM_THREADS``). Small models run fastest with 1 on a shared machine.
        progress: called as ``progress(done, total)`` once before the first attempt (with
            ``done = 0``; ``total`` counts the runs still to do) and after every finished one.
        step_progress: ``step_progress(label, step, total)`` from inside the runs (e.g. a
            rule's steps), called in this process and thread, wherever the runs execute
            (worker processes report a few times per second per run). The label is the run's
            own (``RunContext.progress``), suffixed ``" · <identity[:8]>"`` while another run
            in flight uses the same one.

    Returns:
        A :class:`SweepResult`.

    Raises:
        SweepInterrupted: Ctrl-C (``KeyboardInterrupt``): queued runs are dropped, running
            ones stopped within a few seconds and recorded as ``cancelled``, worker processes
            ended; completed runs are kept.
        ValueError: unknown executor, negative retries, ``max_workers`` or ``threads`` < 1, a
            spec without ``execute``, or Ray missing.
        StoreError: ``store`` is not a gaugelab run store (or cannot be created or written).
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
    if not type(sweep.spec).executable():
        raise ValueError(
            f"run_sweep: {type(sweep.spec).__name__} declares no trainer and no execute(run)"
        )
    if executor == "ray" and not ray_available():
        raise ValueError(RAY_MISSING)  # before any run is registered
    specs = {spec.identity(): spec for spec in sweep.specs()}  # first of each identity
    result = SweepResult()
    store_path = os.fspath(Path(store).absolute())
    try:
        with RunStore(store_path) as db:
            tasks = _register(db, sweep, specs, result)
            labels = Labels(step_progress)
            if executor == "ray":
                backend = RayPool(store_path, max_workers, address, threads, labels)
            elif max_workers == 1:
                backend = InProcess(store_path, threads, labels)
            else:
                backend = LocalPool(store_path, max_workers, threads, labels)
            _drive(db, backend, tasks, result, retries, progress)
    except SweepInterrupted:
        raise
    except KeyboardInterrupt as exc:
        if isinstance(exc, RunInterrupted):
            result.outcomes.append(exc.outcome)
        raise SweepInterrupted(result.done, len(specs), result) from None
    return result


def _register(
    db: RunStore, sweep: Sweep, specs: dict[str, ExperimentSpec], result: SweepResult
) -> dict[str, Task]:
    """Record the study and its runs; the runs to execute (reused ones go to ``skipped``)."""
    db.add_study(sweep.study, sweep.spec)
    tasks = {}
    for identity, spec in specs.items():
        db.register_run(Manifest.for_spec(spec), study=sweep.study)
        done = [a.ordinal for a in db.attempts(identity) if a.termination == "completed"]
        distrust = 0
        if done:
            problems = db.verify_artifacts(identity, ordinal=done[-1]) + db.verify_metrics(
                identity, done[-1]
            )
            if not problems:
                result.skipped.append(identity)
                continue
            result.reexecuted[identity] = "; ".join(problems)
            distrust = done[-1]
        tasks[identity] = Task(identity, spec_reference(spec), distrust)
    return tasks


def _drive(
    db: RunStore,
    backend: InProcess | LocalPool | RayPool,
    tasks: dict[str, Task],
    result: SweepResult,
    retries: int,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Execute ``tasks`` on ``backend`` until each completed, failed for good, or was reused
    after another process held it; stops the backend on the way out (interrupted or not)."""
    total, done = len(tasks), 0
    if progress is not None:
        progress(0, total)
    attempts_left = dict.fromkeys(tasks, retries)
    queue, waiting = list(tasks), set()
    try:
        while queue or waiting or backend.busy:
            for identity in queue:
                backend.submit(tasks[identity])
            queue = []
            for outcome in backend.poll(POLL_SECONDS) if backend.busy else []:
                identity = outcome.identity
                if outcome.termination == HELD:
                    waiting.add(identity)
                    if identity not in result.waited:
                        result.waited.append(identity)
                    continue
                if outcome.termination == REUSED:
                    result.skipped.append(identity)
                else:
                    result.outcomes.append(outcome)
                    if outcome.termination == "completed":
                        result.completed.append(identity)
                    elif outcome.retryable and attempts_left[identity] > 0:
                        attempts_left[identity] -= 1
                        queue.append(identity)
                        continue
                    else:
                        result.failed.append(outcome)
                done += 1
                if progress is not None:
                    progress(done, total)
            if waiting:
                ready = [i for i in sorted(waiting) if db.holder(i) is None]
                waiting.difference_update(ready)
                queue += ready
                if not (queue or backend.busy):
                    time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        for outcome in backend.interrupt():
            result.outcomes.append(outcome)
            if outcome.termination == "completed":
                result.completed.append(outcome.identity)
        raise
    finally:
        backend.close()
