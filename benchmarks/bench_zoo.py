"""The matrix-sensing zoo: batched (seed × rate) members against the per-run loop.

The peer is the reference scripts' way: one process, one run at a time — for every rule, seed
and rate its own factors, its own optimizer and its own autograd loop (loss, divergence check,
the interpolation check every 200 steps, backward, step, cosine rate where the protocol
decays), one thread. Ours: each rule's (seed × rate) grid as one ensemble
(closed-form gradients, per-member rates), measured in this process per rule, and for the whole
zoo with one worker process per core (1 thread each, one rule per task) — how ``gaugelab zoo
--workers N`` runs it. Both sides run the PROTOCOLS §3 problem (n = 40, 3 seeds, each rule's
grid, float32) for a few hundred steps in this run; per-step times are extrapolated to the full
zoo (20,000 steps per member, no early stopping: an upper bound for both sides). Target: the
full-zoo ratio ≥ 4. Each rule's two sides are timed interleaved, round by round, after a
warm-up (``gaugelab.cli.bench.time_calls``); the whole-zoo rows add the rules' times round by
round. Both sides run with the torch threads ``gaugelab bench --threads`` pins (1 by default,
as ``gaugelab zoo`` runs each worker).
"""

from __future__ import annotations

import os
import tempfile
import time

import torch

from gaugelab.cli.bench import Timing, ratio_cell, time_calls
from gaugelab.experiments._sensing import SensingBatch
from gaugelab.experiments._training import train_rule
from gaugelab.experiments.zoo import ZooSpec, run_zoo
from gaugelab.optim import cosine_factor, make_optimizer
from gaugelab.tasks import MatrixSensing

TITLE = "zoo: batched (seed × rate) ensemble per rule vs the per-run loop (n = 40, float32)"
COLUMNS = [
    "rule",
    "members",
    "batched ms/step",
    "loop ms/step",
    "ratio (loop / batched)",
    "full zoo ours (min)",
    "full zoo loop (min)",
]


def _loop(spec: ZooSpec, rule: str, lrs, decay: bool, steps: int) -> float:
    """Seconds for every (seed, rate) run of ``rule``, one after another, ``steps`` each."""
    start = time.perf_counter()
    for seed in spec.seeds:
        task = MatrixSensing(n=spec.n, rank=spec.rank, seed=seed)
        for lr in lrs:
            U, V = (x.requires_grad_(True) for x in task.init_factors())
            opt = make_optimizer(rule, [U, V], lr=lr)
            for t in range(steps):
                loss = task.loss(U @ V.T)
                value = float(loss.detach())
                if value != value or value > spec.divergence_loss:
                    break
                if t % spec.check_every == 0 and value < spec.interpolation_loss:
                    break
                opt.zero_grad()
                loss.backward()
                if decay:
                    opt.param_groups[0]["lr"] = lr * cosine_factor(t, spec.steps)
                opt.step()
    return time.perf_counter() - start


def _batched(spec: ZooSpec, rule: str, lrs, decay: bool, steps: int) -> float:
    short = spec.model_copy(update={"steps": steps})
    batch = SensingBatch.build(short)
    start = time.perf_counter()
    train_rule(short, batch, rule, lrs, decay=decay)
    return time.perf_counter() - start


def _study_wall(steps: int, workers: int, folder: str, threads: int) -> float:
    """Wall seconds of ``run_zoo`` (no convex row, no interpolation checks) on ``workers``."""
    spec = ZooSpec(steps=steps, check_every=10**9, convex=False)
    start = time.perf_counter()
    run_zoo(
        spec,
        store=os.path.join(folder, f"store-{steps}.sqlite"),
        max_workers=workers,
        threads=threads,
        write_report=False,
    )
    return time.perf_counter() - start


def _workers(steps: int, workers: int) -> float:
    """Seconds per step of the whole zoo run as ``gaugelab zoo --workers N`` runs it: the slope
    between ``steps`` and ``2·steps`` (process start, imports and the store cancel out)."""
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as folder:
        short = _study_wall(steps, workers, folder, threads)
        long = _study_wall(2 * steps, workers, folder, threads)
    return (long - short) / steps


def _total(timings: list[Timing], scale: float) -> Timing:
    """The rules' times added round by round, times ``scale``."""
    return Timing(tuple(scale * sum(r) for r in zip(*(t.samples for t in timings), strict=True)))


def run(*, quick: bool = False, progress=None) -> list[list]:
    spec = ZooSpec()
    steps, repeat = (40, 3) if quick else (200, 3)
    slope = 100 if quick else 600  # the workers' slope needs work well above start-up noise
    workers = max(1, os.cpu_count() or 1)
    task = progress.add_task("zoo", total=len(spec.rules) + repeat) if progress else None
    rows, batched_all, loop_all = [], [], []
    full = spec.steps / 60  # seconds per step → minutes for the full budget
    for rule in spec.rules:
        lrs = spec.lr_grids.grid(rule)
        decay = spec.decays(rule, spec.decayed)
        _batched(spec, rule, lrs, decay, 5)  # warm-up
        _loop(spec, rule, lrs, decay, 5)
        t = time_calls(
            {"batched": lambda: _batched(spec, rule, lrs, decay, steps),  # noqa: B023
             "loop": lambda: _loop(spec, rule, lrs, decay, steps)},  # noqa: B023
            number=1,
            repeat=repeat,
            warmup=0,
        )  # fmt: skip
        batched, loop = (_total([t[k]], 1 / steps) for k in ("batched", "loop"))  # s/step
        batched_all.append(batched)
        loop_all.append(loop)
        members = len(spec.seeds) * len(lrs)
        rows.append([rule, members, batched.cell(), loop.cell(), ratio_cell(loop, batched),
                     f"{full * batched.median:.1f}", f"{full * loop.median:.1f}"])  # fmt: skip
        if progress:
            progress.advance(task)
    total_b, total_l = _total(batched_all, full), _total(loop_all, full)  # minutes
    rows.append(["full zoo, one process", "", "", "", ratio_cell(total_l, total_b),
                 total_b.cell(1, 1), total_l.cell(1, 1)])  # fmt: skip
    parallel = []
    for _ in range(repeat):
        parallel.append(_workers(slope, workers) * full)
        if progress:
            progress.advance(task)
    wall = Timing(tuple(parallel))
    label = f"full zoo, gaugelab zoo --workers {workers}"
    if wall.low > 0:
        rows.append([label, "", "", "", ratio_cell(total_l, wall), wall.cell(1, 1),
                     total_l.cell(1, 1)])  # fmt: skip
    else:  # a slope ≤ 0: process start-up varied more than the work between the two lengths
        rows.append([label, "", "", "", "— (start-up noise exceeded the work: rerun)",
                     wall.cell(1, 1), total_l.cell(1, 1)])  # fmt: skip
    threads = torch.get_num_threads()
    rows.append([f"{threads} torch thread{'s' if threads > 1 else ''} per process on both sides",
                 "", "", "", "", "", ""])  # fmt: skip
    return rows
