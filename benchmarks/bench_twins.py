"""One training step of the twin protocol: 4 members as one ensemble vs 4 models alternately.

The peer is the reference approach: separate models (and optimizers) stepped one after the
other. Both do forward, backward and an Adam step of the PROTOCOLS §5 model on the 883 mod-47
training equations. Reported: the ratio (target ≥ 1.0: the work is compute-bound at this size),
and the ensemble's achieved GFLOP/s against this machine's fp32 matmul rate measured in the
same run (target ≥ 40%).
"""

from __future__ import annotations

import timeit

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gaugelab.cli.bench import matmul_rate
from gaugelab.equivariance.twins import TwinSpec, build_members
from gaugelab.models import Ensemble
from gaugelab.optim import make_optimizer
from gaugelab.tasks import ModularArithmetic

TITLE = "twin step (forward + backward + adam): 4 members as one vs 4 models alternately"
COLUMNS = ["ensemble ms", "alternating ms", "ratio (alternating / ensemble)", "GFLOP/step",
           "ensemble GFLOP/s", "of fp32 matmul rate"]  # fmt: skip


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (2, 2) if quick else (5, 3)
    task = progress.add_task("twins", total=3) if progress else None
    data = ModularArithmetic()
    x, y = data.train_inputs, data.train_labels
    members, _ = build_members(TwinSpec())
    ensemble = Ensemble(members)
    ens_opt = make_optimizer("adam", list(ensemble.parameters()), lr=1e-3, member_dims=1)
    opts = [make_optimizer("adam", list(m.parameters()), lr=1e-3) for m in members]
    E = len(members)

    def ensemble_step():
        ens_opt.zero_grad()
        logits = ensemble(x)[:, :, -1]
        F.cross_entropy(logits.flatten(0, 1), y.repeat(E), reduction="none").view(
            E, -1).mean(1).sum().backward()  # fmt: skip
        ens_opt.step()

    def alternating_step():
        for model, opt in zip(members, opts, strict=True):
            opt.zero_grad()
            F.cross_entropy(model(x)[:, -1], y).backward()
            opt.step()

    with FlopCounterMode(display=False) as counter:
        alternating_step()
    flops = counter.get_total_flops()
    rate = matmul_rate(5 if quick else 20)
    times = {}
    for name, fn in (("ensemble", ensemble_step), ("alternating", alternating_step)):
        fn()
        times[name] = min(timeit.repeat(fn, number=number, repeat=repeat)) / number
        if progress:
            progress.advance(task)
    achieved = flops / times["ensemble"] / 1e9
    if progress:
        progress.advance(task)
    return [[
        f"{1e3 * times['ensemble']:.0f}", f"{1e3 * times['alternating']:.0f}",
        f"{times['alternating'] / times['ensemble']:.2f}×", f"{flops / 1e9:.2f}",
        f"{achieved:.1f}", f"{achieved / rate:.0%} of {rate:.0f}",
    ]]  # fmt: skip
