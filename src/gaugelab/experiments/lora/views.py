"""Tables, figures and the HTML report of :func:`gaugelab.experiments.lora.run.inspect_lora`.

Source: seed 003 §0x04I (the policy table), §0x04D (the truncation columns), §0x04M (the
evidence ladder), §0x0BE–0x0BF (energy rank by layer and module).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gaugelab.adapters.names import short_names
from gaugelab.experiments.lora.inspect import InspectResult, to_json
from gaugelab.study.report import builder as rep
from gaugelab.study.report.folders import refuse_overwrite

_POLICIES = (("algebraic", "algebraic"), ("numerical", "numerical"), ("stable", "stable"),
             ("energy 99%", "energy"), ("entropy-energy", "entropy-energy"),
             ("entropy-RV", "entropy-roy-vetterli"))  # fmt: skip


def _rel(x: float, ref: float) -> float | None:
    return x / ref if ref > 0 else None


def _unit(result: InspectResult) -> str:
    """What a loss is per: a character (gaugelab's model), a token (a Hugging Face base)."""
    return "char" if result.data is None else "token"


def policy_table(result: InspectResult) -> rep.Table:
    """Every rank policy of each module's update (seed 003 §0x04I, §0x0BE)."""
    rows = [
        [m.module, f"{m.shape[0]}×{m.shape[1]}", m.configured, m.energy90,
         *(m.policy(pid) for _, pid in _POLICIES)]
        for m in result.modules
    ]  # fmt: skip
    numerical = next((p for m in result.modules for p in m.policies
                      if p.policy_id.startswith("numerical")), None)  # fmt: skip
    rule = str(numerical.parameters.get("tolerance_rule", "")) if numerical else ""
    if len({m.shape for m in result.modules}) > 1:  # the rule names the first module's shape
        rule = re.sub(r", \(m, n\) = \(\d+, \d+\)$", ", (m, n) each module's shape", rule)
    threshold = "τ" if numerical and numerical.parameters.get("rtol") is None else "rtol·σ_1"
    return rep.Table(
        title=f"Rank policies of each module's update ({result.label}, {result.source})",
        columns=["module", "shape", "configured", "energy 90%", *(n for n, _ in _POLICIES)],
        rows=rows,
        caption="energy ρ: smallest k with Σ_{i≤k} σ_i² ≥ ρ·‖ΔW‖_F² (90% is seed 003 §0x0BE's); "
        f"numerical: #{{σ_i > {threshold}}}, {threshold.split('·')[0]} = {rule}; stable: "
        "‖ΔW‖_F²/‖ΔW‖_2²; entropy "
        "ranks on σ² (energy) and on σ (Roy–Vetterli). Singular values in float64.",
    )  # fmt: skip


def energy_pivot(result: InspectResult) -> rep.Table | None:
    """90%-energy rank by layer (rows) and module (columns): §0x0BF's comparison."""
    layers = sorted({m.layer for m in result.modules if m.layer is not None})
    label = short_names([m.module for m in result.modules])
    names = list(dict.fromkeys(label[m.module] for m in result.modules if m.layer is not None))
    if not layers:
        return None
    value = {(m.layer, label[m.module]): m.energy90 for m in result.modules}
    rows = [[f"block {layer}", *(value.get((layer, n)) for n in names)] for layer in layers]
    return rep.Table(
        title="90%-energy rank of the update by layer and module",
        columns=["layer", *names],
        rows=rows,
        caption="seed 003 §0x0BE–0x0BF: the rank that explains 90% of each update's squared "
        "Frobenius energy; not a recommended LoRA rank.",
    )


def truncation_table(result: InspectResult) -> rep.Table:
    """The weight-space rank sweep of each module (seed 003 §0x04D)."""
    rows = [
        [m.module, t["rank"], t["retained_energy"], t["retained_mass"], t["frobenius_squared"],
         _rel(t["frobenius_squared"], sum(s * s for s in m.sigma)), t["spectral"],
         "yes" if t["non_unique"] else ""]
        for m in result.modules
        for t in m.truncation
    ]  # fmt: skip
    return rep.Table(
        title="Weight-space truncation ΔW_r (leading r singular triplets)",
        columns=["module", "rank", "retained energy", "retained mass", "‖ΔW − ΔW_r‖_F²",
                 "relative", "σ_{r+1}", "non-unique"],
        rows=rows,
        caption="energy: Σσ² fractions; mass: Σσ fractions (different policies); "
        "non-unique: σ_r ties σ_{r+1}.",
    )  # fmt: skip


def ladder_table(result: InspectResult) -> rep.Table | None:
    """Per module and rank: weight residual, output residuals, end-to-end target loss (where a
    loss is computed)."""
    if not result.has_ladder:
        return None
    ref = result.reference.get("target")
    rows = [
        [m.module, row.rank, f"{row.support_rank}/{m.shape[1]}",
         _rel(row.weight_residual, row.update_energy),
         _rel(row.weight_residual_ow, row.update_energy),
         _rel(row.output_residual_svd, row.output_energy),
         _rel(row.output_residual_ow, row.output_energy),
         *(() if ref is None else (row.loss_svd - ref, row.loss_ow - ref,
                                   row.loss_ow - row.loss_svd))]
        for m in result.modules
        for row in m.ladder
    ]  # fmt: skip
    first = next(m.ladder[0] for m in result.modules if m.ladder)
    losses = ["Δ target loss SVD", "Δ target loss OW", "OW − SVD"] if ref is not None else []
    inputs = result.data or "target validation"
    unit = _unit(result)
    tail = (f"Δ loss against the model with the whole update ({ref:.4f} nats/{unit})"
            if ref is not None else "no end-to-end loss (no language-model head)")  # fmt: skip
    return rep.Table(
        title="Evidence ladder per module (only that module's update replaced)",
        columns=["module", "rank", "input support", "weight resid. SVD", "weight resid. OW",
                 "output resid. SVD", "output resid. OW", *losses],
        rows=rows,
        caption=f"SVD: weight-space truncation; OW: output-weighted truncation on the layer's "
        f"captured inputs ({inputs}, N = {first.n_samples}). "
        "Input support: the rank of the inputs' covariance above its support tolerance, of "
        "d_in; OW drops ΔW on the directions outside it (the data cannot see them), so its "
        "weight residual can be large while its output residual is small. "
        f"Residuals relative to ‖ΔW‖_F² and (1/N)‖XΔWᵀ‖_F²; {tail}. Seed 003 §0x04M: none "
        "of these levels implies the next.",
    )  # fmt: skip


def joint_table(result: InspectResult) -> rep.Table | None:
    """Every module replaced at once, per rank; with the whole update and with none (the
    retention columns where there is a retention domain)."""
    if not result.joint:
        return None
    r = result.reference
    kept = "retention" in r
    rows = [["whole update", r["target"], r["target"],
             *((r["retention"], r["retention"]) if kept else ())]]  # fmt: skip
    rows += [[f"rank {j.rank}", j.target_svd, j.target_ow,
              *((j.retention_svd, j.retention_ow) if kept else ())]
             for j in result.joint]  # fmt: skip
    rows.append(["no update (pretrained)", r["base_target"], r["base_target"],
                 *((r["base_retention"], r["base_retention"]) if kept else ())])  # fmt: skip
    logged = ""
    if "logged_target" in r:
        how = " with the unmerged adapter" if result.method == "lora" else ""
        logged = (
            f" The run logged {r['logged_target']:.4f} (target) and "
            f"{r['logged_retention']:.4f} (retention){how}."
        )
    on = "" if result.data is None else f" Loss on {result.data}."
    return rep.Table(
        title="Evidence ladder, every module replaced jointly: validation loss",
        columns=["replacement", "target (SVD)", "target (OW)",
                 *(("retention (SVD)", "retention (OW)") if kept else ())],
        rows=rows,
        caption="Merged weights W₀ + ΔŴ in every adapted module at once; each module's "
        "output-weighted truncation uses its inputs in the unmodified model." + logged + on,
    )  # fmt: skip


def inspect_tables(result: InspectResult) -> list[rep.Table]:
    """The policy table, the energy pivot, the truncation table, and the ladder tables."""
    tables = [policy_table(result), energy_pivot(result), truncation_table(result),
              ladder_table(result), joint_table(result)]  # fmt: skip
    return [t for t in tables if t is not None]


def spectrum_figure(result: InspectResult) -> Figure:
    """``σ_i / σ_1`` against ``i`` of every module (log y), attention and MLP side by side."""
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)  # a display-free canvas; pyplot's global state is never touched
    axes = fig.subplots(1, 2, sharey=True)
    label = short_names([m.module for m in result.modules])
    colors = rep.palette([label[m.module] for m in result.modules])
    styles = ["-", "--", ":", "-."]
    for ax, family in zip(axes, ("attention", "mlp"), strict=True):
        for m in (m for m in result.modules if m.family == family):
            top = m.sigma[0] if m.sigma and m.sigma[0] > 0 else 1.0
            values = [s / top if s > 0 else math.nan for s in m.sigma]
            leaf = label[m.module]
            ax.plot(range(1, len(values) + 1), values, color=colors[leaf],
                    linestyle=styles[(m.layer or 0) % len(styles)],
                    label=f"{leaf} (block {m.layer})", linewidth=1.2)  # fmt: skip
        ax.set_yscale("log")
        ax.set(title=f"{family} updates", xlabel="index i", ylabel="σ_i / σ_1")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="x-small", ncols=2)
    return fig


def ladder_figure(result: InspectResult) -> Figure:
    """Joint replacement: target validation loss against rank, weight-SVD and output-weighted,
    with the whole update and the pretrained model as lines."""
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ranks = [j.rank for j in result.joint]
    ax.plot(ranks, [j.target_svd for j in result.joint], marker="o", label="weight-SVD")
    ax.plot(ranks, [j.target_ow for j in result.joint], marker="s", label="output-weighted")
    ax.axhline(result.reference["target"], color="0.3", linestyle="--", label="whole update")
    ax.axhline(result.reference["base_target"], color="0.6", linestyle=":", label="pretrained")
    ax.set_xscale("log", base=2)
    ax.set(title="Every module truncated at rank r", xlabel="rank r",
           ylabel=f"target validation loss (nats/{_unit(result)})")  # fmt: skip
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig


INSPECT_FILES = ("report.html", "inspect.json")
"""The files of an inspection's folder, never overwritten (:func:`refuse_overwrite`)."""


def inspect_report(result: InspectResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``report.html``, the figures and ``inspect.json`` (every number) into ``out_dir``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report, figures or ``inspect.json``.
    """
    folder = Path(out_dir)
    refuse_overwrite(folder, INSPECT_FILES)
    figures = [rep.save_figure(spectrum_figure(result), folder, "spectrum",
                               caption="Singular values of each update, relative to the first "
                               "(line style: block).")]  # fmt: skip
    if result.joint:
        figures.append(rep.save_figure(ladder_figure(result), folder, "ladder",
                                       caption="End-to-end target loss with every module's "
                                       "update truncated at rank r."))  # fmt: skip
    with open(folder / "inspect.json", "x", encoding="utf-8") as handle:
        handle.write(to_json(result))
    notes = [f"not computed: {line}" for line in result.not_computed]
    if result.other_updates:
        notes.append("also updated, not analysed (not a projection): "
                     + ", ".join(result.other_updates))  # fmt: skip
    spec = {"source": result.source, "candidate": result.label, "seed": result.seed,
            "ranks": list(result.ranks)}  # fmt: skip
    return rep.write_report(
        rep.StudyReport(name=f"inspect {result.label} ({result.source})", spec=spec,
                        tables=inspect_tables(result), figures=figures, notes=notes,
                        study=False),
        folder,
    )  # fmt: skip
