"""The twin study's tables, verdict lines and HTML report (its figures:
:mod:`gaugelab.experiments.twins.figures`).

Source: docs/protocols.md §5 (the table's steps, the verdict rule).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from gaugelab.experiments.twins.figures import optimizer_colors, twin_panels
from gaugelab.experiments.twins.results import TABLE_STEPS, TwinsResult
from gaugelab.study.report import builder as rep
from gaugelab.study.stats.paired import paired_cells, paired_columns

__all__ = ["distance_table", "merge_table", "paired_table", "report", "tables", "verdict_lines"]


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return "0" if x == 0 else f"{x:.2e}"


def _steps(final: int) -> list[int]:
    return [s for s in TABLE_STEPS if s < final] + [final]


def distance_table(result: TwinsResult) -> rep.Table:
    """The protocol's table: every twin's logit distance at steps 1, 10, 100 and the last, for
    every run that completed (the others are the failures)."""
    steps = _steps(result.steps)
    columns = ["rule", "twin", *(f"step {s}" for s in steps), "QK drift", "val acc"]
    body = [
        [row.label, kind, *(_fmt(by_step.get(s)) for s in steps), _fmt(row.qk_drift.get(kind)),
         f"{row.val_accuracy.get(kind, float('nan')):.3f}"]
        for row in result.completed
        for kind, by_step in row.distances.items()
    ]  # fmt: skip
    return rep.Table(
        title="Relative logit distance of each twin to its base (validation)",
        columns=columns,
        rows=body,
    )


def merge_table(result: TwinsResult) -> rep.Table | None:
    """Validation loss / accuracy of base, twin and the two averages (``merge`` runs only)."""
    merged = [r for r in result.completed if r.merge]
    if not merged:
        return None
    models = ("base", "twin", "aligned", "unaligned")
    body = [
        [row.label, kind, *(
            f"{row.merge.get(f'{kind}/{m}/val_loss', float('nan')):.3f} / "
            f"{row.merge.get(f'{kind}/{m}/val_accuracy', float('nan')):.3f}" for m in models)]
        for row in merged
        for kind in row.distances
    ]  # fmt: skip
    return rep.Table(
        title="Merging each twin into its base: validation loss / accuracy",
        columns=["rule", "twin", "base", "twin model", "aligned", "unaligned"],
        rows=body,
        caption="aligned: the twin rotated head by head onto the base (orthogonal Procrustes "
        "on (W_Q, W_K) and (W_V, W_O)) before averaging; unaligned: averaged as is.",
    )


def paired_table(result: TwinsResult) -> rep.Table | None:
    """Per optimizer, the pair-paired ``log10(gauge twin / noise twin)`` at step 1 and the end,
    with its bootstrap interval (two or more pairs)."""
    if not result.paired:
        return None
    body = [
        [optimizer, when, *paired_cells(comparison)]
        for optimizer, by_step in result.paired.items()
        for when, comparison in by_step.items()
    ]
    return rep.Table(
        title="log10(gauge twin / noise twin), paired by init × gauge draw",
        columns=["rule", "at", *paired_columns()],
        rows=body,
        caption="2 or more means the gauge twin is 100× its noise twin or more; ≈ 0 means the "
        "two twins agree (equivariant).",
    )


def tables(result: TwinsResult) -> list[rep.Table]:
    """The distance table, then the paired and merge tables when they apply."""
    optional = (paired_table(result), merge_table(result))
    return [distance_table(result), *(t for t in optional if t is not None)]


def verdict_lines(result: TwinsResult) -> list[str]:
    """``<rule>: <verdict> — <explanation>`` for every run that completed."""
    return [f"{row.label}: {row.verdict} — {row.explanation}" for row in result.completed]


def report(result: TwinsResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the twin study's HTML report into ``out_dir``: the verdicts, the tables, one figure
    per metric (a panel per optimizer, one colour per optimizer throughout), the failures, and
    the study's spec listing every optimizer (:meth:`TwinsResult.study_spec`).

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    measured = any(s >= 1 for r in result.rows for k, d in r.distances.items()
                   if k != "identity" for s in d)  # fmt: skip
    colors = optimizer_colors(result.rows)
    figures = [
        rep.save_figure(twin_panels(result.rows, metric, colors=colors), folder, name,
                        caption=caption)
        for metric, name, caption in (
            ("logit_distance", "logit_distance", "Each twin's relative logit distance to its "
             "base, a panel per optimizer: gauge twin solid, noise twin dashed, dotted the "
             "noise floor (the noise twin at step 1). Identity twins are exactly 0 (not drawn)."),
            ("qk_drift", "qk_drift", "Each twin's QK drift (relative distance of W_Q[h] W_K[h]ᵀ, "
             "mean over layer × head), styled as above."),
        )
    ] if measured else []  # fmt: skip
    runs = [
        rep.RunSummary(
            r.identity, r.termination, f"{r.optimizer} pair {r.pair}", {"verdict": r.verdict}
        )
        for r in result.rows
    ]
    failures = [rep.Failure(r.identity, r.termination, r.explanation) for r in result.failures]
    return rep.write_result_report(
        result, folder, runs=runs, tables=tables(result), figures=figures,
        notes=verdict_lines(result), failures=failures, spec=result.study_spec(),
    )  # fmt: skip
