"""Where a sweep's runs execute: in this process, or on a local process pool (Ray:
:mod:`gaugelab.study.executors.ray`).

Each backend takes runs (``submit``), hands back their :class:`~gaugelab.study.runner.Outcome`
as they end (``poll``), forwards the runs' step progress to the driver's callback, and stops
either fast (``interrupt``: on Ctrl-C — queued runs are dropped, running ones receive SIGINT or
``ray.cancel`` and are recorded as ``cancelled``, within :data:`GRACE_SECONDS`) or cleanly
(``close``). Either way no process a backend started outlives it: the pool's workers are
joined (or terminated), and a Ray that the backend started is shut down.

Worker processes report step progress through a queue (a ``multiprocessing`` queue, or a
``ray.util.queue.Queue``), at most one report per run and label every
:data:`THROTTLE_SECONDS` (the last step always). Pool workers ignore SIGINT between runs
(:func:`gaugelab.study.runner.worker_sigint`) and exit when their driver is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

from gaugelab.lazy import LazyModule
from gaugelab.study import runner
from gaugelab.study.runner import Outcome, RunInterrupted, execute_run
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.owner import Owner, gone, this_process

torch = LazyModule("torch")

POLL_SECONDS = 0.25
"""How often a waiting driver looks at its runs, its workers' progress and held runs."""
GRACE_SECONDS = 5.0
"""How long an interrupted backend lets running runs record ``cancelled`` before it kills."""
THROTTLE_SECONDS = 0.2
"""A worker sends at most one step report per run and label this often."""

StepSink = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Task:
    """One run to execute: its identity, :func:`~gaugelab.study.runner.spec_reference`, and
    the completed attempts not to trust (``distrust_through``, 0 for none)."""

    identity: str
    reference: tuple[str, str, str]
    distrust_through: int = 0


class Labels:
    """The driver's side of step progress: a run's label (a rule, an optimizer) as shown.

    A label is shown as the run reports it, unless another run still in flight took it first:
    then as ``"<label> · <identity[:8]>"``, so two runs never move one bar. A run keeps the
    label it was first shown under until it ends.
    """

    def __init__(self, sink: StepSink | None) -> None:
        self._sink = sink
        self._owners: dict[str, str] = {}  # plain label → the run in flight that shows it
        self._shown: dict[tuple[str, str], str] = {}  # (run, label) → as shown

    @property
    def wanted(self) -> bool:
        return self._sink is not None

    def report(self, identity: str, label: str, step: int, total: int) -> None:
        if self._sink is None:
            return
        shown = self._shown.get((identity, label))
        if shown is None:
            owner = self._owners.setdefault(label, identity)
            shown = label if owner == identity else f"{label} · {identity[:8]}"
            self._shown[identity, label] = shown
        self._sink(shown, step, total)

    def finished(self, identity: str) -> None:
        self._owners = {k: v for k, v in self._owners.items() if v != identity}
        self._shown = {k: v for k, v in self._shown.items() if k[0] != identity}


class Throttled:
    """A worker's ``progress(label, step, total)``: ``put((identity, label, step, total))`` at
    most every :data:`THROTTLE_SECONDS` per label, and always for the first and last step."""

    def __init__(self, identity: str, put: Callable[[tuple], Any]) -> None:
        self._identity, self._put = identity, put
        self._last: dict[str, float] = {}

    def __call__(self, label: str, step: int, total: int) -> None:
        now = time.monotonic()
        last = self._last.get(label)
        if last is not None and step < total and now - last < THROTTLE_SECONDS:
            return
        self._last[label] = now
        with contextlib.suppress(Exception):  # progress is never worth failing a run
            self._put((self._identity, label, step, total))


def lost(store_path: str, identity: str, message: str) -> Outcome:
    """Record a run whose worker vanished: its abandoned attempt is ended (its owner is gone),
    or — when it never opened one — a failed attempt is recorded, unless another live process
    holds the run or it completed."""
    with RunStore(store_path, create=False) as db:
        closed = db.reap(identity, note=f" ({message})")
        if closed:
            ordinal = closed[-1].ordinal
        elif db.holder(identity) is None and not db.completed(identity):
            attempt_id = db.start_attempt(identity)
            ordinal = db.end_attempt(attempt_id, "infrastructure_failure", message).ordinal
        else:
            ordinal = 0
    return Outcome(identity, ordinal, "infrastructure_failure", message, retryable=True)


def cancelled(store_path: str, identities: list[str]) -> list[Outcome]:
    """End the abandoned attempts of interrupted runs whose worker was stopped as
    ``cancelled``."""
    outcomes = []
    with RunStore(store_path, create=False) as db:
        for identity in identities:
            for row in db.reap(identity, termination="cancelled", note=" (interrupted)"):
                outcomes.append(Outcome(identity, row.ordinal, "cancelled", "interrupted"))
    return outcomes


def set_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` in this worker (``None``: leave torch's default)."""
    if threads is not None:
        torch.set_num_threads(threads)


class InProcess:
    """Runs one after another in this process (the caller's thread), progress reported as
    it happens; the thread count is set for each run and restored after."""

    def __init__(self, store_path: str, threads: int | None, labels: Labels) -> None:
        self._store, self._threads, self._labels = store_path, threads, labels
        self._queue: deque[Task] = deque()

    @property
    def busy(self) -> bool:
        return bool(self._queue)

    def submit(self, task: Task) -> None:
        self._queue.append(task)

    def poll(self, timeout: float) -> list[Outcome]:
        if not self._queue:
            return []
        task = self._queue.popleft()

        before = torch.get_num_threads()
        set_threads(self._threads)
        progress = None
        if self._labels.wanted:
            identity = task.identity
            progress = lambda label, s, t: self._labels.report(identity, label, s, t)  # noqa: E731
        try:
            outcome = execute_run(
                self._store,
                task.identity,
                *task.reference,
                progress,
                distrust_through=task.distrust_through,
            )
        finally:
            torch.set_num_threads(before)
            self._labels.finished(task.identity)
        return [outcome]

    def interrupt(self) -> list[Outcome]:
        self._queue.clear()
        return []

    def close(self) -> None:
        self._queue.clear()


# --- worker processes of the local pool ------------------------------------------------------

_QUEUE: Any = None
_DRIVER: Owner | None = None


def _init_worker(threads: int | None, queue: Any, driver: Owner) -> None:
    """A pool worker's start: threads, SIGINT between runs ignored, progress queue, and a
    watchdog that ends an idle worker whose driver is gone."""
    global _QUEUE, _DRIVER
    _QUEUE, _DRIVER = queue, driver
    signal.signal(signal.SIGINT, runner.worker_sigint)
    set_threads(threads)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if not runner._RUNNING and gone(driver, None) is not None:
                os._exit(0)  # an orphan between runs: nobody will send it work

    threading.Thread(target=watch, name="gaugelab-driver-watch", daemon=True).start()


def run_task(store_path: str, task: Task, put: Callable | None, driver: Owner) -> Outcome:
    """Execute one run in a worker process of ``driver``, step reports ``put`` (throttled);
    an interrupted run returns its ``cancelled`` outcome instead of raising."""
    progress = Throttled(task.identity, put) if put is not None else None
    try:
        return execute_run(
            store_path,
            task.identity,
            *task.reference,
            progress,
            distrust_through=task.distrust_through,
            driver=driver,
        )
    except RunInterrupted as exc:
        return exc.outcome


def _pool_task(store_path: str, task: Task) -> Outcome:
    """Execute one run in a pool worker."""
    return run_task(store_path, task, _QUEUE.put if _QUEUE is not None else None, _DRIVER)


class LocalPool:
    """A ``spawn`` process pool of ``max_workers`` workers, started at the first run."""

    def __init__(
        self, store_path: str, max_workers: int | None, threads: int | None, labels: Labels
    ) -> None:
        self._store, self._workers, self._threads = store_path, max_workers, threads
        self._labels = labels
        self._ctx = get_context("spawn")
        self._queue = self._ctx.SimpleQueue() if labels.wanted else None
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[Future, Task] = {}

    @property
    def busy(self) -> bool:
        return bool(self._futures)

    def submit(self, task: Task) -> None:
        if self._pool is None:
            args = (self._threads, self._queue, this_process())
            self._pool = ProcessPoolExecutor(
                max_workers=self._workers,
                mp_context=self._ctx,
                initializer=_init_worker,
                initargs=args,
            )
        self._futures[self._pool.submit(_pool_task, self._store, task)] = task

    def _drain(self) -> None:
        queue = self._queue
        while queue is not None and not queue.empty():
            identity, label, step, total = queue.get()
            self._labels.report(identity, label, step, total)

    def poll(self, timeout: float) -> list[Outcome]:
        done, _ = wait(list(self._futures), timeout=timeout, return_when=FIRST_COMPLETED)
        self._drain()
        outcomes, broken = [], []
        for future in done:
            task = self._futures.pop(future)
            try:
                outcomes.append(future.result())
            except BrokenProcessPool as exc:
                broken.append((task, f"worker process died: {exc}"))
            except Exception as exc:  # a result that did not come back: the worker failed
                outcomes.append(lost(self._store, task.identity, f"{type(exc).__name__}: {exc}"))
            self._labels.finished(task.identity)
        if broken:
            # every future of a broken pool fails; join its workers (so their pids are gone
            # and their attempts can be ended), then start a fresh pool for any retry
            rest = list(self._futures.items())
            self._futures.clear()
            wait([f for f, _ in rest])
            broken += [(t, f"worker process died: {f.exception()}") for f, t in rest]
            self._shutdown(wait_for_workers=True)
            outcomes += [lost(self._store, t.identity, why) for t, why in broken]
        return outcomes

    def _shutdown(self, *, wait_for_workers: bool) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait_for_workers, cancel_futures=True)

    def interrupt(self) -> list[Outcome]:
        pool = self._pool
        if pool is None:
            return []
        processes = list(getattr(pool, "_processes", {}).values())
        for process in processes:  # they got the terminal's SIGINT too, unless it was kill -INT
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.kill(process.pid, signal.SIGINT)
        futures = list(self._futures.items())
        self._futures.clear()
        self._shutdown(wait_for_workers=False)
        outcomes, unrecorded = [], []
        try:
            wait([f for f, _ in futures], timeout=GRACE_SECONDS)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            pass
        for future, task in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                outcomes.append(future.result())
            elif not future.cancelled():
                unrecorded.append(task.identity)
        _stop(processes)
        return outcomes + cancelled(self._store, unrecorded)

    def close(self) -> None:
        self._shutdown(wait_for_workers=True)
        self._drain()
        if self._queue is not None:
            self._queue.close()
            self._queue = None


def _stop(processes: list[Any]) -> None:
    """Terminate (then kill) the processes still alive and reap them all."""
    for process in processes:
        with contextlib.suppress(Exception):
            if process.is_alive():
                process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=2.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=2.0)
