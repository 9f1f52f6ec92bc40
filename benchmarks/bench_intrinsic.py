"""Intrinsic dimension: the Fastfood projection against the dense one (seed 003 §0x02C–D).

One forward ``P u`` plus one adjoint ``Pᵀ g`` (what a DID training step costs beyond the model),
float32, at D = 10⁶, d = 10³: ``gaugelab.lowrank.intrinsic.protocol.FastfoodProjection`` (``O(D)``
state,
``O(D log d)`` time, our own FWHT) against ``DenseProjection`` (the ``[D, d]`` unit-column
Gaussian matrix, 4 GB, one matrix–vector product each way) — targets: time ≥ 10×, memory
≥ 100×. Then Fastfood alone at D = 10⁷ (the dense matrix would hold 40 GB). ``--quick``: D =
10⁵, d = 10² against dense, and Fastfood alone at D = 10⁶.

Memory is the map's state (the tensors that define it: the matrix; or signs, diagonal and
permutations) plus the peak of live torch allocations during one forward + adjoint, as
``torch.profiler`` records them (``profile_memory=True``: every op's own allocations and frees,
in time order). Both sides are checked against each other's definition first: each map's
adjoint passes the parity ``⟨g, P v⟩ = ⟨Pᵀ g, v⟩`` (relative defect below 1e-4 in float32).
"""

from __future__ import annotations

import torch

from gaugelab.cli.bench import peak_mib, ratio_cell, time_calls
from gaugelab.lowrank.intrinsic.protocol import DenseProjection, FastfoodProjection, adjoint_defect

TITLE = "Intrinsic dimension: Fastfood forward + adjoint vs the dense projection"
COLUMNS = [
    "case",
    "ours",
    "ours ms",
    "peer",
    "peer ms",
    "ratio (peer / ours)",
    "target",
    "memory ours / peer (MiB)",
    "memory ratio (peer / ours)",
]


def _step(P, u, g):
    def call():
        P.forward(u)
        P.adjoint(g)

    return call


def _memory(P, u, g) -> float:
    return P.state_bytes() / 2**20 + peak_mib(_step(P, u, g))[0]


def _inputs(D: int, d: int):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(d, generator=gen), torch.randn(D, generator=gen)


def _check(P) -> None:
    defect = adjoint_defect(P, probes=2)
    if not defect < 1e-4:
        raise RuntimeError(f"bench intrinsic: {P.identity.family} adjoint defect {defect:.2e}")


QUICK_CAVEAT = "quick sizes: not comparable with the target"
"""Said beside the targets under ``--quick`` (the targets are for D = 10⁶, d = 10³)."""


def _versus_dense(D: int, d: int, repeat: int, caveat: str = "") -> list:
    fast = FastfoodProjection(D, d, seed=0)
    dense = DenseProjection(D, d, seed=0)  # [D, d] float32, unit-norm columns
    for P in (fast, dense):
        _check(P)
    u, g = _inputs(D, d)
    t = time_calls(
        {"fastfood": _step(fast, u, g), "dense": _step(dense, u, g)}, number=1, repeat=repeat
    )
    mem_fast, mem_dense = _memory(fast, u, g), _memory(dense, u, g)
    del dense
    return [
        f"D={D:.0e}, d={d}",
        "fastfood",
        t["fastfood"].cell(),
        "dense",
        t["dense"].cell(),
        ratio_cell(t["dense"], t["fastfood"]),
        f"≥ 10× ({caveat})" if caveat else "≥ 10×",
        f"{mem_fast:.1f} / {mem_dense:.0f}",
        f"{mem_dense / mem_fast:.0f}×  (≥ 100×{'; ' + caveat if caveat else ''})",
    ]


def _alone(D: int, d: int, repeat: int) -> list:
    fast = FastfoodProjection(D, d, seed=0)
    u, g = _inputs(D, d)
    t = time_calls({"fastfood": _step(fast, u, g)}, number=1, repeat=repeat)
    dense_gib = D * d * 4 / 2**30
    return [
        f"D={D:.0e}, d={d}",
        "fastfood",
        t["fastfood"].cell(),
        f"dense (not run: {dense_gib:.2g} GiB)",
        "—",
        "—",
        "—",
        f"{_memory(fast, u, g):.0f} / —",
        "—",
    ]


def run(*, quick: bool = False, progress=None) -> list[list]:
    cases = ((10**5, 100), (10**6, 100)) if quick else ((10**6, 1000), (10**7, 1000))
    task = progress.add_task("intrinsic", total=2) if progress else None
    rows = [_versus_dense(*cases[0], repeat=3, caveat=QUICK_CAVEAT if quick else "")]
    if progress:
        progress.advance(task)
    rows.append(_alone(*cases[1], repeat=3))
    if progress:
        progress.advance(task)
    return rows
