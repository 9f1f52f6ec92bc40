"""The atlas's tables, its Markdown (the published docs/atlas.md table) and its HTML report.

Three tables: the *matrix* (one row per optimizer, one column per group / problem: verdict,
step-1 gauge / noise ratio, seconds), the *checks* (one row per check, grouped by verdict,
sortable in the report), and the checks *without a verdict* with their one-line reasons.

Source: docs/commands/atlas.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from gaugelab.equivariance.verdicts import OUTCOMES, TIMEOUT
from gaugelab.experiments.atlas.figures import FLOOR, distance_figure
from gaugelab.experiments.atlas.results import STOPPED, VERDICT_ORDER, AtlasResult, AtlasRow
from gaugelab.study.report import builder as rep


def _ratio(row: AtlasRow) -> str:
    return "" if row.ratio is None else f"{row.ratio:.1e}×"


def matrix_cell(row: AtlasRow | None) -> str:
    """``breaks · 2.0e+05× · 0.12 s``; ``error · 0.01 s``; ``timeout``; ``—`` for no check."""
    if row is None:
        return "—"
    parts = [row.verdict, _ratio(row)]
    if row.seconds is not None:
        parts.append(f"{row.seconds:.2f} s")
    return " · ".join(p for p in parts if p)


def _columns(result: AtlasResult) -> list[str]:
    return [f"{g} / {p}" for g in result.spec.groups for p in result.spec.problems]


def _optimizers(result: AtlasResult) -> list[str]:
    """The optimizers with a row, grouped by their verdicts (as :data:`VERDICT_ORDER`)."""
    place = {v: i for i, v in enumerate(VERDICT_ORDER)}
    by: dict[str, dict[str, AtlasRow]] = {}
    for r in result.rows:
        by.setdefault(r.optimizer, {})[r.cell] = r
    columns = _columns(result)

    def key(name: str) -> tuple:
        cells = by[name]
        return tuple(place.get(cells[c].verdict, 99) if c in cells else 99 for c in columns)

    return sorted(by, key=lambda n: (key(n), n))


def _versions(result: AtlasResult) -> str:
    return ", ".join(dict.fromkeys(r.version for r in result.rows)) or "none"


def matrix_table(result: AtlasResult) -> rep.Table:
    """One row per optimizer, one column per group / problem."""
    cells = {(r.optimizer, r.cell): r for r in result.rows}
    columns = _columns(result)
    rows = [[name, *(matrix_cell(cells.get((name, c))) for c in columns)]
            for name in _optimizers(result)]  # fmt: skip
    s = result.spec
    return rep.Table(
        title=f"Atlas: verdict · step-1 gauge / noise twin · seconds per check ({s.dtype}, "
        f"{s.steps} steps, {s.draws} draws)",
        columns=["optimizer", *columns],
        rows=rows,
        caption=f"Versions: {_versions(result)}. Rows grouped by verdict"
        + (f"; the reasons of {', '.join(OUTCOMES)}: the table of checks without a verdict."
           if any(r.verdict in OUTCOMES for r in result.rows) else "."),
    )


def checks_table(result: AtlasResult) -> rep.Table:
    """One row per check, grouped by verdict, with the check's explanation or the reason it
    gave none (sortable in the report)."""
    rows = [[r.optimizer, r.version, r.group, r.problem, r.verdict, r.gauge, r.noise, r.ratio,
             r.seconds, r.explanation or r.why] for r in result.grouped()]  # fmt: skip
    columns = ["optimizer", "version", "group", "problem", "verdict", "step-1 gauge twin",
               "step-1 noise twin", "gauge / noise", "seconds", "why"]  # fmt: skip
    return rep.Table(
        title="Every check, grouped by verdict",
        columns=columns,
        rows=rows,
        caption="Twin distances: relative Frobenius distance of the represented objects (U Vᵀ; "
        "logits and QK invariants on attention) to the base after one step, the largest over "
        "the draws.",
        sortable=True,
    )


def reasons_table(result: AtlasResult) -> rep.Table:
    """The checks that gave no verdict, with their one-line reasons."""
    rows = [[r.optimizer, r.group, r.problem, r.verdict, r.why]
            for r in result.grouped() if r.verdict in OUTCOMES]  # fmt: skip
    return rep.Table(
        title=f"Checks without a verdict ({', '.join(OUTCOMES)})",
        columns=["optimizer", "group", "problem", "verdict", "reason"],
        rows=rows,
    )


def tables(result: AtlasResult) -> list[rep.Table]:
    """The matrix, then the reasons of the checks without a verdict when there are any (what
    the command prints; the report adds :func:`checks_table`)."""
    reasons = reasons_table(result)
    return [matrix_table(result), *([reasons] if reasons.rows else [])]


def notes(result: AtlasResult) -> list[str]:
    """How many checks gave each verdict, and what was not checked."""
    s = result.spec
    total = len(s.optimizers) * len(s.groups) * len(s.problems)
    counts = ", ".join(f"{n} {v}" for v, n in result.counts().items()) or "none"
    sizes = [_count(len(s.optimizers), "optimizer"), _count(len(s.groups), "group"),
             _count(len(s.problems), "problem")]  # fmt: skip
    lines = [f"{' × '.join(sizes)} = {_count(total, 'check')}: {counts}"]
    if result.failures:
        lines.append(f"{len(result.failures)} check(s) did not complete (see the failures)")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(result: AtlasResult) -> str:
    """The atlas as Markdown: the matrix as a table, then one line per check without a
    verdict with its reason (the body of docs/atlas.md)."""
    table = matrix_table(result)
    lines = [f"| {' | '.join(_md(c) for c in table.columns)} |",
             f"|{'|'.join('---' for _ in table.columns)}|"]  # fmt: skip
    lines += [f"| {' | '.join(_md(c) for c in row)} |" for row in table.rows]
    lines += ["", f"{table.caption}", ""]
    reasons = [r for r in result.grouped() if r.verdict in OUTCOMES]
    if reasons:
        lines.append(f"Checks without a verdict ({len(reasons)}):")
        lines.append("")
        lines += [f"- `{r.optimizer}` {r.cell}: **{r.verdict}** — {_md(r.why)}" for r in reasons]
        lines.append("")
    lines += [f"- {note}" for note in notes(result)]
    return "\n".join(lines) + "\n"


def report(result: AtlasResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the HTML report (notes, the matrix, every check in a sortable table, the reasons,
    the distance figure, failures, the spec) into ``out_dir``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    figures = []
    if any(r.gauge is not None for r in result.rows):
        figures.append(rep.save_figure(
            distance_figure(result), folder, "atlas_distances",
            caption="Per optimizer: the gauge twin's distance to the base after one step "
            "(filled) and the noise twin's (hollow, the round-off floor), one colour per "
            f"group / problem; log scale, exact zeros drawn at {FLOOR:g}. An equivariant rule "
            "sits far below its floor, a basis-dependent one far above.",
        ))  # fmt: skip
    runs = [rep.RunSummary(r.identity, STOPPED if r.verdict == TIMEOUT else "completed",
                           r.label, {"ratio": r.ratio, "seconds": r.seconds})
            for r in result.rows]  # fmt: skip
    return rep.write_result_report(
        result, folder, runs=runs,
        tables=[matrix_table(result), checks_table(result), *tables(result)[1:]],
        figures=figures, notes=notes(result),
    )  # fmt: skip


__all__ = ["checks_table", "markdown", "matrix_cell", "matrix_table", "notes", "reasons_table",
           "report", "tables"]  # fmt: skip
