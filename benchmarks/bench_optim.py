"""Optimizer step time: one optimizer over an E = 8 ensemble vs 8 optimizers in a loop.

The peer is the per-run loop the reference scripts use: one optimizer per run, stepped one
after another. Both sides step the same 40 × 40 factor pairs with fixed gradients; the ratio is
loop time / ensemble time (higher is better; target ≥ 3 at E = 8). Both are warmed up (the
first step creates the state) and timed interleaved (``gaugelab.cli.bench.time_calls``).
"""

from __future__ import annotations

import torch

from gaugelab.cli.bench import ratio_cell, time_calls
from gaugelab.optim import OPTIMIZERS, make_optimizer

TITLE = "optimizer step: E = 8 ensemble vs 8 separate optimizers (40 × 40 factors, float32)"
COLUMNS = ["rule", "ensemble ms/step", "loop ms/step", "ratio (loop / ensemble)"]
MEMBERS, N, K = 8, 40, 40


def _ensemble(name: str, grads: list[torch.Tensor]):
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    opt = make_optimizer(name, params, lr=1e-4, member_dims=1)
    return opt.step


def _loop(name: str, grads: list[torch.Tensor]):
    steps = []
    for e in range(MEMBERS):
        params = [torch.zeros_like(g[e], requires_grad=True) for g in grads]
        for p, g in zip(params, grads, strict=True):
            p.grad = g[e].clone()
        steps.append(make_optimizer(name, params, lr=1e-4).step)

    def step_all():
        for step in steps:
            step()

    return step_all


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (10, 5) if quick else (30, 7)
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(MEMBERS, N, K, generator=gen) for _ in range(2)]
    task = progress.add_task("optim", total=len(OPTIMIZERS)) if progress else None
    rows = []
    for name in OPTIMIZERS:
        t = time_calls(
            {"ensemble": _ensemble(name, grads), "loop": _loop(name, grads)},
            number=number,
            repeat=repeat,
        )
        rows.append([name, t["ensemble"].cell(), t["loop"].cell(),
                     ratio_cell(t["loop"], t["ensemble"])])  # fmt: skip
        if progress:
            progress.advance(task)
    return rows
