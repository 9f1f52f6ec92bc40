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
full-zoo ratio ≥ 4.
"""

from __future__ import annotations

import os
import tempfile
import time

import torch

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


def _study_wall(steps: int, workers: int, folder: str) -> float:
    """Wall seconds of ``run_zoo`` (no convex row, no interpolation checks) on ``workers``."""
    spec = ZooSpec(steps=steps, check_every=10**9, convex=False)
    start = time.perf_counter()
    run_zoo(
        spec,
        store=os.path.join(folder, f"store-{steps}.sqlite"),
        max_workers=workers,
        write_report=False,
    )
    return time.perf_counter() - start


def _workers(steps: int, workers: int) -> float:
    """Seconds per step of the whole zoo run as ``gaugelab zoo --workers N`` runs it: the slope
    between ``steps`` and ``2·steps`` (process start, imports and the store cancel out)."""
    with tempfile.TemporaryDirectory() as folder:
        short = _study_wall(steps, workers, folder)
        long = _study_wall(2 * steps, workers, folder)
    return (long - short) / steps


def run(*, quick: bool = False, progress=None) -> list[list]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # both sides; stable on a shared machine (no OpenMP stalls)
    try:
        return _run(quick, progress)
    finally:
        torch.set_num_threads(before)


def _run(quick: bool, progress) -> list[list]:
    spec = ZooSpec()
    steps = 60 if quick else 300
    workers = max(1, os.cpu_count() or 1)
    task = progress.add_task("zoo", total=len(spec.rules) + 1) if progress else None
    rows, total_b, total_l = [], 0.0, 0.0
    for rule in spec.rules:
        lrs = spec.lr_grids.grid(rule)
        decay = spec.decays(rule, spec.decayed)
        _batched(spec, rule, lrs, decay, 5)  # warm-up
        batched = _batched(spec, rule, lrs, decay, steps) / steps
        loop = _loop(spec, rule, lrs, decay, steps) / steps
        full_b, full_l = batched * spec.steps / 60, loop * spec.steps / 60
        total_b, total_l = total_b + full_b, total_l + full_l
        members = len(spec.seeds) * len(lrs)
        rows.append(
            [
                rule,
                members,
                f"{1e3 * batched:.2f}",
                f"{1e3 * loop:.2f}",
                f"{loop / batched:.1f}×",
                f"{full_b:.1f}",
                f"{full_l:.1f}",
            ]
        )
        if progress:
            progress.advance(task)
    rows.append(
        [
            "full zoo, one process",
            "",
            "",
            "",
            f"{total_l / total_b:.1f}×",
            f"{total_b:.1f}",
            f"{total_l:.1f}",
        ]
    )
    parallel = _workers(steps, workers) * spec.steps / 60
    if progress:
        progress.advance(task)
    rows.append(
        [
            f"full zoo, gaugelab zoo --workers {workers}",
            "",
            "",
            "",
            f"{total_l / parallel:.1f}×",
            f"{parallel:.1f}",
            f"{total_l:.1f}",
        ]
    )
    rows.append(["one thread per process on both sides", "", "", "", "", "", ""])
    return rows
