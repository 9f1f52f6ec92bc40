"""Tables and HTML reports of the zoo and the dial (through ``gaugelab.study.report.builder``).

The tables are :class:`gaugelab.study.report.builder.Table` objects, shown by the CLI as rich
tables and
by the report as HTML; the figures (matplotlib, saved as PNG + SVG) are drawn by
:mod:`gaugelab.experiments.sensing.figures`.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

from gaugelab.experiments.sensing.convex import CONVEX, CONVEX_SKIPPED
from gaugelab.experiments.sensing.figures import dial_figures, zoo_figures
from gaugelab.experiments.sensing.problem import (
    COORDINATEWISE_CLASS,
    EQUIVARIANT_CLASS,
    finite_mean,
)
from gaugelab.experiments.sensing.records import DIVERGED, INTERPOLATED
from gaugelab.experiments.sensing.results import DialResult, ZooResult, ZooRow
from gaugelab.study.report.builder import (
    Failure,
    RunSummary,
    Table,
    format_number,
    write_result_report,
)
from gaugelab.study.stats.paired import paired_cells, paired_columns, paired_differences

__all__ = ["dial_report", "dial_tables", "zoo_report", "zoo_tables"]

_GRID_NOTE = (
    "The learning-rate grids are ours (the reference grids are not published); the rate is "
    "the protocol's: lowest mean recovery among rates whose worst seed interpolates. "
    "⚑: no rate interpolated on every seed; the lowest mean recovery among non-diverged "
    "rates is shown."
)


def _seeds(xs: list[float]) -> str:
    return " / ".join(format_number(x) for x in xs) if xs else "—"


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
        finite_mean(row.recovery),
        _seeds(row.recovery),
        finite_mean(row.loss),
        finite_mean(row.effective_rank),
        finite_mean(row.balancedness),
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


def _whole(steps: float | None) -> int | None:
    """A mean step count to the nearest step (``2000``, not ``2e+03``)."""
    return None if steps is None else round(steps)


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
                    finite_mean([row[j] for row in g.recovery]),
                    f"{status.count(INTERPOLATED)}/{len(status)}",
                    status.count(DIVERGED),
                    _whole(finite_mean([float(row[j]) for row in g.steps])),
                    "yes" if j == r.choice.index else "",
                ]
            )
    tables.append(
        Table(
            "every rate of every grid",
            ["rule", "lr", "mean recovery", "interpolated", "diverged", "mean steps", "chosen"],
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


def _runs(result) -> tuple[list, list[Failure]]:
    runs = [RunSummary(r.identity, r.termination, _run_label(r.spec)) for r in result.runs]
    failures = [Failure(r.identity, r.termination, r.message) for r in result.failures]
    return runs, failures


def _run_label(spec: dict) -> str:
    if "ps" in spec:  # a dial run: its p values, or the gd reference line
        return ", ".join(f"p={p:g}" for p in spec["ps"]) or "gd"
    return ", ".join(spec["rules"] + ([CONVEX] if spec.get("convex") else []))


def zoo_report(result: ZooResult, directory: Path) -> Path:
    """Write the zoo's HTML report (tables, figures, split verdict, failures) into ``directory``.

    Args:
        result: from :func:`gaugelab.experiments.sensing.zoo.collect`.
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
    return write_result_report(
        result, directory, runs=runs, tables=zoo_tables(result), figures=figures, notes=notes,
        failures=failures, created_at=datetime.now(UTC),
    )  # fmt: skip


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
            [
                label,
                lr,
                finite_mean(pt.recovery),
                _seeds(pt.recovery),
                finite_mean(pt.effective_rank),
                flag,
            ]
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
    return write_result_report(
        result, directory, runs=runs, tables=dial_tables(result), figures=figures, notes=notes,
        failures=failures, created_at=datetime.now(UTC),
    )  # fmt: skip
