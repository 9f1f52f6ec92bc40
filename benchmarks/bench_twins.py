"""One training step of the twin protocol: 4 members as one ensemble vs 4 models alternately.

The peer is the reference approach: separate models (and optimizers) stepped one after the
other; its cost per model-step (a quarter of its step) is printed beside every ratio. Every
side does forward, backward and an Adam step of the PROTOCOLS §5 model on the 883 mod-47
training equations, under deterministic algorithms as ``run_twins`` does. The ensemble is timed
as ``run_twins`` builds it: member-native (every weight ``[E, …]``, batched matmuls, fused
attention on the members folded into the batch), eager (the default) and compiled
(``gaugelab twins --compile``: the native forward and its backward through ``torch.compile``);
the vmap ensemble (``native=False``, the path before the native one) is a third row. Targets:
eager ≥ 1.3×, compiled ≥ 1.6× the alternating models, and the compiled step's achieved GFLOP/s
(the peer's matmul FLOPs at the ensemble's median time) ≥ 60% of this machine's fp32 matmul
rate measured in the same run (1024 × 1024 products). Every side is warmed up (compilation
included) and all are timed interleaved (``gaugelab.cli.bench.time_calls``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gaugelab.cli.bench import matmul_rate, ratio_cell, time_calls
from gaugelab.determinism import deterministic
from gaugelab.experiments.twins.run import TwinSpec, build_members
from gaugelab.models import Ensemble
from gaugelab.optim import make_optimizer
from gaugelab.tasks import ModularArithmetic

TITLE = "twin step (forward + backward + adam): 4 members as one vs 4 models alternately"
COLUMNS = ["ensemble", "ensemble ms", "alternating ms (per model-step)",
           "ratio (alternating / ensemble)", "target", "GFLOP/step", "ensemble GFLOP/s",
           "of fp32 matmul rate (GFLOP/s)"]  # fmt: skip
KINDS = {  # name → (Ensemble options, ratio target, rate target)
    "native (eager, the default)": ({}, "≥ 1.3×", "—"),
    "native + compile": ({"compile": True}, "≥ 1.6×", "≥ 60%"),
    "vmap (native=False)": ({"native": False}, "—", "—"),
}


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
    for kind, (options, _, _) in KINDS.items():
        ensemble = Ensemble(members, **options)
        assert ensemble.native == options.get("native", True), kind
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
    peer = times["alternating"]
    peer_cell = f"{peer.cell(digits=0)} ({1e3 * peer.median / E:.1f})"
    rows = []
    for kind, (_, target, rate_target) in KINDS.items():
        achieved = flops / times[kind].median / 1e9
        share = f"{achieved / rate:.0%} of {rate:.0f}"
        rows.append([
            kind, times[kind].cell(digits=0), peer_cell, ratio_cell(peer, times[kind]), target,
            f"{flops / 1e9:.2f}", f"{achieved:.1f}",
            share if rate_target == "—" else f"{share} (target {rate_target})",
        ])  # fmt: skip
    return rows
