"""One training step of the twin protocol: 4 members as one ensemble vs 4 models alternately.

The peer is the reference approach: separate models (and optimizers) stepped one after the
other. Both do forward, backward and an Adam step of the PROTOCOLS §5 model on the 883 mod-47
training equations, under deterministic algorithms as ``run_twins`` does. The ensemble is timed
eager (the default) and compiled (``gaugelab twins --compile``). Reported: the ratio (target
≥ 1.0: the work is compute-bound at this size), and the ensemble's achieved GFLOP/s against
this machine's fp32 matmul rate measured in the same run (target ≥ 40%).
"""

from __future__ import annotations

import timeit

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gaugelab.cli.bench import matmul_rate
from gaugelab.determinism import deterministic
from gaugelab.experiments.twins import TwinSpec, build_members
from gaugelab.models import Ensemble
from gaugelab.optim import make_optimizer
from gaugelab.tasks import ModularArithmetic

TITLE = "twin step (forward + backward + adam): 4 members as one vs 4 models alternately"
COLUMNS = ["ensemble", "ensemble ms", "alternating ms", "ratio (alternating / ensemble)",
           "GFLOP/step", "ensemble GFLOP/s",
           "of fp32 matmul rate (GFLOP/s; target ≥ 40%)"]  # fmt: skip
KINDS = {"vmap": False, "vmap + compile": True}


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (2, 2) if quick else (5, 3)
    task = progress.add_task("twins", total=len(KINDS) + 2) if progress else None
    data = ModularArithmetic()
    x, y = data.train_inputs, data.train_labels
    members, _ = build_members(TwinSpec())
    E = len(members)
    opts = [make_optimizer("adam", list(m.parameters()), lr=1e-3) for m in members]

    def ensemble_step(ensemble, optimizer):
        optimizer.zero_grad()
        logits = ensemble(x)[:, :, -1]
        F.cross_entropy(logits.flatten(0, 1), y.repeat(E), reduction="none").view(
            E, -1).mean(1).sum().backward()  # fmt: skip
        optimizer.step()

    def alternating_step():
        for model, opt in zip(members, opts, strict=True):
            opt.zero_grad()
            F.cross_entropy(model(x)[:, -1], y).backward()
            opt.step()

    steps = {"alternating": alternating_step}
    for kind, compiled in KINDS.items():
        ensemble = Ensemble(members, compile=compiled)
        optimizer = make_optimizer("adam", list(ensemble.parameters()), lr=1e-3, member_dims=1)
        steps[kind] = lambda e=ensemble, o=optimizer: ensemble_step(e, o)
    with deterministic():
        with FlopCounterMode(display=False) as counter:
            alternating_step()
        flops = counter.get_total_flops()
        rate = matmul_rate(5 if quick else 20)
        times = {}
        for name, fn in steps.items():
            fn()  # warm-up (compiles the compiled ensemble)
            times[name] = min(timeit.repeat(fn, number=number, repeat=repeat)) / number
            if progress:
                progress.advance(task)
    rows = []
    for kind in KINDS:
        achieved = flops / times[kind] / 1e9
        rows.append([
            kind, f"{1e3 * times[kind]:.0f}", f"{1e3 * times['alternating']:.0f}",
            f"{times['alternating'] / times[kind]:.2f}×", f"{flops / 1e9:.2f}",
            f"{achieved:.1f}", f"{achieved / rate:.0%} of {rate:.0f}",
        ])  # fmt: skip
    if progress:
        progress.advance(task)
    return rows
