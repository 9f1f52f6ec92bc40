"""The twin study read back from the store: rows, verdicts, paired statistics, tables, report.

Nothing here recomputes what a run stored: distances, drifts and accuracies are the logged
metrics, the verdict is the run's ``summary`` artifact.

Source: singh2026lossbasis, §6; docs/protocols.md §5.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gaugelab.experiments._study import paired_cells, paired_columns, run_states, study_row
from gaugelab.study import report as rep
from gaugelab.study.paired import PairedComparison, paired_differences
from gaugelab.study.store import RunStore

TABLE_STEPS = (1, 10, 100)


@dataclass
class TwinRow:
    """One optimizer × pair: the protocol's table row for every twin, and the stored verdict."""

    optimizer: str
    pair: int
    identity: str
    termination: str
    verdict: str
    explanation: str
    distances: dict[str, dict[int, float]] = field(default_factory=dict)  # twin → step → dist
    qk_drift: dict[str, float] = field(default_factory=dict)  # twin → final mean QK drift
    val_accuracy: dict[str, float] = field(default_factory=dict)  # member → final accuracy
    merge: dict[str, float] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """Why the run did not complete ("" when it did)."""
        return "" if self.termination == "completed" else self.explanation

    @property
    def label(self) -> str:
        """``optimizer`` for pair 0, ``optimizer #i`` for pair ``i``."""
        return self.optimizer if self.pair == 0 else f"{self.optimizer} #{self.pair}"


@dataclass
class TwinsResult:
    """The twin study as read back from the store.

    Attributes:
        study: the study's name; spec: its base spec (JSON mode: ``{"twin": …, "merge": …}``).
        rows: one :class:`TwinRow` per run, in the sweep's order.
        paired: optimizer → ``{"step 1" | "final": PairedComparison}`` of ``log10(gauge /
            noise)`` over the pairs (only for optimizers with two or more completed pairs).
    """

    study: str
    spec: dict[str, Any]
    rows: list[TwinRow]
    paired: dict[str, dict[str, PairedComparison]] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """The runs' training steps."""
        return int(self.spec["twin"]["steps"])

    @property
    def failures(self) -> list[TwinRow]:
        """Runs that did not complete (as rows: identity, termination, message)."""
        return [r for r in self.rows if r.termination != "completed"]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the result."""
        return {
            "study": self.study,
            "spec": self.spec,
            "rows": [vars(r) for r in self.rows],
            "paired": {o: {k: vars(c) for k, c in d.items()} for o, d in self.paired.items()},
        }


def _verdict(store: RunStore, identity: str) -> tuple[str, str]:
    attempts = [a for a in store.attempts(identity) if a.termination == "completed"]
    for art in store.artifacts(identity):
        if art.kind == "summary" and attempts and art.ordinal == attempts[-1].ordinal:
            summary = json.loads(art.path.read_text(encoding="utf-8"))
            return summary["verdict"], summary["explanation"]
    return "", ""


def collect(store: RunStore, study: str) -> TwinsResult:
    """The :class:`TwinsResult` of a twin study, from its stored metrics and verdicts.

    Raises:
        ValueError: no such study, or it is not a twin study.
    """
    row = study_row(store, study)
    if row.kind != "twins":
        raise ValueError(f"collect: study {study!r} is a {row.kind!r} study, not a twin study")
    base_init = row.spec["twin"]["init_seed"]
    rows = []
    for run in run_states(store, study):
        twin = run.spec["twin"]
        out = TwinRow(twin["optimizer"], twin["init_seed"] - base_init, run.identity,
                      run.termination, run.termination, run.message)  # fmt: skip
        values: dict[str, dict[int, float]] = {}
        for m in store.metrics(run.identity):
            values.setdefault(m.name, {})[m.step] = m.value
        final = twin["steps"]
        for kind in twin["twins"]:
            out.distances[kind] = values.get(f"{kind}/logit_distance", {})
            out.qk_drift[kind] = values.get(f"{kind}/qk_drift_mean", {}).get(final, math.nan)
        for member in ("base", *twin["twins"]):
            out.val_accuracy[member] = values.get(f"{member}/val_accuracy", {}).get(final, math.nan)
        out.merge = {
            n.removeprefix("merge/"): v[final + 1]
            for n, v in values.items()
            if n.startswith("merge/") and final + 1 in v
        }
        if run.completed:
            out.verdict, out.explanation = _verdict(store, run.identity)
        rows.append(out)
    return TwinsResult(study, row.spec, rows, _paired(rows, int(row.spec["twin"]["steps"])))


def _paired(rows: Sequence[TwinRow], final: int) -> dict[str, dict[str, PairedComparison]]:
    """Seed-paired ``log10(gauge / noise)`` at step 1 and at the end, per optimizer."""
    out: dict[str, dict[str, PairedComparison]] = {}
    for optimizer in dict.fromkeys(r.optimizer for r in rows):
        done = [r for r in rows if r.optimizer == optimizer and r.termination == "completed"]
        comparisons = {}
        for label, step in (("step 1", 1), ("final", final)):
            gauge, noise = {}, {}
            for r in done:
                g = r.distances.get("gauge", {}).get(step)
                n = r.distances.get("noise", {}).get(step)
                if g is not None and n is not None and g > 0 and n > 0:
                    gauge[r.pair], noise[r.pair] = math.log10(g), math.log10(n)
            if len(gauge) >= 2:
                comparisons[label] = paired_differences(gauge, noise)
        if comparisons:
            out[optimizer] = comparisons
    return out


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return "0" if x == 0 else f"{x:.2e}"


def _steps(final: int) -> list[int]:
    return [s for s in TABLE_STEPS if s < final] + [final]


def distance_table(result: TwinsResult) -> rep.Table:
    """The protocol's table: every twin's logit distance at steps 1, 10, 100 and the last."""
    steps = _steps(result.steps)
    columns = ["rule", "twin", *(f"step {s}" for s in steps), "QK drift", "val acc"]
    body = [
        [row.label, kind, *(_fmt(by_step.get(s)) for s in steps), _fmt(row.qk_drift.get(kind)),
         f"{row.val_accuracy.get(kind, float('nan')):.3f}"]
        for row in result.rows
        for kind, by_step in row.distances.items()
    ]  # fmt: skip
    return rep.Table(
        title="Relative logit distance of each twin to its base (validation)",
        columns=columns,
        rows=body,
    )


def merge_table(result: TwinsResult) -> rep.Table | None:
    """Validation loss / accuracy of base, twin and the two averages (``merge`` runs only)."""
    merged = [r for r in result.rows if r.merge]
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
    """``<rule>: <verdict> — <explanation>`` for every run."""
    return [f"{row.label}: {row.verdict} — {row.explanation}" for row in result.rows]


def distance_figure(rows: Sequence[TwinRow]):
    """Log-scale logit distance against step for every optimizer's twins (noise floor dashed)."""
    series = {}
    floors = []
    for row in rows:
        label = row.optimizer if row.pair == 0 else f"{row.optimizer} (pair {row.pair})"
        for kind, by_step in row.distances.items():
            steps = sorted(s for s in by_step if s >= 1)
            if kind == "identity" or not steps:
                continue  # exactly 0: nothing to draw on a log axis
            series[f"{label} — {kind}"] = (steps, [max(by_step[s], 1e-18) for s in steps])
            if kind == "noise":
                floors.append(by_step[steps[0]])
    hlines = {"median noise twin at step 1": sorted(floors)[len(floors) // 2]} if floors else None
    return rep.plot_curves(
        series,
        title="Twin divergence: relative logit distance to the base (validation)",
        xlabel="step",
        ylabel="relative logit distance",
        logy=True,
        hlines=hlines,
    )


def report(result: TwinsResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the twin study's HTML report (tables, figure, verdicts, failures) into ``out_dir``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    measured = any(s >= 1 for r in result.rows for k, d in r.distances.items()
                   if k != "identity" for s in d)  # fmt: skip
    figures = [rep.save_figure(
        distance_figure(result.rows),
        folder,
        "logit_distance",
        caption="Each twin's logit distance to its base; dashed: noise floor.",
    )] if measured else []  # fmt: skip
    return rep.write_report(
        rep.StudyReport(
            name=result.study,
            spec=result.spec,
            runs=[rep.RunSummary(r.identity, r.termination, f"{r.optimizer} pair {r.pair}",
                                 {"verdict": r.verdict}) for r in result.rows],
            tables=tables(result),
            figures=figures,
            failures=[rep.Failure(r.identity, r.termination, r.explanation)
                      for r in result.failures],
            notes=verdict_lines(result),
        ),
        folder,
    )  # fmt: skip
