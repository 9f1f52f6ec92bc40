"""Subspace similarity of two adapters in factor space against forming every update densely.

Two synthetic rank-64 adapters (seeded) over 32 modules of 4096 × 4096 (``--quick``: 8 modules
of 1024 × 1024), float32, ``ΔW = s·B A``. *Ours*:
``gaugelab.lowrank.subspaces.compare.compare_updates``
— row and column principal angles of every module (QR of ``B`` and ``Aᵀ``, SVD of the small
core, cosines from the cross matrix, sines from the residual), batched 2 modules at a time;
``B A`` is never formed. *Peer*: per module, form both ``B A`` (numpy) and call
``scipy.linalg.subspace_angles`` on the two updates (column spaces) and on their transposes (row
spaces), which orthonormalises each by a dense SVD. The peer is timed on two modules and its
time extrapolated linearly to all of them (printed as such); ours is timed on all of them. The
second adapter shares half of the first's directions (B_2 = [B_1[:, :32], fresh], the same for
A), so the angles span 0 to 90°.

Ours skips the factors' own spans (``factor_spans=False``): the peer has no such thing. The
first repeat is the warm-up of neither side (``warmup=0``): a dense SVD of this size does not
warm up, and every repeat costs the peer minutes. Peak memory: ours is the peak of live torch
allocations during one call on all modules (``torch.profiler``, as ``bench_lora``); the peer's
is the peak that ``tracemalloc`` records during one module (numpy registers its data buffers,
LAPACK work arrays included, with it) — the peer's peak does not grow with the module count, it
runs one module at a time. The inputs (the factors) exist before either call and are not
counted. Both sides' angles are compared on the peer's two modules: the largest absolute
difference (radians, float32 inputs) is printed. It is the peer's error: on one 1024 × 1024 module
against float64 angles, ours was within 1.6e-6 rad and the peer 7.7e-4 rad off, on the shared
directions (true angle 0), which a float32 dense SVD resolves only to about √eps.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import scipy.linalg
import torch

from gaugelab.cli.bench import peak_mib, ratio_cell, time_calls
from gaugelab.lowrank.subspaces.compare import compare_updates

TITLE = "Subspace similarity: factor-space principal angles vs forming B A + scipy"
COLUMNS = ["case", "ours s", "peer s (extrapolated)", "ratio (peer / ours)", "target",
           "peak MiB ours / peer", "memory ratio", "target", "max |Δθ| (rad)"]  # fmt: skip
RANK = 64
SCALE = 2.0
CHUNK = 2  # modules per batched call of ours


def _adapters(modules: int, n: int) -> tuple[tuple, tuple]:
    g = torch.Generator().manual_seed(0)
    B1, A1 = torch.randn(modules, n, RANK, generator=g), torch.randn(modules, RANK, n, generator=g)
    half = RANK // 2
    B2 = torch.cat([B1[..., :half], torch.randn(modules, n, half, generator=g)], dim=-1)
    A2 = torch.cat([A1[..., :half, :], torch.randn(modules, half, n, generator=g)], dim=-2)
    return (B1, A1), (B2, A2)


def _ours(first, second, upto: int | None = None):
    (B1, A1), (B2, A2) = first, second
    total = B1.shape[0] if upto is None else upto
    out = []
    for i in range(0, total, CHUNK):
        j = min(i + CHUNK, total)
        rep = compare_updates((B1[i:j], A1[i:j], SCALE), (B2[i:j], A2[i:j], SCALE),
                              factor_spans=False)  # fmt: skip
        out.append((rep.row.angles, rep.column.angles))
    return out


def _peer_module(first, second, i: int):
    (B1, A1), (B2, A2) = first, second
    D1 = SCALE * (B1[i].numpy() @ A1[i].numpy())  # [n, n], the dense update
    D2 = SCALE * (B2[i].numpy() @ A2[i].numpy())
    column = scipy.linalg.subspace_angles(D1, D2)
    row = scipy.linalg.subspace_angles(D1.T, D2.T)
    return np.sort(row), np.sort(column)


def _peer(first, second, modules: int):
    return [_peer_module(first, second, i) for i in range(modules)]


def _numpy_peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run(*, quick: bool = False, progress=None) -> list[list]:
    modules, n, repeat = (8, 1024, 3) if quick else (32, 4096, 2)
    peer_modules = 2
    task = progress.add_task("subspace", total=repeat + 2) if progress else None
    first, second = _adapters(modules, n)
    last: dict[str, list] = {}

    def keep(name, fn):
        def call():
            last[name] = fn()

        return call

    times = time_calls(
        {"ours": keep("ours", lambda: _ours(first, second)),
         "peer": keep("peer", lambda: _peer(first, second, peer_modules))},
        number=1, repeat=repeat, warmup=0,
        progress=(lambda: progress.advance(task)) if progress else None,
    )  # fmt: skip
    ours, peer = last["ours"], last["peer"]
    diff = 0.0
    for i in range(peer_modules):
        row, column = ours[i // CHUNK][0][i % CHUNK], ours[i // CHUNK][1][i % CHUNK]
        diff = max(diff, float(np.abs(row.double().numpy() - peer[i][0]).max()),
                   float(np.abs(column.double().numpy() - peer[i][1]).max()))  # fmt: skip
    scale = modules / peer_modules
    peer_all = type(times["peer"])(tuple(s * scale for s in times["peer"].samples))
    mine, _ = peak_mib(lambda: _ours(first, second))
    if progress:
        progress.advance(task)
    theirs = _numpy_peak_mib(lambda: _peer_module(first, second, 0))
    if progress:
        progress.advance(task)
    case = (f"{modules} modules {n}×{n}, r = {RANK}, row + column angles; peer timed on "
            f"{peer_modules} modules × {scale:.0f}")  # fmt: skip
    return [[case, times["ours"].cell(scale=1.0), peer_all.cell(scale=1.0),
             ratio_cell(peer_all, times["ours"], digits=0), "≥ 50×",
             f"{mine:.1f} / {theirs:.0f}", f"{theirs / mine:.0f}×" if mine > 0 else "—",
             "≥ 20×", f"{diff:.2e}"]]  # fmt: skip
