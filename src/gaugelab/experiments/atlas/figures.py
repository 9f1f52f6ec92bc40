"""The atlas's figure: per optimizer, the gauge twin's distance after one step beside the noise
floor, on a log scale — how far above round-off each optimizer's basis dependence lies.

Source: singh2026lossbasis, §6 (the noise twin as the floor); docs/commands/atlas.md.
"""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gaugelab.experiments.atlas.results import AtlasResult
from gaugelab.study.report import builder as rep

FLOOR = 1e-18
"""Where a distance of exactly 0 is drawn (a log axis has no 0): below float64 round-off."""


def distance_figure(result: AtlasResult) -> Figure:
    """One line per optimizer (top: the largest step-1 gauge / noise ratio): a filled marker
    at the step-1 gauge twin distance and a hollow one at the noise twin's, one colour per
    group / problem, x on a log scale; exact zeros at :data:`FLOOR`.

    Raises:
        ValueError: no row of ``result`` has measured distances.
    """
    rows = [r for r in result.rows if r.gauge is not None and r.noise is not None]
    if not rows:
        raise ValueError("distance_figure: no check of the atlas measured its twins")
    best: dict[str, float] = {}
    for r in rows:
        best[r.optimizer] = max(best.get(r.optimizer, 0.0), r.gauge / max(r.noise, FLOOR))
    names = sorted(best, key=lambda n: (best[n], n))  # bottom to top
    place = {n: i for i, n in enumerate(names)}
    cells = list(dict.fromkeys(r.cell for r in rows))
    colors = rep.palette(cells)
    fig = Figure(figsize=(9, 1.4 + 0.28 * len(names)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    offsets = {c: (i - (len(cells) - 1) / 2) * 0.12 for i, c in enumerate(cells)}
    for cell in cells:
        mine = [r for r in rows if r.cell == cell]
        y = [place[r.optimizer] + offsets[cell] for r in mine]
        ax.scatter([max(r.gauge, FLOOR) for r in mine], y, s=22, color=colors[cell],
                   label=f"{cell}: gauge twin")  # fmt: skip
        ax.scatter([max(r.noise, FLOOR) for r in mine], y, s=22, facecolors="none",
                   edgecolors=colors[cell], label=f"{cell}: noise floor")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yticks(range(len(names)), [n.partition(":")[2] or n for n in names], fontsize=8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set(xlabel="relative Frobenius distance to the base after one step (max over draws)",
           title=f"{result.spec.dtype}: gauge twin (filled) vs noise floor (hollow)")  # fmt: skip
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


__all__ = ["FLOOR", "distance_figure"]
