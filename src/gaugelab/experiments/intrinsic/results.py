"""The d90 study read back from the store: trial records, the estimate, tables, figure, report.

Every run's ``result`` artifact is read only after its sha256 check; a run that did not complete
(or whose file changed) stays in the raw records with its termination class and is never
chosen; a seed with no completed trial at a ``d`` counts there as failed (not passing). The full
fine-tuning reference is the full run with the best selection accuracy (ties: the first declared
learning rate); its evaluation accuracy is ``S_full``, and the base score is the accuracy at
``θ₀`` that every run records.

Source: seed 003 §0x02F–K.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gaugelab.experiments.intrinsic.spec import PROBLEM_LABELS, IntrinsicSpec
from gaugelab.lowrank.intrinsic.protocol import (
    IntrinsicDimensionEstimate,
    ThresholdRule,
    TrialRecord,
    estimate_from_records,
)
from gaugelab.study.report import builder as rep
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import RunState

__all__ = ["IntrinsicResult", "collect", "figure", "report", "tables"]


@dataclass
class IntrinsicResult:
    """The d90 study as stored.

    Attributes:
        spec: the study's :class:`IntrinsicSpec`; study: its name.
        full: the full-reference runs ``(state, result or None)``; states: every run's state.
        records: every subspace trial as a :class:`TrialRecord` (failed ones included).
        estimate: the :class:`IntrinsicDimensionEstimate` (``None`` without a full reference).
        full_score, base_score: ``S_full`` and the base accuracy (``None`` until known).
    """

    spec: IntrinsicSpec
    study: str
    full: list[tuple[RunState, dict[str, Any] | None]]
    states: list[RunState]
    records: list[TrialRecord]
    estimate: IntrinsicDimensionEstimate | None
    full_score: float | None = None
    base_score: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[RunState]:
        """Runs that ended without completing (running ones are not failures)."""
        return [s for s in self.states if s.failed]


def collect(store: RunStore, study: str) -> IntrinsicResult:
    """The :class:`IntrinsicResult` of a d90 study, from the store.

    Raises:
        ValueError: no such study, or not an ``intrinsic-dim`` study.
    """
    row = store.study_of_kind(study, IntrinsicSpec)
    spec = IntrinsicSpec.model_validate(row.spec)
    full, records, states, base = [], [], [], None
    for state in store.run_states(study):
        state, data = store.completed_result(state)
        states.append(state)
        s = state.spec
        if data is not None and base is None:
            base = data["base"]
        if s["role"] == "full":
            full.append((state, data))
            continue
        hp = {"lr": s["lrs"][0]}
        if data is None:
            records.append(
                TrialRecord(
                    s["dims"][0],
                    s["seeds"][0],
                    hp,
                    state.termination,
                    identity=state.identity,
                    message=state.message,
                )
            )
            continue
        records.append(
            TrialRecord(
                data["d"],
                data["seed"],
                hp,
                data["status"],
                data["selection"],
                data["eval"],
                state.identity,
                data.get("projection"),
                data.get("message", ""),
            )
        )
    order = {lr: i for i, lr in enumerate(spec.full_lrs)}
    done = sorted((d for _, d in full if d is not None), key=lambda d: order.get(d["lr"], 99))
    result = IntrinsicResult(spec, study, full, states, records, None)
    if done:
        best = max(done, key=lambda d: d["selection"])  # first of ties in declared order
        result.full_score, result.base_score = best["eval"], best["base"]["eval"]
    elif base is not None:
        result.base_score = base["eval"]
    if result.full_score is not None:
        ledger = next(
            (
                x
                for x in (
                    _ledger(store, s)
                    for s in states
                    if s.completed and s.spec["role"] == "subspace"
                )
                if x
            ),
            {},
        )
        try:
            result.estimate = estimate_from_records(
                records,
                grid=list(spec.dims),
                seeds=list(spec.seeds),
                full_score=result.full_score,
                base_score=result.base_score,
                rule=ThresholdRule(spec.threshold, spec.threshold_value),
                aggregator=spec.aggregator,
                method=spec.method.upper(),
                budget={
                    "optimizer": "Adam",
                    "steps": spec.steps,
                    "batch_size": spec.batch_size,
                    "lrs": list(spec.lrs),
                    "full_lrs": list(spec.full_lrs),
                    "trials_per_d_seed": len(spec.lrs),
                },
                projections={
                    "family": spec.family,
                    "normalization": spec.normalization,
                    "seeds": list(spec.seeds),
                },
                ledger=ledger,
            )
        except ValueError as exc:  # e.g. the full reference does not beat the base
            result.notes.append(f"no estimate: {exc}")
    return result


def _ledger(store: RunStore, state: RunState) -> dict[str, Any]:
    """The study's coordinate ledger from a completed, non-degenerate trial (the per-trial
    ``d`` and shared width dropped: they vary along the grid)."""
    _, data = store.completed_result(state)
    if data is None or data.get("status") != "completed":
        return {}
    ledger = dict(data.get("ledger", {}))
    for key in ("projection", "d", "shared"):
        ledger.pop(key, None)
    head = "inside d" if not ledger.get("direct") else f"disclosed: {ledger['direct']}"
    counts = (
        "d = (d − m) + m: the shared width and the m group scales"
        if ledger.get("method") == "SAID"
        else "d = the projected coordinates u"
    )
    return {**ledger, "head": head, "d counts": counts}


def summary_table(result: IntrinsicResult) -> rep.Table:
    """Per tested d: the selected score of every seed, their aggregate, pass or fail."""
    spec, est = result.spec, result.estimate
    rows = []
    for s in est.summaries if est else []:
        cells = [s.seed_scores.get(seed) for seed in spec.seeds]
        lrs = ", ".join(f"{s.selected[k]['lr']:g}" for k in spec.seeds if k in s.selected)
        if s.all_failed:
            state = "fail (every seed failed)"
        elif s.degenerate:
            state = "degenerate (d = m)"
        else:
            state = "pass" if s.passes else "fail"
        rows.append([s.d, *cells, s.aggregate, state, lrs, ", ".join(map(str, s.failed_seeds))])
    return rep.Table(
        title=f"{spec.method.upper()} on {PROBLEM_LABELS[spec.problem]}, {spec.family} "
        f"projection: evaluation {'next-character ' if spec.problem == 'char' else ''}"
        "accuracy by d",
        columns=[
            "d",
            *(f"seed {k}" for k in spec.seeds),
            f"{spec.aggregator}",
            "vs target",
            "selected lr",
            "failed seeds",
        ],
        rows=rows,
        caption="Each seed's score is its best evaluation accuracy over the trials (max over lr); "
        "a failed seed counts as -inf (not passing) in the aggregate; raw scores, no "
        "cumulative maximum.",
    )


def estimate_table(result: IntrinsicResult) -> rep.Table:
    """The estimate and its envelope (§0x02K) as rows of (field, value)."""
    est = result.estimate
    rows: list[list[Any]] = [
        ["full reference S_full", result.full_score],
        ["base score (θ₀)", result.base_score],
    ]
    if est is not None:
        c = est.crossing
        rows += [
            ["threshold", est.threshold],
            ["target", est.target],
            ["aggregator", est.aggregator],
            ["boundary state", c.state],
            ["estimate", c.statement],
            ["non-monotone after the crossing", ", ".join(map(str, c.failing_after)) or "—"],
            ["d where every seed failed", ", ".join(map(str, c.all_failed)) or "—"],
            ["projection", f"{est.projections['family']} ({est.projections['normalization']})"],
            ["budget", f"Adam, {est.budget['steps']} steps, lrs {est.budget['lrs']}"],
            [
                "ledger",
                ", ".join(
                    f"{k}: {v}"
                    for k, v in est.ledger.items()
                    if k in ("method", "head", "scales", "ambient_dim")
                ),
            ],
            ["meaning", est.meaning],
        ]
    return rep.Table(
        title="The d90 estimate and its envelope", columns=["field", "value"], rows=rows
    )


def raw_table(result: IntrinsicResult) -> rep.Table:
    """Every trial, as stored (failures included)."""
    rows = [
        [
            r.d,
            r.seed,
            r.hyperparameters.get("lr"),
            r.status,
            r.selection_score,
            r.score,
            r.identity[:12],
        ]
        for r in sorted(result.records, key=lambda r: (r.d, r.seed, r.hyperparameters["lr"]))
    ]
    return rep.Table(
        title="Raw trial records (append-only)",
        columns=["d", "seed", "lr", "status", "selection acc", "eval acc", "run"],
        rows=rows,
    )


def tables(result: IntrinsicResult) -> list[rep.Table]:
    """The per-d summary, the estimate with its envelope, the raw records."""
    return [summary_table(result), estimate_table(result), raw_table(result)]


def figure(result: IntrinsicResult) -> Figure:
    """Score against d (log scale): each seed's selected score, the aggregate, the threshold
    line, the full and base references, the bracket shaded or the censoring marked."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    est = result.estimate
    if est is not None:
        colors = rep.palette([f"seed {s}" for s in result.spec.seeds])
        for seed in result.spec.seeds:
            pts = [(s.d, s.seed_scores[seed]) for s in est.summaries if seed in s.seed_scores]
            if pts:
                ax.plot(
                    *zip(*pts, strict=True),
                    "o-",
                    color=colors[f"seed {seed}"],
                    alpha=0.5,
                    linewidth=1,
                    markersize=4,
                    label=f"seed {seed}",
                )
        agg = [(s.d, s.aggregate) for s in est.summaries if math.isfinite(s.aggregate)]
        if agg:
            ax.plot(*zip(*agg, strict=True), "s-", color="black", linewidth=2, label=est.aggregator)
        ax.axhline(est.target, color="tab:red", linestyle="--", label=f"target {est.target:.3f}")
        c = est.crossing
        if c.bracket is not None:
            ax.axvspan(*c.bracket, color="tab:green", alpha=0.15, label=c.statement)
        else:
            ax.text(0.02, 0.02, c.statement, transform=ax.transAxes, fontsize="small")
    for value, name in ((result.full_score, "full"), (result.base_score, "base")):
        if value is not None and math.isfinite(value):
            ax.axhline(value, color="0.4", linestyle=":", linewidth=1, label=f"{name} {value:.3f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(result.spec.dims), [str(d) for d in result.spec.dims])
    ax.minorticks_off()
    ax.set(
        xlabel="d (total trainable coordinates)",
        ylabel="evaluation accuracy",
        title=f"{result.spec.method.upper()} · {result.spec.family} · {result.spec.problem}",
    )
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # nothing drawn when every run failed: no legend
        ax.legend(fontsize="x-small", loc="lower right")
    return fig


def report(result: IntrinsicResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the HTML report (the estimate first, the tables, the figure, failures, the spec).

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    figures = [
        rep.save_figure(
            figure(result),
            folder,
            "score_vs_d",
            caption="Best evaluation accuracy per seed and aggregated "
            "against d; dashed: the target; shaded: the grid bracket.",
        )
    ]
    notes = list(result.notes)
    if result.estimate is not None:
        notes.insert(0, result.estimate.crossing.statement)
        notes.append("Not established: " + "; ".join(result.estimate.non_implications) + ".")
    runs = [
        rep.RunSummary(s.identity, s.termination, IntrinsicSpec.model_validate(s.spec).run_label())
        for s in result.states
    ]
    return rep.write_result_report(
        result, folder, runs=runs, tables=tables(result), figures=figures, notes=notes
    )
