"""Forward + backward of E = 4 Transformers as one ensemble vs 4 models in a loop.

The peer is the nanoGPT-style per-model loop. Two sizes: the PROTOCOLS §5 twin model on the
883 mod-47 training equations (compute-bound: the ratio should not drop below 1 and the achieved
GFLOP/s is compared with this machine's fp32 matmul rate, measured in the same run), and a
small overhead-bound model (d_model 32, 128 equations) where batching should pay.
"""

from __future__ import annotations

import timeit

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gaugelab.cli.bench import matmul_rate
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.tasks import ModularArithmetic

TITLE = "ensemble forward+backward: E = 4 as one vs 4 models in a loop (float32)"
COLUMNS = [
    "model",
    "examples",
    "ensemble ms",
    "loop ms",
    "ratio (loop / ensemble)",
    "ensemble GFLOP/s",
    "of fp32 matmul rate",
]
MEMBERS = 4


def _case(config: TransformerConfig, n_examples: int, number: int, repeat: int):
    task = ModularArithmetic(p=47, train_fraction=0.4, seed=42)
    x, y = task.train_inputs[:n_examples], task.train_labels[:n_examples]
    models = [Transformer(config, seed=s) for s in range(MEMBERS)]
    ensemble = Ensemble(models)

    def ensemble_step():
        ensemble.zero_grad()
        logits = ensemble(x)[:, :, -1]  # [E, N, V]
        F.cross_entropy(logits.flatten(0, 1), y.repeat(MEMBERS), reduction="sum").backward()

    def loop_step():
        for m in models:
            m.zero_grad()
            F.cross_entropy(m(x)[:, -1], y, reduction="sum").backward()

    with FlopCounterMode(display=False) as counter:
        loop_step()
    flops = counter.get_total_flops()
    times = {}
    for name, fn in (("ensemble", ensemble_step), ("loop", loop_step)):
        fn()
        times[name] = min(timeit.repeat(fn, number=number, repeat=repeat)) / number
    return times["ensemble"], times["loop"], flops / times["ensemble"] / 1e9


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (2, 2) if quick else (5, 3)
    cases = [
        ("§5 twin model (d 64)", TransformerConfig(causal=False), 883),
        (
            "small (d 32, 2 heads)",
            TransformerConfig(causal=False, d_model=32, n_heads=2, d_head=16, d_mlp=128),
            128,
        ),
    ]
    task = progress.add_task("ensemble", total=len(cases) + 1) if progress else None
    rate = matmul_rate(5 if quick else 20)
    if progress:
        progress.advance(task)
    rows = []
    for label, config, n in cases:
        ens, loop, gflops = _case(config, n, number, repeat)
        rows.append(
            [label, n, f"{1e3 * ens:.1f}", f"{1e3 * loop:.1f}", f"{loop / ens:.2f}×",
             f"{gflops:.1f}", f"{gflops / rate:.0%} of {rate:.0f}"]
        )  # fmt: skip
        if progress:
            progress.advance(task)
    return rows
