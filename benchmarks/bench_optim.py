"""Optimizer step time: one optimizer over an E = 8 ensemble vs 8 optimizers in a loop.

The peer is the per-run loop the reference scripts use: one optimizer per run, stepped one
after another. Both sides step the same 40 × 40 factor pairs with fixed gradients; the ratio is
loop time / ensemble time (higher is better; target ≥ 3 at E = 8).
"""

from __future__ import annotations

import timeit

import torch

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


def _time(fn, number: int, repeat: int) -> float:
    fn()  # warm-up: creates the state
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (20, 3) if quick else (60, 5)
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(MEMBERS, N, K, generator=gen) for _ in range(2)]
    task = progress.add_task("optim", total=len(OPTIMIZERS)) if progress else None
    rows = []
    for name in OPTIMIZERS:
        ensemble = _time(_ensemble(name, grads), number, repeat)
        loop = _time(_loop(name, grads), number, repeat)
        rows.append([name, f"{1e3 * ensemble:.3f}", f"{1e3 * loop:.3f}", f"{loop / ensemble:.1f}×"])
        if progress:
            progress.advance(task)
    return rows
