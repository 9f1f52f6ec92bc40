"""The LoRA twin study read back from the store: one row per optimizer, tables, figure, report.

Nothing here recomputes what a run stored: the distances, angles and verdicts are each run's
``result`` artifact, read only after its sha256 check (a changed file makes the run
``unverified``, never a row).

Source: singh2026lossbasis, §6 (reading the twin triplet); docs/commands/lora-twins.md.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gaugelab.experiments.lora_twins.spec import LORA_TWIN_OPTIMIZERS, TWIN_NAMES, LoraTwinSpec
from gaugelab.study.report import builder as rep
from gaugelab.study.report.figures import step_axis
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import RunState

__all__ = [
    "LoraTwinRow",
    "LoraTwinsResult",
    "angle_line",
    "collect",
    "distance_figure",
    "notes",
    "report",
    "tables",
]

TWINS = TWIN_NAMES[1:]
GAUGE_TWINS = ("gauge", "scalar")


@dataclass
class LoraTwinRow:
    """One optimizer's twin run as stored.

    Attributes:
        optimizer: the twin phase's optimizer; lr: its learning rate.
        state: the run's :class:`RunState`.
        records: ``step → metric → value`` (see
            :func:`gaugelab.experiments.lora_twins.train.measure`); empty until completed.
        verdicts: gauge twin (``gauge``, ``scalar``) → ``(verdict, explanation)``.
        warmup_norm_B: ``‖B‖_F`` over every module after the warm-up; seconds: wall time.
    """

    optimizer: str
    state: RunState
    lr: float | None = None
    records: dict[int, dict[str, float]] = field(default_factory=dict)
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)
    warmup_norm_B: float | None = None
    seconds: float | None = None

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """``(steps, values)`` of one metric over the checkpoints."""
        steps = sorted(s for s in self.records if name in self.records[s])
        return steps, [self.records[s][name] for s in steps]

    def at(self, name: str, step: int) -> float | None:
        """One metric at one step, or ``None``."""
        return self.records.get(step, {}).get(name)


@dataclass
class LoraTwinsResult:
    """The LoRA twin study: its spec, name and one row per optimizer (protocol order)."""

    spec: LoraTwinSpec
    study: str
    rows: list[LoraTwinRow]

    @property
    def failures(self) -> list[RunState]:
        """Runs that ended without completing (running ones are not failures)."""
        return [r.state for r in self.rows if r.state.failed]

    @property
    def completed(self) -> list[LoraTwinRow]:
        """The optimizers whose run completed: the rows the tables show."""
        return [r for r in self.rows if r.state.completed]


def collect(store: RunStore, study: str) -> LoraTwinsResult:
    """The :class:`LoraTwinsResult` of a ``lora-twins`` study, from the store.

    Raises:
        ValueError: no such study, or not a ``lora-twins`` study.
    """
    row = store.study_of_kind(study, LoraTwinSpec)
    spec = LoraTwinSpec.model_validate(row.spec)
    rows = []
    for run in store.run_states(study):
        state, data = store.completed_result(run)
        item = LoraTwinRow(run.spec.get("optimizer", "?"), state)
        if data is not None:
            item.lr = data["lr"]
            item.records = {int(s): m for s, m in data["records"].items()}
            item.verdicts = {k: (v[0], v[1]) for k, v in data["verdicts"].items()}
            item.warmup_norm_B, item.seconds = data["warmup"]["norm_B"], data["seconds"]
        rows.append(item)
    order = {name: i for i, name in enumerate(LORA_TWIN_OPTIMIZERS)}
    rows.sort(key=lambda r: order.get(r.optimizer, len(order)))
    return LoraTwinsResult(spec, study, rows)


def _last(result: LoraTwinsResult) -> int:
    return result.spec.steps


def summary_table(result: LoraTwinsResult) -> rep.Table:
    """Per optimizer: each gauge twin's verdict, its logit distance at step 1 and at the end
    and its largest update angle at the end, beside the noise twin's distances and angle (the
    floor)."""
    T = _last(result)
    rows = []
    for r in result.completed:
        cells: list[Any] = [r.optimizer, r.lr]
        for twin in GAUGE_TWINS:
            verdict = r.verdicts.get(twin, (r.state.termination, ""))[0]
            cells += [
                verdict,
                r.at(f"{twin}/logit_distance", 1),
                r.at(f"{twin}/logit_distance", T),
                r.at(f"{twin}/angle_max", T),
            ]
        cells += [
            r.at("noise/logit_distance", 1),
            r.at("noise/logit_distance", T),
            r.at("noise/angle_max", T),
            r.at("identity/logit_distance", T),
        ]
        rows.append(cells)
    return rep.Table(
        title="LoRA gauge twins: the triplet's reading per optimizer",
        columns=[
            "optimizer",
            "lr",
            "GL twin",
            "GL step 1",
            f"GL step {T}",
            "GL angle (rad)",
            "scalar twin",
            "scalar step 1",
            f"scalar step {T}",
            "scalar angle (rad)",
            "noise step 1",
            f"noise step {T}",
            "noise angle (rad)",
            f"identity step {T}",
        ],
        rows=rows,
        caption="Relative distance of the validation logits to the base adapter's (the "
        "twins: GL(r) gauge (B G, G⁻¹ A), scalar (c B, A/c), identity, noise); verdicts from "
        "the shared triplet engine (basis-sensitive: ≥ 100× the noise twin at step 1; "
        "equivariant: ≤ 10× throughout). Angle: the largest principal angle between the "
        "twin's and the base's update subspaces at the last step, over every module; the noise "
        "twin's angle, the same measurement, is the floor to read the gauge twins' against.",
    )


def series_table(result: LoraTwinsResult, metric: str, title: str) -> rep.Table:
    """One metric of every twin per optimizer at every checkpoint."""
    steps = list(result.spec.checkpoints)
    rows = []
    for r in result.completed:
        for twin in TWINS:
            rows.append([r.optimizer, twin, *(r.at(f"{twin}/{metric}", s) for s in steps)])
    return rep.Table(
        title=title, columns=["optimizer", "twin", *(f"step {s}" for s in steps)], rows=rows
    )


def tables(result: LoraTwinsResult) -> list[rep.Table]:
    """The summary, then the logit and update distances at every checkpoint."""
    return [
        summary_table(result),
        series_table(result, "logit_distance", "Logit distance to the base over the twin phase"),
        series_table(result, "update_distance", "Update s·B A distance to the base"),
    ]


def distance_figure(result: LoraTwinsResult) -> Figure:
    """One panel per optimizer: each twin's logit distance to the base against the step
    (log–log, steps ≥ 1). A log axis has no 0: a twin at exactly 0 at every step is named in
    the panel's title instead of drawn, and a single exact 0 is left out of its line."""
    done = [r for r in result.rows if r.records]
    fig = Figure(figsize=(3.2 * max(1, len(done)), 3.2), layout="constrained")
    FigureCanvasAgg(fig)  # display-free; pyplot's global state is never touched
    axes = fig.subplots(1, max(1, len(done)), squeeze=False)[0]
    colors = rep.palette(list(TWINS))
    for ax, r in zip(axes, done, strict=False):
        exact = []
        for twin in TWINS:
            steps, values = r.series(f"{twin}/logit_distance")
            points = [(s, v) for s, v in zip(steps, values, strict=True) if s >= 1]
            keep = [(s, v) for s, v in points if v > 0]
            if points and not keep:
                exact.append(twin)
            if keep:
                ax.plot(*zip(*keep, strict=True), marker="o", label=twin, color=colors[twin])
        title = r.optimizer + (f"\n(exactly 0: {', '.join(exact)})" if exact else "")
        ax.set(title=title, xlabel="twin step", yscale="log")
        step_axis(ax, result.spec.checkpoints, log=True)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("relative logit distance")
    axes[0].legend(fontsize="small")
    return fig


def angle_line(result: LoraTwinsResult, row: LoraTwinRow) -> str | None:
    """``<optimizer>: largest update angle at step T: GL(r) twin …, scalar twin … against the
    noise twin's … rad (the floor)``, or None before the run completed."""
    T = _last(result)
    values = [row.at(f"{twin}/angle_max", T) for twin in (*GAUGE_TWINS, "noise")]
    if any(v is None for v in values):
        return None
    gauge, scalar, noise = values
    return (
        f"{row.optimizer}: largest principal angle between the updates at step {T}: GL(r) twin "
        f"{gauge:.2g} rad, scalar twin {scalar:.2g} rad, against the noise twin's {noise:.2g} "
        "rad (the floor)"
    )


def notes(result: LoraTwinsResult) -> list[str]:
    """One line per optimizer and gauge twin: the verdict and why; per optimizer the update
    angles against the noise twin's."""
    lines = []
    for r in result.completed:
        for twin, (verdict, why) in r.verdicts.items():
            label = "GL(r) twin" if twin == "gauge" else "scalar twin"
            lines.append(f"{r.optimizer}, {label}: {verdict} — {why}")
        if (angles := angle_line(result, r)) is not None:
            lines.append(angles)
    return lines


def report(result: LoraTwinsResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the HTML report (notes, tables, the distance figure, failures, the spec) into
    ``out_dir``; returns ``report.html``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    figures = []
    if any(r.records for r in result.rows):
        figures.append(
            rep.save_figure(
                distance_figure(result),
                folder,
                "twin_distances",
                caption="Relative logit distance of each twin to the base adapter over the twin "
                "phase, one panel per optimizer (log–log; a twin at exactly 0 throughout is "
                "named in its panel's title).",
            )
        )

    def final(r: LoraTwinRow, name: str) -> float | None:
        value = r.at(name, _last(result))
        return value if value is None or math.isfinite(value) else None

    runs = [
        rep.RunSummary(
            r.state.identity,
            r.state.termination,
            r.optimizer,
            {
                "gauge": final(r, "gauge/logit_distance"),
                "scalar": final(r, "scalar/logit_distance"),
                "noise": final(r, "noise/logit_distance"),
                "GL angle": final(r, "gauge/angle_max"),
                "noise angle": final(r, "noise/angle_max"),
            },
        )
        for r in result.rows
    ]
    return rep.write_result_report(
        result, folder, runs=runs, tables=tables(result), figures=figures, notes=notes(result)
    )
