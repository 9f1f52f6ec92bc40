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

Every measurement is repeated, the sides interleaved round by round
(``gaugelab.cli.bench.time_calls``), each round on fresh stores; cells are medians with the
range over the rounds, the in-process ``execute_run`` time the median over its runs.
"""

from __future__ import annotations

import importlib
import itertools
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

from gaugelab.cli.bench import Timing, ratio_cell, time_calls  # noqa: E402
from gaugelab.study.runner import execute_run, spec_reference  # noqa: E402
from gaugelab.study.spec import ExperimentSpec, Manifest  # noqa: E402
from gaugelab.study.store.db import RunStore  # noqa: E402
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


def _execute_in_process(sweep: Sweep, path: Path, count: int) -> Timing:
    """Seconds of ``execute_run`` called in this process, one sample per run registered at
    ``path`` (a worker's per-run work without dispatch: open the store, attempt, log, end,
    close); the first run is a warm-up."""
    specs = sweep.specs()[:count]
    execute_run(str(path), specs[0].identity(), *spec_reference(specs[0]))  # warm-up
    samples = []
    for spec in specs[1:]:
        start = time.perf_counter()
        execute_run(str(path), spec.identity(), *spec_reference(spec))
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))


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


def _writes(module, path: Path, writers: int, rows: int) -> float:
    """Seconds for ``writers`` processes to write ``rows`` rows each into a fresh store at
    ``path``, from the barrier after every writer opened it to the last writer's end."""
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
    return max(end for _, end in times) - min(start for start, _ in times)


def _rate(rows: int, elapsed: Timing) -> str:
    """rows/s at the median time [at the slowest – at the fastest round]."""
    return f"{rows / elapsed.median:,.0f} [{rows / elapsed.high:,.0f}–{rows / elapsed.low:,.0f}]"


def run(*, quick: bool = False, progress=None) -> list[list]:
    n, rows, repeat = (50, 1000, 3) if quick else (200, 5000, 5)
    warmup = 0 if quick else 1  # quick: the median of 3 already drops a cold first pool start
    module = _importable()
    sweep = Sweep(module.TrivialSpec(), grid={"index": list(range(n))}, name="bench-sweep")
    task = progress.add_task("sweep", total=2 * (repeat + warmup) + 1) if progress else None

    def step():
        if progress:
            progress.advance(task)

    with tempfile.TemporaryDirectory(prefix="gaugelab-bench-") as tmp:
        directory, fresh = Path(tmp), itertools.count()

        def store(kind: str) -> Path:
            return directory / f"{kind}-{next(fresh)}.sqlite"

        pools = time_calls(
            {
                "harness": lambda: _harness(sweep, store("sweep")),
                "bare": lambda: _bare(n),
                "imported": lambda: _bare(n, importlib.import_module, ("gaugelab.study.runner",)),
                "registration": lambda: _registration(sweep, store("register")),
            },
            number=1,
            repeat=repeat,
            warmup=warmup,
            progress=step,
        )
        registered = store("register")
        _registration(sweep, registered)
        per_run = _execute_in_process(sweep, registered, min(n, 50))
        step()
        writes: dict[str, list[float]] = {"concurrent": [], "single": []}
        for _ in range(warmup + repeat):  # the two sides interleaved, round by round
            writes["concurrent"].append(_writes(module, store("writes"), WRITERS, rows))
            writes["single"].append(_writes(module, store("writes"), 1, WRITERS * rows))
            step()
    harness, bare, imported = pools["harness"], pools["bare"], pools["imported"]
    registration = pools["registration"]
    rest = Timing(tuple(h - r for h, r in zip(harness.samples, registration.samples,
                                               strict=True)))  # fmt: skip
    concurrent, single = (Timing(tuple(v[warmup:])) for v in writes.values())
    total = WRITERS * (rows // BATCH) * BATCH
    return [
        [f"{n} trivial runs, {WORKERS} workers (s)", harness.cell(1, 2), bare.cell(1, 2),
         ratio_cell(harness, bare) + " (target ≤ 1.5×)"],
        ["  per run (ms)", f"{1e3 * harness.median / n:.1f}", f"{1e3 * bare.median / n:.1f}", ""],
        ["  registration: hash, manifest, store (s)", registration.cell(1, 2), "", ""],
        ["  rest: pool, imports, attempts, writes (s)", rest.cell(1, 2), "", ""],
        ["  peer + workers import gaugelab.study (s)", harness.cell(1, 2),
         imported.cell(1, 2), ratio_cell(harness, imported)],
        ["  execute_run in-process (ms/run)", per_run.cell(digits=1), "", ""],
        ["  every spawned worker first imports", _main_script(), "", ""],
        [f"metric rows/s: {WRITERS} writers vs 1 ({total} rows)",
         _rate(total, concurrent), _rate(total, single), ratio_cell(single, concurrent)],
    ]  # fmt: skip
