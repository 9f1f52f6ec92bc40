"""Forward + backward of E = 4 Transformers as one ensemble vs 4 models in a loop.

The peer is the nanoGPT-style per-model loop (eager). Two sizes: the PROTOCOLS §5 twin model on
the 883 mod-47 training equations (compute-bound: the ratio should not drop below 1 and the
achieved GFLOP/s is compared with this machine's fp32 matmul rate, measured in the same run), and
a small overhead-bound model (d_model 32, 128 equations) where batching should pay. Each size is
timed with the member-native ensemble (the default: every weight ``[E, …]``, batched matmuls,
fused attention with the members folded into the batch), eager and with
``Ensemble(compile=True)``, and with the vmap ensemble (``native=False``, the path before the
native one), eager and compiled; everything runs under
deterministic algorithms, as the twin protocol does. The first compiled call (compilation, tens
of seconds the first time on a machine) is not timed. A second peer, the loop over
``torch.compile``-d models, separates what batching gains from what compilation gains. Every
side is warmed up and the four are timed interleaved (``gaugelab.cli.bench.time_calls``); the
GFLOP/s are at the median time.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from gaugelab.cli.bench import matmul_rate, ratio_cell, time_calls
from gaugelab.determinism import deterministic, torch_compile
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.tasks import ModularArithmetic

TITLE = "ensemble forward+backward: E = 4 as one vs 4 models in a loop (float32)"
COLUMNS = ["model", "examples", "ensemble", "ensemble ms", "loop ms",
           "ratio (loop / ensemble)", "compiled loop ms", "ratio (compiled loop / ensemble)",
           "ensemble GFLOP/s",
           "of fp32 matmul rate (GFLOP/s; target ≥ 40%)"]  # fmt: skip
MEMBERS = 4
KINDS = {
    "native": {},
    "native + compile": {"compile": True},
    "vmap": {"native": False},
    "vmap + compile": {"native": False, "compile": True},
}
CASES = [
    ("§5 twin model (d 64)", {}, 883),
    ("small (d 32, 2 heads)", dict(d_model=32, n_heads=2, d_head=16, d_mlp=128), 128),
]


def _case(overrides: dict, n_examples: int, number: int, repeat: int, kinds: tuple[str, ...]):
    task = ModularArithmetic(p=47, train_fraction=0.4, seed=42)
    x, y = task.train_inputs[:n_examples], task.train_labels[:n_examples]
    models = [Transformer(TransformerConfig(causal=False, **overrides), seed=s) for s in range(4)]
    ensembles = {kind: Ensemble(models, **KINDS[kind]) for kind in kinds}

    def ensemble_step(ensemble):
        ensemble.zero_grad()
        logits = ensemble(x)[:, :, -1]  # [E, N, V]
        F.cross_entropy(logits.flatten(0, 1), y.repeat(MEMBERS), reduction="sum").backward()

    for m in models:  # validate once here, as the ensemble does per call, not inside the loop:
        m.validate_inputs(x)  # a compiled model would break its graph at the .item() checks
        m.check_inputs = False
    compiled = [torch_compile(m, dynamic=False) for m in models]

    def loop_step(forwards=models):
        for m, forward in zip(models, forwards, strict=True):
            m.zero_grad()
            F.cross_entropy(forward(x)[:, -1], y, reduction="sum").backward()

    with FlopCounterMode(display=False) as counter:
        loop_step()
    steps = {"loop": loop_step, "compiled loop": lambda: loop_step(compiled)}
    steps |= {k: (lambda e=e: ensemble_step(e)) for k, e in ensembles.items()}
    times = time_calls(steps, number=number, repeat=repeat)  # warm-up compiles
    return times, counter.get_total_flops()


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (1, 3) if quick else (3, 5)
    task = progress.add_task("ensemble", total=len(CASES) + 1) if progress else None
    # the vmap path is the native path's predecessor; --quick times only the native ensemble
    kinds = ("native", "native + compile") if quick else tuple(KINDS)
    with deterministic():
        rate = matmul_rate(5 if quick else 20)
        if progress:
            progress.advance(task)
        rows = []
        for label, overrides, n in CASES:
            times, flops = _case(overrides, n, number, repeat, kinds)
            for kind in kinds:
                gflops = flops / times[kind].median / 1e9
                rows.append(
                    [label, n, kind, times[kind].cell(digits=1), times["loop"].cell(digits=1),
                     ratio_cell(times["loop"], times[kind]),
                     times["compiled loop"].cell(digits=1),
                     ratio_cell(times["compiled loop"], times[kind]), f"{gflops:.1f}",
                     f"{gflops / rate:.0%} of {rate:.0f}"]
                )  # fmt: skip
            if progress:
                progress.advance(task)
    return rows
