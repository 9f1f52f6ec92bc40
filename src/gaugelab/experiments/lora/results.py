"""The fine-tuning study read back from the store: candidates, learning curves, tables, report.

Nothing here recomputes what a run stored: the curves and final losses are each run's
``result`` artifact, read only after its sha256 check (a changed file makes the run
``unverified``, never a row).

Source: biderman2024lora (target learning against retention); docs/commands/lora.md (the
protocol).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gaugelab.experiments.lora.spec import FinetuneSpec
from gaugelab.experiments.lora.train import Curves
from gaugelab.study.report import builder as rep
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import RunState


@dataclass
class Candidate:
    """One fine-tuning candidate as stored.

    Attributes:
        label: ``full`` or ``lora r=<r>``; method: ``full`` or ``lora``; rank: ``r`` or None.
        state: the run's :class:`RunState` (identity, termination, message).
        seeds: the ensemble's seeds; curves: its :class:`Curves` (``None`` until completed).
        trainable_parameters: parameters trained per seed; seconds: the attempt's wall time.
        files: seed → the adapter folder or deltas file name in the run's attempt folder.
    """

    label: str
    method: str
    rank: int | None
    state: RunState
    seeds: list[int] = field(default_factory=list)
    curves: Curves | None = None
    trainable_parameters: int | None = None
    seconds: float | None = None
    files: dict[str, str] = field(default_factory=dict)

    def final(self, domain: str) -> list[float]:
        """``[E]`` the final validation loss of ``domain`` per seed (empty until completed)."""
        return self.curves.final(domain) if self.curves is not None else []


@dataclass
class LoraResult:
    """The fine-tuning study as read back from the store.

    Attributes:
        spec: the study's :class:`FinetuneSpec`; study: its name.
        pretrain: the pretrain run (state and, once completed, curves and seconds).
        candidates: one :class:`Candidate` per run, in the spec's order.
    """

    spec: FinetuneSpec
    study: str
    pretrain: Candidate
    candidates: list[Candidate]

    @property
    def runs(self) -> list[RunState]:
        """Every run: the pretrain, then the candidates."""
        return [self.pretrain.state, *(c.state for c in self.candidates)]

    @property
    def failures(self) -> list[RunState]:
        """Runs that ended without completing (the pretrain included; running ones are not)."""
        return [r for r in self.runs if r.failed]

    @property
    def completed(self) -> list[Candidate]:
        """The candidates whose run completed: the rows the tables and notes show."""
        return [c for c in self.candidates if c.state.completed]


def _state(store: RunStore, identity: str) -> RunState:
    attempts = store.attempts(identity)
    last = attempts[-1] if attempts else None
    termination = "not run" if last is None else (last.termination or "open")
    try:
        spec = store.run(identity).spec
    except ValueError:
        spec = {}
    return RunState(identity, spec, termination, last.message if last else "")


def collect(store: RunStore, study: str) -> LoraResult:
    """The :class:`LoraResult` of a fine-tuning study, from the store.

    Raises:
        ValueError: no such study, or it is not a ``lora-finetune`` study.
    """
    row = store.study_of_kind(study, FinetuneSpec)
    spec = FinetuneSpec.model_validate(row.spec)
    state, data = store.completed_result(_state(store, spec.pretrain.identity()))
    pretrain = Candidate("pretrained", "pretrain", None, state)
    if data is not None:
        pretrain.curves, pretrain.seconds = Curves(**data["curves"]), data["seconds"]
        pretrain.trainable_parameters, pretrain.seeds = data["parameters"], [0]
    by_label: dict[str, Candidate] = {}
    for run in store.run_states(study):
        s = run.spec
        method = "full" if s["full"] else "lora"
        rank = None if s["full"] else s["ranks"][0]
        label = "full" if rank is None else f"lora r={rank}"
        state, data = store.completed_result(run)
        candidate = Candidate(label, method, rank, state, list(s["seeds"]))
        if data is not None:
            candidate.curves = Curves(**data["curves"])
            candidate.trainable_parameters = data["trainable_parameters"]
            candidate.seconds, candidate.files = data["seconds"], data["files"]
        by_label[label] = candidate
    ordered = [by_label[c] for c in spec.candidates() if c in by_label]
    return LoraResult(spec, study, pretrain, ordered)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _spread(xs: list[float]) -> str:
    if len(xs) < 2:
        return "—"
    return f"[{min(xs):.3f}, {max(xs):.3f}]"


def summary_table(result: LoraResult) -> rep.Table:
    """Final validation loss of both domains per candidate that completed, against the
    pretrained model (its row: once its run completed)."""
    start_target = start_retention = None
    if result.pretrain.curves is not None:
        start_target = result.pretrain.final("target")[0]
        start_retention = result.pretrain.final("retention")[0]

    def delta(x: float | None, ref: float | None) -> float | None:
        return None if x is None or ref is None else x - ref

    rows: list[list[Any]] = [
        [
            "pretrained",
            result.pretrain.trainable_parameters,
            start_target,
            None,
            start_retention,
            None,
            "—",
            result.pretrain.seconds,
        ]
    ] if result.pretrain.state.completed else []  # fmt: skip
    for c in result.completed:
        target, retention = _mean(c.final("target")), _mean(c.final("retention"))
        rows.append([c.label, c.trainable_parameters, target, delta(target, start_target),
                     retention, delta(retention, start_retention),
                     _spread(c.final("target")), c.seconds])  # fmt: skip
    seeds = rep.seeds_phrase(result.spec.seeds)
    return rep.Table(
        title="Fine-tuning on the target domain: validation loss after the last step",
        columns=["candidate", "trainable params", "target val loss", "Δ target (learned)",
                 "retention val loss", "Δ retention (forgotten)", "target range over seeds",
                 "seconds"],
        rows=rows,
        caption=f"Mean cross-entropy (nats per character) over {seeds} on the fixed "
        "validation batches; Δ against the pretrained model (negative: lower loss). Full "
        "fine-tuning trains every parameter; LoRA only the factors.",
    )  # fmt: skip


def curve_table(result: LoraResult, domain: str) -> rep.Table:
    """The learning curve of ``domain``: mean validation loss per candidate that completed, at
    every check."""
    steps = next((c.curves.steps for c in result.completed if c.curves is not None), [])
    rows = []
    for c in result.completed:
        if c.curves is None:
            continue
        values = dict(zip(c.curves.steps, getattr(c.curves, domain), strict=True))
        rows.append([c.label, *(_mean(values[s]) if s in values else None for s in steps)])
    return rep.Table(
        title=f"Learning curves: {domain} validation loss",
        columns=["candidate", *(f"step {s}" for s in steps)],
        rows=rows,
    )


def tables(result: LoraResult) -> list[rep.Table]:
    """The summary, then the target and retention learning curves."""
    return [summary_table(result), curve_table(result, "target"),
            curve_table(result, "retention")]  # fmt: skip


def curve_figure(result: LoraResult) -> Figure:
    """Target (left) and retention (right) validation loss against step, one colour per
    candidate (each seed a line); the pretrained model's losses dotted."""
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)  # a display-free canvas; pyplot's global state is never touched
    axes = fig.subplots(1, 2)
    colors = rep.palette([c.label for c in result.candidates])
    for ax, domain in zip(axes, ("target", "retention"), strict=True):
        for c in result.candidates:
            if c.curves is None:
                continue
            series = getattr(c.curves, domain)
            for e in range(len(c.seeds)):
                ax.plot(c.curves.steps, [v[e] for v in series], color=colors[c.label],
                        label=c.label if e == 0 else None, linewidth=1.4)  # fmt: skip
        if result.pretrain.curves is not None:
            ax.axhline(result.pretrain.final(domain)[0], color="0.4", linestyle=":",
                       linewidth=1, label="pretrained")  # fmt: skip
        ax.set(title=f"{domain} validation loss", xlabel="fine-tuning step",
               ylabel="cross-entropy (nats/char)")  # fmt: skip
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    return fig


def notes(result: LoraResult) -> list[str]:
    """One line per candidate: how much it learned and forgot against the pretrained model."""
    if result.pretrain.curves is None:
        return []
    t0, r0 = result.pretrain.final("target")[0], result.pretrain.final("retention")[0]
    lines = []
    for c in result.completed:
        t, r = _mean(c.final("target")), _mean(c.final("retention"))
        if t is None or r is None or not (math.isfinite(t) and math.isfinite(r)):
            continue
        lines.append(f"{c.label}: target {t0:.3f} → {t:.3f} ({t - t0:+.3f}), retention "
                     f"{r0:.3f} → {r:.3f} ({r - r0:+.3f})")  # fmt: skip
    return lines


def report(result: LoraResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the study's HTML report (notes, tables, the learning-curve figure, failures, the
    spec) into ``out_dir``; returns ``report.html``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    figures = []
    if any(c.curves is not None for c in result.candidates):
        figures.append(rep.save_figure(
            curve_figure(result), folder, "learning_curves",
            caption="Validation loss of the target (left) and retention (right) domain during "
            "fine-tuning; dotted: the pretrained model.",
        ))  # fmt: skip
    runs = [rep.RunSummary(c.state.identity, c.state.termination, c.label,
                           {"target": _mean(c.final("target")),
                            "retention": _mean(c.final("retention"))})
            for c in (result.pretrain, *result.candidates)]  # fmt: skip
    return rep.write_result_report(
        result, folder, runs=runs, tables=tables(result), figures=figures, notes=notes(result)
    )
