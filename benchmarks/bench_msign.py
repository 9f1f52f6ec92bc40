"""msign: 5-step Newton–Schulz against the exact SVD polar factor (the peer), float32."""

from __future__ import annotations

import timeit

import torch

from gaugelab.linalg import msign

TITLE = "msign: Newton–Schulz (5 steps) vs SVD, float32"
COLUMNS = ["shape", "newton_schulz ms", "svd ms", "ratio (svd / newton_schulz)"]
SHAPES = [(40, 40), (256, 256), (8, 40, 40)]


def run(*, quick: bool = False, progress=None) -> list[list]:
    number, repeat = (5, 3) if quick else (20, 5)
    gen = torch.Generator().manual_seed(0)
    task = progress.add_task("msign", total=len(SHAPES)) if progress else None
    rows = []
    for shape in SHAPES:
        X = torch.randn(*shape, generator=gen)
        times = {}
        for method in ("newton_schulz", "svd"):
            msign(X, method=method)  # warm-up
            best = min(
                timeit.repeat(
                    lambda m=method, x=X: msign(x, method=m), number=number, repeat=repeat
                )
            )
            times[method] = best / number
        ns, svd = times["newton_schulz"], times["svd"]
        label = " × ".join(map(str, shape))
        rows.append([label, f"{1e3 * ns:.3f}", f"{1e3 * svd:.3f}", f"{svd / ns:.1f}×"])
        if progress:
            progress.advance(task)
    return rows
