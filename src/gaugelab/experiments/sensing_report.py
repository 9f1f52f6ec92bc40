"""Tables, figures and HTML reports of the zoo and the dial (through ``gaugelab.study.report``).

The tables are :class:`gaugelab.study.report.Table` objects, shown by the CLI as rich tables and
by the report as HTML; figures are matplotlib figures saved as PNG + SVG.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from gaugelab.experiments._convex import CONVEX, CONVEX_SKIPPED
from gaugelab.experiments._sensing import COORDINATEWISE_CLASS, EQUIVARIANT_CLASS, SensingBatch
from gaugelab.experiments._study import paired_cells, paired_columns
from gaugelab.experiments._training import DIVERGED, INTERPOLATED
from gaugelab.study.paired import paired_differences
from gaugelab.study.report import (
    Failure,
    StudyReport,
    Table,
    format_number,
    palette,
    plot_curves,
    plot_scatter,
    save_figure,
    write_report,
)

if TYPE_CHECKING:  # the experiment modules import this one
    from gaugelab.experiments.dial import DialResult
    from gaugelab.experiments.zoo import ZooResult, ZooRow

__all__ = ["dial_report", "dial_tables", "zoo_report", "zoo_tables"]

_GRID_NOTE = (
    "The learning-rate grids are ours (the reference grids are not published); the rate is "
    "the protocol's: lowest mean recovery among rates whose worst seed interpolates. "
    "⚑: no rate interpolated on every seed; the lowest mean recovery among non-diverged "
    "rates is shown."
)


def _seeds(xs: list[float]) -> str:
    return " / ".join(format_number(x) for x in xs) if xs else "—"


def _mean(xs: list[float]) -> float | None:
    finite = [x for x in xs if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else None


def _row(row: ZooRow, claim: str) -> list:
    flag = "" if row.choice.interpolated else "⚑"
    convex = row.rule == CONVEX
    lr = None if row.choice.lr is None or convex else f"{row.choice.lr:g}"
    schedule = "—" if convex else "cosine" if row.decayed else "constant"
    steps = "—" if convex else " / ".join(str(s) for s in row.steps) or "—"
    return [
        row.rule,
        claim,
        lr,
        schedule,
        _mean(row.recovery),
        _seeds(row.recovery),
        _mean(row.loss),
        _mean(row.effective_rank),
        _mean(row.balancedness),
        steps,
        flag,
    ]


def paired_table(
    title: str, arms: list[tuple[str, list[int], list[float], list[float]]]
) -> Table | None:
    """Seed-paired differences ``a − b`` of recovery error, one row per ``(label, seeds, a, b)``
    (arms with a non-finite or missing value are left out); ``None`` when no row remains."""
    rows = []
    for label, seeds, a, b in arms:
        if not a or not b or not all(math.isfinite(x) for x in [*a, *b]):
            continue
        comparison = paired_differences(dict(zip(seeds, a, strict=True)),
                                        dict(zip(seeds, b, strict=True)))  # fmt: skip
        rows.append([label, *paired_cells(comparison)])
    if not rows:
        return None
    return Table(
        title,
        ["comparison", *paired_columns()],
        rows,
        caption="each seed's recovery error difference at the arms' chosen rates; the "
        "interval is a paired bootstrap over seeds (none for a single seed: range only)",
    )


def zoo_tables(result: ZooResult) -> list[Table]:
    """The zoo table, the split verdict, the per-rate grid (the evidence of the selection) and
    each rule's seed-paired difference from gd."""
    columns = [
        "rule",
        "O(k) claim",
        "lr",
        "schedule",
        "mean recovery",
        "recovery per seed",
        "train loss",
        "effective rank",
        "balancedness",
        "steps per seed",
        "flag",
    ]
    claims = {EQUIVARIANT_CLASS: "equivariant", COORDINATEWISE_CLASS: "breaks"}
    rows = [_row(r, claims[r.klass]) for r in result.rows]
    if result.convex is not None:
        rows.append(_row(result.convex, "— (convex)"))
    elif result.convex_skipped is not None:
        why = result.convex_skipped.removeprefix(CONVEX_SKIPPED).strip(" ()") or "—"
        rows.append([CONVEX, "— (convex)", None, "—", "skipped", why, None, None, None, "—", ""])
    spec = result.spec
    title = (
        f"matrix-sensing zoo: n = {spec.n}, r* = {spec.rank}, seeds {list(spec.seeds)}, "
        f"{spec.steps} steps, {spec.dtype}, schedule {spec.schedule}"
        + (f", tail τ = {spec.tail:g}" if spec.tail else "")
    )
    tables = [Table(title, columns, rows, caption=_GRID_NOTE)]
    if result.split is not None:
        s = result.split
        tables.append(
            Table(
                "split: worst equivariant vs best coordinatewise (mean recovery error)",
                [
                    "worst equivariant",
                    "recovery",
                    "best coordinatewise",
                    "recovery",
                    "gap",
                    "clean split",
                    "classified",
                ],
                [
                    [
                        s.worst_equivariant,
                        s.worst_equivariant_recovery,
                        s.best_coordinatewise,
                        s.best_coordinatewise_recovery,
                        s.gap,
                        "yes" if s.clean else "no",
                        f"{s.classified}/{s.total}",
                    ]
                ],
            )
        )
    grid_rows = []
    for r in result.rows:
        g = r.grid
        for j, lr in enumerate(g.lrs):
            status = [row[j] for row in g.status]
            grid_rows.append(
                [
                    r.rule,
                    f"{lr:g}",
                    _mean([row[j] for row in g.recovery]),
                    f"{status.count(INTERPOLATED)}/{len(status)}",
                    status.count(DIVERGED),
                    _mean([float(row[j]) for row in g.steps]),
                    "chosen" if j == r.choice.index else "",
                ]
            )
    tables.append(
        Table(
            "every rate of every grid",
            ["rule", "lr", "mean recovery", "interpolated", "diverged", "mean steps", ""],
            grid_rows,
        )
    )
    gd = next((r for r in result.rows if r.rule == "gd"), None)
    if gd is not None:
        arms = [(f"{r.rule} − gd", r.seeds, r.recovery, gd.recovery)
                for r in result.rows if r is not gd]  # fmt: skip
        paired = paired_table("recovery error against gd, paired by seed", arms)
        tables.extend([paired] if paired is not None else [])
    return tables


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
                mean = (_mean(r.effective_rank), _mean(r.recovery))
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
            loss = [_mean([seed[j] for seed in c]) or float("nan") for c in r.grid.curve_loss]
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


def _runs(result) -> tuple[list, list[Failure]]:
    runs = [r.summary(_run_label(r.spec)) for r in result.runs]
    failures = [Failure(r.identity, r.termination, r.message) for r in result.failures]
    return runs, failures


def _run_label(spec: dict) -> str:
    if "ps" in spec:  # a dial run: its p values, or the gd reference line
        return ", ".join(f"p={p:g}" for p in spec["ps"]) or "gd"
    return ", ".join(spec["rules"] + ([CONVEX] if spec.get("convex") else []))


def zoo_report(result: ZooResult, directory: Path) -> Path:
    """Write the zoo's HTML report (tables, figures, split verdict, failures) into ``directory``.

    Args:
        result: from :func:`gaugelab.experiments.zoo.collect`.
        directory: the report folder (created; must not hold a report already).

    Returns:
        The path of ``report.html``.

    Raises:
        FileExistsError: the folder already holds a report or figures.
    """
    figures = zoo_figures(result, directory)
    runs, failures = _runs(result)
    notes = [_GRID_NOTE]
    if result.split is not None:
        notes.insert(0, result.split.sentence())
    for r in result.rows:
        if not r.choice.interpolated:
            notes.append(f"{r.rule}: {r.choice.reason}")
    if result.convex_skipped is not None:
        notes.append(f"{CONVEX}: {result.convex_skipped}")
    elif result.convex is None and result.spec.convex:
        notes.append(f"{CONVEX}: the convex run did not complete (see the failures)")
    report = StudyReport(
        name=result.study,
        spec=result.spec.spec_dict(),
        runs=runs,
        tables=zoo_tables(result),
        figures=figures,
        failures=failures,
        notes=notes,
        created_at=datetime.now(UTC),
    )
    return write_report(report, directory)


def dial_tables(result: DialResult) -> list[Table]:
    """The per-p arm table, the fixed-rate arm table (mean recovery error, p × rate) and the
    seed-paired differences between adjacent p and between each p and gd."""
    spec = result.spec
    rows = []
    for pt in result.points + ([result.gd] if result.gd is not None else []):
        label = "gd" if math.isnan(pt.p) else format_number(pt.p)
        flag = "" if pt.choice.interpolated else "⚑"
        lr = None if pt.choice.lr is None else f"{pt.choice.lr:g}"
        rows.append(
            [label, lr, _mean(pt.recovery), _seeds(pt.recovery), _mean(pt.effective_rank), flag]
        )
    per_p = Table(
        f"Adam-p dial ({spec.mean} mean), per-p rates: n = {spec.n}, r* = {spec.rank}, "
        f"{spec.steps} steps, {spec.dtype}; recovery error "
        + ("increases monotonically with p" if result.monotone else "is NOT monotone in p"),
        ["p", "lr", "mean recovery", "recovery per seed", "effective rank", "flag"],
        rows,
        caption=f"planted effective rank {result.planted_effective_rank:.3g}; ⚑: no rate "
        "interpolated on every seed (lowest mean recovery among non-diverged rates shown)",
    )
    fixed_rows = []
    for pt in result.points:
        cells: list = [format_number(pt.p)]
        for j in range(len(spec.lrs)):
            rec, _, ok = pt.at_rate(j)
            cells.append(f"{format_number(rec)}{'' if ok else '*'}")
        fixed_rows.append(cells)
    fixed = Table(
        "fixed-rate arm: mean recovery error at each shared rate",
        ["p", *(f"{lr:g}" for lr in spec.lrs)],
        fixed_rows,
        caption="* some seed did not interpolate at that rate",
    )
    seeds = list(spec.seeds)
    arms = [(f"p={a.p:g} − p={b.p:g}", seeds, a.recovery, b.recovery)
            for a, b in zip(result.points, result.points[1:], strict=False)]  # fmt: skip
    if result.gd is not None:
        arms += [(f"p={pt.p:g} − gd", seeds, pt.recovery, result.gd.recovery)
                 for pt in result.points]  # fmt: skip
    against = " and against gd" if result.gd is not None else ""
    paired = paired_table(f"recovery error between adjacent p{against}, paired by seed", arms)
    return [per_p, fixed, *([paired] if paired is not None else [])]


def dial_colors(result: DialResult) -> dict[str, str]:
    """One colour per line of the dial's figures: the per-p arm black, each shared rate a
    shade of viridis (ordered like the rates), gd red, the planted rank grey."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    lrs = result.spec.lrs
    shades = colormaps["viridis"]
    colors = {"per-p rate": "black", "gd": "#d62728", "planted": "#7f7f7f"}
    for j, lr in enumerate(lrs):
        colors[f"fixed lr {lr:g}"] = to_hex(shades(0.1 + 0.75 * j / max(len(lrs) - 1, 1)))
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


def dial_report(result: DialResult, directory: Path) -> Path:
    """Write the dial's HTML report into ``directory``; errors as :func:`zoo_report`."""
    figures = dial_figures(result, directory)
    runs, failures = _runs(result)
    notes = [
        "recovery error increases monotonically with p"
        if result.monotone
        else "recovery error is NOT monotone in p",
        "the gd reference uses gd's zoo grid (ours) at the dial's budget",
    ]
    report = StudyReport(
        name=result.study,
        spec=result.spec.spec_dict(),
        runs=runs,
        tables=dial_tables(result),
        figures=figures,
        failures=failures,
        notes=notes,
        created_at=datetime.now(UTC),
    )
    return write_report(report, directory)
