"""The kernel study read back from the store: per optimizer, the paths' diagnostics by step;
tables, the four-diagnostic figure, notes, and the HTML report.

Nothing is recomputed: every number is a run's ``result`` artifact, read after its sha256
check (a changed file makes the run ``unverified``, never a row).

Source: seed 003 §0x09J (the diagnostics and what they do not prove), §0x09L.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gaugelab.experiments.lora.results import _state
from gaugelab.experiments.lora_kernel.spec import KernelSpec
from gaugelab.study.report import builder as rep
from gaugelab.study.report.figures import step_axis
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import RunState

DIAGNOSTICS: tuple[tuple[str, str], ...] = (
    ("r_lin", "R_lin (linearization residual)"),
    ("d_j", "D_J (relative Jacobian drift)"),
    ("d_k", "D_K (relative kernel drift)"),
    ("a_k", "A_K (kernel alignment)"),
)
LIMITS: tuple[tuple[str, str, str], ...] = (
    ("R_lin", "failure of the initialization Taylor model on the selected outputs",
     "that the kernel itself is stable"),
    ("D_J", "coordinate-level gradient-feature drift",
     "useful learned representations; it is gauge and parameterization sensitive"),
    ("D_K", "drift of the chosen tangent metric on the probe split",
     "low drift off the probe split or under another optimizer metric"),
    ("A_K", "directional agreement after discarding overall scale",
     "equal convergence rate or equal kernel magnitude"),
    ("target and retention loss", "operational learning and forgetting",
     "mechanism without the trajectory diagnostics"),
)  # fmt: skip
"""Seed 003 §0x09J's table: what each diagnostic detects and does not prove."""


@dataclass
class OptimizerRun:
    """One optimizer's run as stored: its state and, once completed, its result."""

    optimizer: str
    state: RunState
    data: dict[str, Any] | None = None

    def rows(self, path: str) -> list[dict[str, Any]]:
        return [] if self.data is None else self.data["paths"].get(path, [])


@dataclass
class KernelResult:
    """The kernel study as read back: its spec, the pretrain run, one run per optimizer."""

    spec: KernelSpec
    study: str
    pretrain: RunState
    runs: list[OptimizerRun] = field(default_factory=list)

    @property
    def failures(self) -> list[RunState]:
        return [r for r in (self.pretrain, *(o.state for o in self.runs)) if r.failed]


def collect(store: RunStore, study: str) -> KernelResult:
    """The :class:`KernelResult` of a kernel study, from the store.

    Raises:
        ValueError: no such study, or it is not a ``lora-kernel`` study.
    """
    row = store.study_of_kind(study, KernelSpec)
    spec = KernelSpec.model_validate(row.spec)
    pretrain = _state(store, spec.pretrain.identity())
    by_opt = {}
    for run in store.run_states(study):
        state, data = store.completed_result(run)
        by_opt[run.spec["optimizers"][0]] = OptimizerRun(run.spec["optimizers"][0], state, data)
    ordered = [by_opt[o] for o in spec.optimizers if o in by_opt]
    return KernelResult(spec, study, pretrain, ordered)


def _cell(value: float | None, se: float | None = None) -> str | None:
    if value is None:
        return None
    return f"{value:.3g}" if se is None else f"{value:.3g} ± {se:.2g}"


def diagnostics_table(run: OptimizerRun, spec: KernelSpec) -> rep.Table:
    """Every path's diagnostics and losses at every checkpoint of one optimizer's run."""
    rows = []
    for path in spec.paths():
        for r in run.rows(path):
            d_j, d_k, a_k = (_cell(r[k], r[f"{k}_se"]) for k in ("d_j", "d_k", "a_k"))
            rows.append([path, r["step"], r["r_lin"], d_j, d_k, a_k, r["prediction_gap"],
                         r["distance"], r["target"], r["retention"]])  # fmt: skip
    return rep.Table(
        title=f"Kernel diagnostics under {run.optimizer} (lr {spec.lr(run.optimizer):g})",
        columns=["path", "step", "R_lin", "D_J ± se", "D_K ± se", "A_K ± se",
                 "prediction gap", "‖θ_t − θ_0‖", "target val loss", "retention val loss"],
        rows=rows,
        caption=f"Probe: {spec.probe_examples} target validation windows, last-position "
        f"logits, example then output; Q = {spec.probes} Rademacher output probes "
        f"(seed {spec.estimator_seed}), errors: jackknife over the probes. Prediction gap: "
        "‖F_nonlinear(t) − F_linearized(t)‖ / ‖F_nonlinear(t) − F_0‖ (how well the trained "
        "linearized model predicts the trained nonlinear one). The linearized path's "
        "diagnostics are those of the nonlinear model at θ_0 + δ_t.",
    )  # fmt: skip


def limits_table() -> rep.Table:
    """Seed 003 §0x09J: what each diagnostic detects and does not prove."""
    return rep.Table(title="What the diagnostics detect and do not prove (seed 003 §0x09J)",
                     columns=["diagnostic", "detects", "does not prove"],
                     rows=[list(r) for r in LIMITS])  # fmt: skip


def tables(result: KernelResult) -> list[rep.Table]:
    """One diagnostics table per optimizer."""
    return [diagnostics_table(run, result.spec) for run in result.runs if run.data is not None]


def diagnostics_figure(result: KernelResult) -> Figure:
    """The four diagnostics against step: one row per optimizer, one panel per diagnostic,
    one line per path (error bars: the estimator's standard error)."""
    runs = [r for r in result.runs if r.data is not None]
    fig = Figure(figsize=(14, 3.2 * max(len(runs), 1)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(len(runs), 1), len(DIAGNOSTICS), squeeze=False)
    colors = rep.palette(result.spec.paths())
    for i, run in enumerate(runs):
        for j, (key, title) in enumerate(DIAGNOSTICS):
            ax = axes[i][j]
            for path in result.spec.paths():
                rows = run.rows(path)
                steps = [r["step"] for r in rows]
                values = [r[key] for r in rows]
                errors = [r.get(f"{key}_se") or 0.0 for r in rows]
                ax.errorbar(steps, values, yerr=errors if key != "r_lin" else None,
                            color=colors[path], label=path, marker="o", markersize=3,
                            linewidth=1.3, capsize=2)  # fmt: skip
            ax.set(title=f"{title} — {run.optimizer}", xlabel="step")
            step_axis(ax, result.spec.checkpoints)
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize="small")
    return fig


def _first(who: str, what: str, step: int | None, level: float, steps: int) -> str:
    """``<who>'s <what> first exceeds <level> at step <step> of <steps>``, or that it never
    did within ``steps``."""
    if step is None:
        return f"{who}'s {what} never exceeded {level} at a checkpoint within {steps} steps"
    return f"{who}'s {what} first exceeds {level} at step {step} of {steps}"


def notes(result: KernelResult) -> list[str]:
    """Per optimizer: the first checkpoint where the linearized model's prediction gap and the
    nonlinear path's R_lin pass 0.1 and 0.5, and the final D_K of every path."""
    lines = []
    for run in result.runs:
        if run.data is None:
            continue
        lin, nl = run.rows("linearized"), run.rows("nonlinear")
        steps = result.spec.steps
        for level in (0.1, 0.5):
            gap = next((r["step"] for r in lin if (r["prediction_gap"] or 0) > level), None)
            rl = next((r["step"] for r in nl if r["r_lin"] > level), None)
            if gap is None and rl is None:
                lines.append(
                    f"{run.optimizer}: neither the linearized model's prediction gap nor the "
                    f"nonlinear path's R_lin exceeded {level} at a checkpoint within {steps} steps"
                )
                continue
            lin_gap = _first("the linearized model", "prediction gap", gap, level, steps)
            nl_rlin = _first("the nonlinear path", "R_lin", rl, level, steps)
            lines.append(f"{run.optimizer}: {lin_gap}; {nl_rlin}")
        last = {p: run.rows(p)[-1] for p in result.spec.paths() if run.rows(p)}
        lines.append(f"{run.optimizer}, final step: " + "; ".join(
            f"{p} D_K {_cell(r['d_k'], r['d_k_se'])}, A_K {_cell(r['a_k'], r['a_k_se'])}, "
            f"target {r['target']:.3f}, retention {r['retention']:.3f}" for p, r in last.items()
        ))  # fmt: skip
        axes = run.data["axes"]
        if axes.get("fallback"):
            lines.append(f"{run.optimizer}: the Jacobian-vector products ran in the fallback "
                         f"mode {axes['forward_mode']!r}, the same function as the model's "
                         "forward (expected on CPU, not a failure); the mode before it is not "
                         f"available here: {axes['fallback']}")  # fmt: skip
    lines.append(
        "Kernel diagnostics are offline evidence on this probe split and metric: they do not "
        "prove stability off the split, under another metric, or that the run is in the "
        "kernel regime of any theorem (seed 003 §0x09J, §0x09P)."
    )
    return lines


def report(result: KernelResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the study's HTML report (notes, tables, the diagnostics figure, the §0x09J table
    of what the diagnostics do not prove, failures, the spec) into ``out_dir``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    figures = []
    if any(r.data is not None for r in result.runs):
        figures.append(rep.save_figure(
            diagnostics_figure(result), folder, "kernel_diagnostics",
            caption="R_lin, D_J, D_K and A_K against step (symlog, linear up to step 1) for "
            "every path, one row per optimizer; error bars: jackknife standard error over the "
            "output probes.",
        ))  # fmt: skip
    runs = [rep.RunSummary(result.pretrain.identity, result.pretrain.termination, "pretrain")]
    for run in result.runs:
        last = run.rows("nonlinear")[-1] if run.rows("nonlinear") else {}
        summary = {"R_lin": last.get("r_lin"), "D_K": last.get("d_k")}
        runs.append(rep.RunSummary(run.state.identity, run.state.termination, run.optimizer,
                                   summary))  # fmt: skip
    return rep.write_result_report(
        result, folder, runs=runs, tables=[*tables(result), limits_table()], figures=figures,
        notes=notes(result),
    )  # fmt: skip


__all__ = ["LIMITS", "KernelResult", "OptimizerRun", "collect", "diagnostics_figure",
           "diagnostics_table", "limits_table", "notes", "report",
           "tables"]  # fmt: skip
