"""One training step of the twin protocol: 4 members as one ensemble vs 4 models alternately.

The peer is the reference approach: separate models (and optimizers) stepped one after the
other. Both do forward, backward and an Adam step of the PROTOCOLS §5 model on the 883 mod-47
training equations, under deterministic algorithms as ``run_twins`` does. The ensemble is timed
eager (the default) and compiled (``gaugelab twins --compile``). Reported: the ratio (target
≥ 1.0: the work is compute-bound at this size), and the ensemble's achieved GFLOP/s (at its
median time) against this machine's fp32 matmul rate measured in the same run (target ≥ 40%).
Every side is warmed up (compilation included) and the three are timed interleaved
(``gaugelab.cli.bench.time_calls``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gaugelab.cli.bench import matmul_rate, ratio_cell, time_calls
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
    number, repeat = (1, 3) if quick else (3, 5)
    task = progress.add_task("twins", total=repeat + 1) if progress else None
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
        if progress:
            progress.advance(task)
        times = time_calls(
            steps,  # warm-up compiles the compiled ensemble
            number=number,
            repeat=repeat,
            progress=(lambda: progress.advance(task)) if progress else None,
        )
    rows = []
    for kind in KINDS:
        achieved = flops / times[kind].median / 1e9
        rows.append([
            kind, times[kind].cell(digits=0), times["alternating"].cell(digits=0),
            ratio_cell(times["alternating"], times[kind]), f"{flops / 1e9:.2f}",
            f"{achieved:.1f}", f"{achieved / rate:.0%} of {rate:.0f}",
        ])  # fmt: skip
    return rows
