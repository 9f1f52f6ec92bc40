"""The learning–forgetting study's figures: gain against forgetting, the full update's rank.

Source: biderman2024lora (Fig. 3: learning against forgetting; Fig. 6: the full update's
90%-energy rank per layer); seed 003 §0x0BE–0x0BF, §0x0BS.
"""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gaugelab.experiments.learn_forget.results import LearnForgetResult
from gaugelab.experiments.lora.spec import ALL_TARGETS
from gaugelab.study.report import builder as rep

__all__ = ["energy_figure", "pareto_figure"]


def pareto_figure(result: LearnForgetResult) -> Figure:
    """Target gain against forgetting on validation (block a): one colour per candidate, the
    frontier ringed, the selected candidate a star, the gates dashed (when inside the view),
    the base a square at the origin."""
    fig = Figure(figsize=(7.2, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    m, decision = result.measured["a"], result.decision
    colors = rep.palette([r.candidate_id for r in m.records])
    for r in m.records:
        op = r.operational
        on_front = decision is not None and r.candidate_id in decision.frontier
        chosen = decision is not None and decision.chosen == r.candidate_id
        ax.scatter(
            [op.forgetting],
            [op.target_gain],
            marker="*" if chosen else ("s" if r.method == "base" else "o"),
            color=colors[r.candidate_id],
            s=180 if chosen else 50,
            edgecolors="k" if on_front else "none",
            linewidths=1.2,
            label=r.candidate_id + (" (selected)" if chosen else ""),
            zorder=4 if chosen else 3,
        )
    xlim, ylim = ax.get_xlim(), ax.get_ylim()  # the data's view: far gates are not drawn
    spec = result.spec
    ax.axhline(spec.min_target_gain, color="0.5", linestyle="--", linewidth=1)
    ax.axvline(spec.max_forgetting, color="0.5", linestyle="--", linewidth=1)
    ax.set_xlim(xlim)
    ax.set_ylim(ylim)
    ax.set(
        xlabel="forgetting: retention val loss − base (nats/char)",
        ylabel="target gain: base − target val loss (nats/char)",
        title="Learning against forgetting (validation, block a)",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def energy_figure(result: LearnForgetResult) -> Figure:
    """The full update's r_0.9 against layer, one line per projection (attention solid, MLP
    dashed), one panel per checkpoint (the Biderman Fig. 6 analog)."""
    energy = result.measured["a"].energy
    steps = sorted(energy)
    fig = Figure(figsize=(3.2 * len(steps) + 1.2, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(steps), sharey=True, squeeze=False)[0]
    names = [n for n in ALL_TARGETS if any(p.endswith("." + n) for r in energy.values() for p in r)]
    colors = rep.palette(names)
    layers = sorted({int(p.split(".")[1]) for r in energy.values() for p in r})
    for ax, step in zip(axes, steps, strict=True):
        for name in names:
            points = sorted(
                (int(p.split(".")[1]), v) for p, v in energy[step].items() if p.endswith("." + name)
            )
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                linestyle="--" if name.startswith("fc_") else "-",
                color=colors[name],
                label=name,
            )
        ax.set(title=f"step {step}", xlabel="layer", xticks=layers)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("$r_{0.9}$ of the full update")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize="x-small", loc="outside right")
    return fig
