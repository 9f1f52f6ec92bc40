"""The Ray backend of :func:`gaugelab.study.run_sweep`: runs as Ray tasks of one CPU each.

Same surface as the backends in :mod:`gaugelab.study.executors.local`. Step progress travels
through a ``ray.util.queue.Queue``; Ctrl-C cancels the running tasks (``ray.cancel``: the run
records ``cancelled``); a Ray that this backend initialised (a local one, or the connection to
``address``) is shut down when it closes or is interrupted, so no Ray process outlives the
sweep. A worker whose driver dies on this host stops its run (its heartbeat thread watches).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from typing import Any

from gaugelab.study.executors.local import GRACE_SECONDS, Labels, Task, cancelled, lost, run_task
from gaugelab.study.executors.local import set_threads as _set_threads
from gaugelab.study.runner import Outcome
from gaugelab.study.store.owner import Owner, this_process

__all__ = ["RayPool"]


def _ray_task(store_path: str, task: Task, threads: int | None, queue: Any, driver: Owner):
    """Execute one run in a Ray worker (progress through the Ray queue)."""
    _set_threads(threads)
    return run_task(store_path, task, queue.put_nowait if queue is not None else None, driver)


RAY_MISSING = "run_sweep: executor='ray' needs Ray; install gaugelab[ray] (pip install 'ray')"


def ray_available() -> bool:
    """Whether Ray can be imported (checked before a sweep registers any run)."""
    return importlib.util.find_spec("ray") is not None


def _ray(max_workers: int | None, address: str | None) -> tuple[Any, bool]:
    """``(ray, started)``: Ray initialised (a local one of ``max_workers`` CPUs, or the
    cluster at ``address``); ``started`` when this call initialised it."""
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_MISSING) from None
    if ray.is_initialized():
        return ray, False
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
    return ray, True


class RayPool:
    """Runs as Ray tasks of one CPU each; a Ray this backend initialised is shut down by
    :meth:`close` and :meth:`interrupt`."""

    def __init__(
        self,
        store_path: str,
        max_workers: int | None,
        address: str | None,
        threads: int | None,
        labels: Labels,
    ) -> None:
        self._ray, self._started = _ray(max_workers, address)
        self._store, self._threads, self._labels = store_path, threads, labels
        self._remote = self._ray.remote(num_cpus=1, max_retries=0)(_ray_task)
        self._queue = None
        if labels.wanted:
            from ray.util.queue import Queue

            self._queue = Queue(actor_options={"num_cpus": 0})
        self._refs: dict[Any, Task] = {}
        self._driver = this_process()

    @property
    def busy(self) -> bool:
        return bool(self._refs)

    def submit(self, task: Task) -> None:
        ref = self._remote.remote(self._store, task, self._threads, self._queue, self._driver)
        self._refs[ref] = task

    def _drain(self) -> None:
        if self._queue is None:
            return
        with contextlib.suppress(Exception):
            size = self._queue.qsize()
            for identity, label, step, total in self._queue.get_nowait_batch(size):
                self._labels.report(identity, label, step, total)

    def poll(self, timeout: float) -> list[Outcome]:
        ready, _ = self._ray.wait(list(self._refs), num_returns=1, timeout=timeout)
        self._drain()
        outcomes = []
        for ref in ready:
            task = self._refs.pop(ref)
            try:
                outcomes.append(self._ray.get(ref))
            except Exception as exc:  # the worker died: the environment failed, not the run
                outcomes.append(lost(self._store, task.identity, f"{type(exc).__name__}: {exc}"))
            self._labels.finished(task.identity)
        return outcomes

    def interrupt(self) -> list[Outcome]:
        refs = list(self._refs.items())
        self._refs.clear()
        for ref, _ in refs:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
        outcomes, unrecorded = [], []
        try:
            self._ray.wait([r for r, _ in refs], num_returns=len(refs), timeout=GRACE_SECONDS)
        except KeyboardInterrupt:
            pass
        for ref, task in refs:
            try:
                outcomes.append(self._ray.get(ref, timeout=0))
            except BaseException:  # cancelled, still running or lost: settled below
                unrecorded.append(task.identity)
        self.close()
        return outcomes + cancelled(self._store, unrecorded)

    def close(self) -> None:
        self._drain()
        self._queue = None
        if self._started:
            self._started = False
            self._ray.shutdown()
