"""Sweep harness overhead and run-store write throughput.

(a) ``N`` trivial runs (each logs ``math.sqrt(index)``) through ``run_sweep(executor="local",
max_workers=2)`` into a fresh store, against the peer: a bare
``ProcessPoolExecutor(max_workers=2, mp_context=spawn).map(math.sqrt, range(N))``. Both include
starting and stopping their worker pool. The ratio is harness / bare (lower is better; target
≤ 1.5×). The harness time is split into the parent's registration (spec hashing, manifests,
store writes) and the rest (pool start, worker imports, one store connection, attempt and
metric writes per run); a second peer whose workers import ``gaugelab.study.runner`` (torch
included) shows how much of the rest is the import.

(b) Metric-write throughput: 4 spawned processes each write ``R`` rows into one store with
``RunStore.log_metrics`` (one step of 10 metrics per call, i.e. 10 rows per transaction),
against one process writing the same ``4 R`` rows the same way (the peer). Times run from a
barrier that every writer passes after opening the store to the last writer's end.
"""

from __future__ import annotations

import importlib
import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import ClassVar

from pydantic import Field

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # spawned workers import this file as `bench_sweep`

from gaugelab.study.runner import execute_run, spec_reference  # noqa: E402
from gaugelab.study.spec import ExperimentSpec, Manifest  # noqa: E402
from gaugelab.study.store import RunStore  # noqa: E402
from gaugelab.study.sweep import Sweep, run_sweep  # noqa: E402

TITLE = "sweep harness: trivial runs vs a bare process pool; run-store metric writes"
COLUMNS = ["measurement", "gaugelab", "peer", "ratio"]
WORKERS = 2
WRITERS = 4
BATCH = 10  # metrics per log_metrics call (rows per transaction)

work = math.sqrt  # the trivial work; the peer maps exactly this function


class TrivialSpec(ExperimentSpec):
    """A run that logs ``work(index)`` once."""

    kind: ClassVar[str] = "bench-trivial"
    index: int = Field(0, ge=0, description="the run's index (the work's argument)")

    def execute(self, run) -> None:
        run.log(0, {"value": work(self.index)})


def _importable():
    """This file as the module ``bench_sweep``.

    ``gaugelab bench`` loads it under another name, which spawned workers cannot import; the
    spec class and the writer must come from the module they will import by name.
    """
    if __name__ == "bench_sweep":
        return sys.modules[__name__]
    return importlib.import_module("bench_sweep")


def _bare(n: int, initializer=None, initargs=()) -> float:
    start = time.perf_counter()
    with ProcessPoolExecutor(
        max_workers=WORKERS,
        mp_context=get_context("spawn"),
        initializer=initializer,
        initargs=initargs,
    ) as pool:
        list(pool.map(work, range(n)))
    return time.perf_counter() - start


def _registration(sweep: Sweep, path: Path) -> float:
    """The parent's work before dispatch in run_sweep, replayed on another fresh store."""
    start = time.perf_counter()
    with RunStore(path) as db:
        db.add_study(sweep.study, sweep.spec)
        for spec in sweep.specs():
            db.register_run(Manifest.for_spec(spec), study=sweep.study)
            db.completed(spec.identity())
    return time.perf_counter() - start


def _harness(sweep: Sweep, path: Path) -> float:
    start = time.perf_counter()
    result = run_sweep(sweep, executor="local", max_workers=WORKERS, store=path)
    elapsed = time.perf_counter() - start
    if len(result.completed) != len(sweep.specs()):
        raise RuntimeError(f"bench sweep: runs failed: {result.failed[:3]}")
    return elapsed


def _execute_in_process(sweep: Sweep, path: Path, count: int) -> float:
    """Seconds per run of ``execute_run`` called in this process on runs registered at ``path``
    (a worker's per-run work without dispatch: open the store, attempt, log, end, close)."""
    specs = sweep.specs()[:count]
    execute_run(str(path), specs[0].identity(), *spec_reference(specs[0]))  # warm-up
    start = time.perf_counter()
    for spec in specs[1:]:
        execute_run(str(path), spec.identity(), *spec_reference(spec))
    return (time.perf_counter() - start) / (len(specs) - 1)


def _main_script() -> str:
    """What spawned workers re-import before any task: the parent's main script, if any."""
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:
        return main.__spec__.name
    path = getattr(main, "__file__", None)
    return Path(path).name if path else "nothing"


def _writer(path: str, attempt_id: int, rows: int, barrier, results) -> None:
    """Write ``rows`` metric rows in steps of :data:`BATCH`; report (start, end) wall times."""
    store = RunStore(path, create=False)
    names = [f"metric-{j}" for j in range(BATCH)]
    barrier.wait()
    start = time.time()
    for step in range(rows // BATCH):
        store.log_metrics(attempt_id, step, {name: step + 0.5 for name in names})
    results.put((start, time.time()))
    store.close()


def _throughput(module, directory: Path, writers: int, rows: int) -> float:
    """rows/s of ``writers`` processes writing ``rows`` rows each into one fresh store."""
    path = directory / f"writes-{writers}.sqlite"
    with RunStore(path) as db:
        attempts = []
        for i in range(writers):
            manifest = Manifest.for_spec(module.TrivialSpec(index=i))
            db.register_run(manifest)
            attempts.append(db.start_attempt(manifest.identity))
    ctx = get_context("spawn")
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [
        ctx.Process(target=module._writer, args=(str(path), a, rows, barrier, results))
        for a in attempts
    ]
    for p in procs:
        p.start()
    times = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"bench sweep: a writer exited with code {p.exitcode}")
    elapsed = max(end for _, end in times) - min(start for start, _ in times)
    return writers * (rows // BATCH) * BATCH / elapsed


def run(*, quick: bool = False, progress=None) -> list[list]:
    n, rows = (50, 1000) if quick else (200, 5000)
    module = _importable()
    sweep = Sweep(module.TrivialSpec(), grid={"index": list(range(n))}, name="bench-sweep")
    task = progress.add_task("sweep", total=7) if progress else None

    def step():
        if progress:
            progress.advance(task)

    with tempfile.TemporaryDirectory(prefix="gaugelab-bench-") as tmp:
        directory = Path(tmp)
        bare = _bare(n)
        step()
        harness = _harness(sweep, directory / "sweep.sqlite")
        step()
        registration = _registration(sweep, directory / "register.sqlite")
        step()
        per_run = _execute_in_process(sweep, directory / "register.sqlite", min(n, 50))
        step()
        imported = _bare(n, importlib.import_module, ("gaugelab.study.runner",))
        step()
        concurrent = _throughput(module, directory, WRITERS, rows)
        step()
        single = _throughput(module, directory, 1, WRITERS * rows)
        step()
    return [
        [f"{n} trivial runs, {WORKERS} workers (s)", f"{harness:.2f}", f"{bare:.2f}",
         f"{harness / bare:.1f}× (target ≤ 1.5×)"],
        ["  per run (ms)", f"{1e3 * harness / n:.1f}", f"{1e3 * bare / n:.1f}", ""],
        ["  registration: hash, manifest, store (s)", f"{registration:.2f}", "", ""],
        ["  rest: pool, imports, attempts, writes (s)",
         f"{harness - registration:.2f}", "", ""],
        ["  peer + workers import gaugelab.study (s)", f"{harness:.2f}",
         f"{imported:.2f}", f"{harness / imported:.1f}×"],
        ["  execute_run in-process (ms/run)", f"{1e3 * per_run:.1f}",
         "", ""],
        ["  every spawned worker first imports", _main_script(), "", ""],
        [f"metric rows/s: {WRITERS} writers vs 1 ({WRITERS * rows} rows)",
         f"{concurrent:,.0f}", f"{single:,.0f}", f"{concurrent / single:.2f}×"],
    ]  # fmt: skip
