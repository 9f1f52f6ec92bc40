"""msign: 5-step Newton–Schulz against the exact SVD polar factor (the peer), float32.

Both are warmed up and timed interleaved (``gaugelab.cli.bench.time_calls``).
"""

from __future__ import annotations

import torch

from gaugelab.cli.bench import ratio_cell, time_calls
from gaugelab.linalg import msign

TITLE = "msign: Newton–Schulz (5 steps) vs SVD, float32"
COLUMNS = ["shape", "newton_schulz ms", "svd ms", "ratio (svd / newton_schulz)"]
SHAPES = [(40, 40), (256, 256), (8, 40, 40)]


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (3, 5) if quick else (10, 7)
    gen = torch.Generator().manual_seed(0)
    task = progress.add_task("msign", total=len(SHAPES)) if progress else None
    rows = []
    for shape in SHAPES:
        X = torch.randn(*shape, generator=gen)
        t = time_calls(
            {m: (lambda m=m, x=X: msign(x, method=m)) for m in ("newton_schulz", "svd")},
            number=number,
            repeat=repeat,
        )
        ns, svd = t["newton_schulz"], t["svd"]
        rows.append([" × ".join(map(str, shape)), ns.cell(), svd.cell(), ratio_cell(svd, ns)])
        if progress:
            progress.advance(task)
    return rows
