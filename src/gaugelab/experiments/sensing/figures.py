"""Figures of the zoo and the dial: one colour per rule, arm or reference line throughout.

The zoo: recovery error against effective rank per seed, the recovered singular spectra, and
the loss curves at each rule's chosen rate. The dial: recovery error and effective rank against
p, per-p and fixed-rate arms with the gd and planted references. Each figure is saved as PNG +
SVG (:func:`gaugelab.study.report.figures.save_figure`) into the report folder;
:mod:`gaugelab.experiments.sensing.views` puts them in the report.

Source: singh2026lossbasis, §5 (zoo) and the Adam-p dial; docs/protocols.md §3–§4.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gaugelab.experiments.sensing.convex import CONVEX
from gaugelab.experiments.sensing.problem import (
    COORDINATEWISE_CLASS,
    EQUIVARIANT_CLASS,
    SensingBatch,
    finite_mean,
)
from gaugelab.experiments.sensing.results import DialResult, ZooResult
from gaugelab.lazy import LazyModule
from gaugelab.study.report.figures import palette, plot_curves, plot_scatter, save_figure

_mpl = LazyModule("matplotlib")
_mpl_colors = LazyModule("matplotlib.colors")

__all__ = ["dial_colors", "dial_figures", "rule_colors", "zoo_figures"]


_MARKERS = {EQUIVARIANT_CLASS: "o", COORDINATEWISE_CLASS: "^", "convex": "D"}


def rule_colors(result: ZooResult) -> dict[str, str]:
    """One colour per rule (and the convex row), in table order, for every zoo figure."""
    return palette([*result.spec.rules, CONVEX])


def zoo_figures(result: ZooResult, directory: Path) -> list:
    """Recovery against effective rank per rule, singular spectra, and loss curves; each rule
    has one colour in all three (:func:`rule_colors`)."""
    figures = []
    colors = rule_colors(result)
    rows = result.rows + ([result.convex] if result.convex is not None else [])
    points = [
        {"effective rank": er, "recovery error": rec, "rule": r.rule}
        for r in rows
        for rec, er in zip(r.recovery, r.effective_rank, strict=True)
    ]
    if points:
        fig = plot_scatter(
            points,
            x="effective rank",
            y="recovery error",
            color_by="rule",
            title="recovery error against effective rank (per seed)",
            colors=colors,
            markers={r.rule: _MARKERS[r.klass] for r in rows},
            legend_outside=True,  # a legend, not labels on the points: nothing overlaps
        )
        ax = fig.axes[0]
        for r in rows:
            if r.recovery:
                mean = (finite_mean(r.effective_rank), finite_mean(r.recovery))
                ax.scatter(*mean, marker="x", color=colors[r.rule], s=40, linewidths=1.2)
        figures.append(
            save_figure(
                fig,
                directory,
                "recovery_vs_effective_rank",
                caption="each point a seed at the rule's chosen rate, × the rule's mean; "
                "○ orthogonally equivariant, △ coordinatewise, ◇ the convex row",
            )
        )
    batch = SensingBatch.build(result.spec)
    target = torch.linalg.svdvals(batch.target.double()).mean(0).tolist()
    series = {"target": (list(range(1, len(target) + 1)), target)}
    for r in rows:
        if r.spectra:
            mean = [sum(col) / len(col) for col in zip(*r.spectra, strict=True)]
            series[r.rule] = (list(range(1, len(mean) + 1)), mean)
    fig = plot_curves(
        series,
        title="singular values of the recovered U Vᵀ (mean over seeds)",
        xlabel="index",
        ylabel="singular value",
        logy=True,
        colors={**colors, "target": "black"},
    )
    ax = fig.axes[0]
    ax.lines[0].set(linestyle="--")  # the target, apart from the rules
    ax.legend(fontsize="small", ncols=2)
    figures.append(save_figure(fig, directory, "spectra", caption="dashed: the target X*"))
    curves = {}
    for r in result.rows:
        j = r.choice.index
        if j is not None and r.grid.curve_steps:
            loss = [finite_mean([seed[j] for seed in c]) or float("nan") for c in r.grid.curve_loss]
            curves[r.rule] = (r.grid.curve_steps, loss)
    if curves:
        fig = plot_curves(
            curves,
            title="train loss at the chosen rate (mean over seeds)",
            xlabel="step",
            ylabel="loss",
            logy=True,
            hlines={"interpolation": result.spec.interpolation_loss},
            colors={**colors, "interpolation": "grey"},
        )
        figures.append(
            save_figure(
                fig,
                directory,
                "loss_curves",
                caption="at each check step s the loss the interpolation check reads: the "
                "pre-update loss of step s",
            )
        )
    return figures


def dial_colors(result: DialResult) -> dict[str, str]:
    """One colour per line of the dial's figures: the per-p arm black, each shared rate a
    shade of viridis (ordered like the rates), gd red, the planted rank grey."""
    lrs = result.spec.lrs
    shades = _mpl.colormaps["viridis"]
    colors = {"per-p rate": "black", "gd": "#d62728", "planted": "#7f7f7f"}
    for j, lr in enumerate(lrs):
        colors[f"fixed lr {lr:g}"] = _mpl_colors.to_hex(
            shades(0.1 + 0.75 * j / max(len(lrs) - 1, 1))
        )
    return colors


def dial_figures(result: DialResult, directory: Path) -> list:
    """Recovery error and effective rank against p: per-p arm, fixed-rate arms, references;
    each line has one colour in both figures (:func:`dial_colors`)."""
    figures = []
    colors = dial_colors(result)
    ps = [pt.p for pt in result.points]
    for metric, index, name in (
        ("recovery error", 0, "recovery"),
        ("effective rank", 1, "effective_rank"),
    ):
        series = {}
        if result.points:
            values = [
                pt.mean_recovery if index == 0 else pt.mean_effective_rank for pt in result.points
            ]
            series["per-p rate"] = (ps, values)
            for j, lr in enumerate(result.spec.lrs):
                series[f"fixed lr {lr:g}"] = (ps, [pt.at_rate(j)[index] for pt in result.points])
        hlines = {}
        if result.gd is not None:
            gd = result.gd
            hlines["gd"] = gd.mean_recovery if index == 0 else gd.mean_effective_rank
        if index == 1:
            hlines["planted"] = result.planted_effective_rank
        if not series:
            continue
        fig = plot_curves(
            series,
            title=f"Adam-p dial: {metric} against p",
            xlabel="p",
            ylabel=metric,
            hlines=hlines,
            colors=colors,
        )
        ax = fig.axes[0]
        ax.lines[0].set(linewidth=2.4, marker="o", zorder=5)  # the per-p arm
        for line in ax.lines[1 : 1 + len(result.spec.lrs)]:
            line.set(linewidth=1.0, alpha=0.75, marker=".")
        ax.legend(fontsize="small")
        caption = "black: per-p rate (the protocol's selection); thin: one shared rate"
        figures.append(save_figure(fig, directory, f"dial_{name}", caption=caption))
    return figures
