"""The twin study's figures: one panel per optimizer, each twin's distance to its base.

Plain functions of the read-back rows (:class:`~gaugelab.experiments.twins.results.TwinRow`);
every figure is drawn on a ``matplotlib.figure.Figure`` with the Agg canvas, never through
pyplot's global state. One colour per optimizer (:func:`optimizer_colors`) across every figure
of a report.

Source: singh2026lossbasis, §6 (the twin divergence curves); docs/protocols.md §5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gaugelab.experiments.twins.results import TwinRow

if TYPE_CHECKING:
    from matplotlib.figure import Figure
from gaugelab.lazy import LazyModule
from gaugelab.study.report import builder as rep

_agg = LazyModule("matplotlib.backends.backend_agg")
_mpl_figure = LazyModule("matplotlib.figure")
_mpl_lines = LazyModule("matplotlib.lines")

# matplotlib is imported by twin_panels, which draws: reading a study back needs none of it.

__all__ = ["distance_figure", "optimizer_colors", "twin_panels"]


def optimizer_colors(rows: Sequence[TwinRow]) -> dict[str, str]:
    """One colour per optimizer (in the study's order), the same in every figure of a report."""
    return rep.palette([row.optimizer for row in rows])


_STYLES = {"gauge": "-", "noise": "--", "identity": "-."}


def twin_panels(
    rows: Sequence[TwinRow],
    metric: str = "logit_distance",
    *,
    colors: dict[str, str] | None = None,
) -> Figure:
    """One panel per optimizer: each twin's distance to its base against step (log–log).

    The gauge twin is solid and the noise twin dashed, both in the optimizer's colour (further
    init × gauge-draw pairs thinner); the horizontal line is the noise floor, the median of the
    optimizer's noise twins at step 1 (dotted). An identity twin is drawn (dash-dotted) only
    where it is not exactly 0. Panels share the y axis, so optimizers compare at a glance.

    Args:
        rows: the study's rows.
        metric: ``"logit_distance"`` (:attr:`TwinRow.distances`) or ``"qk_drift"``
            (:attr:`TwinRow.qk_series`, the mean over layer × head).
        colors: optimizer → colour (default :func:`optimizer_colors`).

    Returns:
        A ``matplotlib.figure.Figure`` on an Agg canvas (for
        :func:`gaugelab.study.report.builder.save_figure`).

    Raises:
        ValueError: an unknown ``metric``, or no row.
    """
    if metric not in ("logit_distance", "qk_drift"):
        raise ValueError(f"twin_panels: metric={metric!r}; allowed: logit_distance, qk_drift")
    if not rows:
        raise ValueError("twin_panels: rows is empty")

    colors = colors or optimizer_colors(rows)
    optimizers = list(dict.fromkeys(row.optimizer for row in rows))
    ncols = min(4, len(optimizers))
    nrows = math.ceil(len(optimizers) / ncols)
    fig = _mpl_figure.Figure(figsize=(3.3 * ncols, 2.7 * nrows + 0.7), layout="constrained")
    _agg.FigureCanvasAgg(fig)  # a display-free canvas; pyplot's global state is never touched
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).flatten()
    for ax, optimizer in zip(axes, optimizers, strict=False):
        color, floors = colors[optimizer], []
        for row in (r for r in rows if r.optimizer == optimizer):
            series = row.distances if metric == "logit_distance" else row.qk_series
            for kind, by_step in series.items():
                steps = sorted(s for s in by_step if s >= 1 and by_step[s] > 0)
                if not steps:
                    continue  # an identity twin at exactly 0 has nothing to show on a log axis
                ax.plot(steps, [by_step[s] for s in steps], color=color, marker=".",
                        linestyle=_STYLES.get(kind, "-."), linewidth=1.5 if row.pair == 0 else 0.8,
                        alpha=1.0 if row.pair == 0 else 0.6)  # fmt: skip
            noise = {s: v for s, v in series.get("noise", {}).items() if s >= 1 and v > 0}
            if noise:
                floors.append(noise[min(noise)])  # the noise twin at step 1
        if floors:
            ax.axhline(sorted(floors)[len(floors) // 2], color="0.45", linestyle=":", linewidth=1)
        ax.set_title(optimizer, color=color, fontsize="medium")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[len(optimizers) :]:
        ax.set_visible(False)
    for ax in axes[(nrows - 1) * ncols :]:
        ax.set_xlabel("step")
    label = "relative logit distance" if metric == "logit_distance" else "mean QK drift"
    for ax in axes[::ncols]:
        ax.set_ylabel(label)
    handles = [
        _mpl_lines.Line2D([], [], color="0.2", linestyle="-", label="gauge twin"),
        _mpl_lines.Line2D([], [], color="0.2", linestyle="--", label="noise twin"),
        _mpl_lines.Line2D(
            [], [], color="0.45", linestyle=":", label="noise floor (noise twin at step 1)"
        ),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize="small")
    title = ("Twin divergence: each twin's validation logits against its base's"
             if metric == "logit_distance" else
             "QK drift: each twin's W_Q[h] W_K[h]ᵀ against its base's")  # fmt: skip
    fig.suptitle(title, fontsize="medium")
    return fig


def distance_figure(rows: Sequence[TwinRow]) -> Figure:
    """The logit-distance panels (:func:`twin_panels`) of ``rows``."""
    return twin_panels(rows, "logit_distance")
