"""Tables, φ heatmaps and the HTML reports of ``lora compare`` and ``lora compose``.

Source: seed 003 §0x06E–§0x06J (the columns), hu2021lora Figure 3 (the φ heatmaps, with a
random Gaussian pair beside them), seed 003 §0x05C–§0x05D (the ledger and interference).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from gaugelab.adapters.names import short_names
from gaugelab.experiments.lora_compare.compose import ComposeResult
from gaugelab.experiments.lora_compare.results import SIDES, CompareResult, ModuleComparison
from gaugelab.lowrank.subspaces.compare import phi_matrix
from gaugelab.study.report import builder as rep

__all__ = ["compare_report", "compare_tables", "compose_report", "compose_tables", "phi_figure"]


def _deg(values: list[float], index: int) -> float | None:
    return math.degrees(values[index]) if values else None


def _ratio(x: float, ref: float) -> float | None:
    return x / ref if ref and math.isfinite(x) and math.isfinite(ref) else None


def side_table(result: CompareResult, side: str) -> rep.Table:
    """Per module: principal angles and every similarity of one side (row or column)."""
    rows = []
    null = any(getattr(m, f"null_{side}") is not None for m in result.modules)
    for m in result.modules:
        c = getattr(m, side)
        row = [m.module, c["rank_s"], c["rank_t"], c["ambient"], _deg(c["angles"], 0),
               _deg(c["angles"], -1), c["projection_mass"], c["min_rank_overlap"],
               c["haar_overlap"], _ratio(c["min_rank_overlap"], c["haar_overlap"]),
               c["coverage_s_by_t"], c["coverage_t_by_s"], c["chordal_squared"],
               c["projector_squared"], c["cosine_excess"]]  # fmt: skip
        if null:
            n = getattr(m, f"null_{side}")
            row += [n.overlap_mean if n else None, n.overlap_std if n else None]
        rows.append(row)
    space = "row space (inputs read, ℝ^d_in)" if side == "row" else "column space (outputs " \
        "written, ℝ^d_out)"  # fmt: skip
    columns = ["module", "r_a", "r_b", "d", "θ_1 °", "θ_p °", "mass M", "Ω_min", "Haar Ω",
               "Ω / Haar", "C(a|b)", "C(b|a)", "d_chord²", "‖P_a − P_b‖²",
               "cos excess"]  # fmt: skip
    if null:
        columns += ["null Ω mean", "null Ω std"]
    return rep.Table(
        title=f"Update {space}: {result.a} (a) against {result.b} (b)",
        columns=columns,
        rows=rows,
        caption=f"Rank policy: {result.policy}. Principal angles θ_1 ≤ … ≤ θ_p, p = min(r_a, "
        "r_b) (atan2 of sine and cosine); M = Σcos²θ; Ω_min = M/p (containment, not "
        "equality); C(a|b) = M/r_a and C(b|a) = M/r_b; d_chord² = p − M; ‖P_a − P_b‖² = r_a + "
        "r_b − 2M; Haar Ω = max(r_a, r_b)/d, the expectation for independent random subspaces "
        "of these ranks (a baseline, not a p-value); cos excess: how far a raw cosine "
        "exceeded 1 before clipping. Seed 003 §0x06D–§0x06H.",
    )  # fmt: skip


def factor_table(result: CompareResult) -> rep.Table | None:
    """The update's spans against the factors' own spans (they differ after a collapse)."""
    rows = [[m.module, m.row["min_rank_overlap"], m.factor_row["min_rank_overlap"],
             m.factor_row["rank_s"], m.factor_row["rank_t"], m.column["min_rank_overlap"],
             m.factor_column["min_rank_overlap"], m.factor_column["rank_s"],
             m.factor_column["rank_t"]]
            for m in result.modules
            if m.factor_row is not None and m.factor_column is not None]  # fmt: skip
    if not rows:
        return None
    return rep.Table(
        title="Update spans against factor spans (Ω_min)",
        columns=["module", "update row", "factor row(A)", "rank A_a", "rank A_b",
                 "update column", "factor col(B)", "rank B_a", "rank B_b"],
        rows=rows,
        caption="Factor spans: row(A) and col(B) at each factor's numerical rank; they equal "
        "the update's spans at full factor rank and differ once a factor has collapsed "
        "(seed 003 §0x06B, §0x06J).",
    )  # fmt: skip


def _top(m: ModuleComparison, side: str) -> float | None:
    phi = getattr(m, f"phi_{side}")
    return phi[0][-1] if phi else None


def family_table(result: CompareResult) -> rep.Table:
    """Means over each module family: overlap against its Haar baseline, and the top direction."""
    rows = []
    for fam in dict.fromkeys(m.family for m in result.modules):
        group = [m for m in result.modules if m.family == fam]
        for side in SIDES:

            def mean(values):
                vals = [v for v in values if v is not None and math.isfinite(v)]
                return sum(vals) / len(vals) if vals else None

            om = mean(getattr(m, side)["min_rank_overlap"] for m in group)
            hb = mean(getattr(m, side)["haar_overlap"] for m in group)
            rows.append([fam, side, len(group), om, hb, _ratio(om or math.nan, hb or 0.0),
                         mean(getattr(m, side)["coverage_s_by_t"] for m in group),
                         mean(getattr(m, side)["coverage_t_by_s"] for m in group),
                         mean(_top(m, side) for m in group)])  # fmt: skip
    return rep.Table(
        title=f"By module family: {result.a} (a) against {result.b} (b)",
        columns=["family", "side", "modules", "mean Ω_min", "mean Haar Ω", "Ω / Haar",
                 "mean C(a|b)", "mean C(b|a)", "top-1 of a in b"],
        rows=rows,
        caption="top-1 of a in b: φ(1, J) = ‖q_1ᵀ Q_b‖², how much of a's leading update "
        "direction lies inside b's retained span (its Haar expectation is J/d).",
    )  # fmt: skip


def compare_tables(result: CompareResult) -> list[rep.Table]:
    """The family summary, the row and column tables, the factor-span table."""
    tables = [family_table(result), side_table(result, "row"), side_table(result, "column"),
              factor_table(result)]  # fmt: skip
    return [t for t in tables if t is not None]


def _mean_phi(mods: list[ModuleComparison], side: str) -> torch.Tensor | None:
    mats = [torch.tensor(getattr(m, f"phi_{side}"), dtype=torch.float64) for m in mods
            if getattr(m, f"phi_{side}")]  # fmt: skip
    if not mats:
        return None
    i = min(t.shape[0] for t in mats)
    j = min(t.shape[1] for t in mats)
    return torch.stack([t[:i, :j] for t in mats]).mean(0)


def _random_phi(d: int, i: int, j: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    Q1 = torch.linalg.qr(torch.randn(d, i, generator=gen, dtype=torch.float64))[0]
    Q2 = torch.linalg.qr(torch.randn(d, j, generator=gen, dtype=torch.float64))[0]
    return phi_matrix(Q1, Q2).phi


def phi_figure(result: CompareResult, side: str, seed: int = 0) -> Figure | None:
    """φ(i, j) averaged over blocks, one panel per projection, and a random Gaussian pair of
    the same ``d``, ``I``, ``J`` beside them (LoRA paper Figure 3 style)."""
    label = short_names([m.module for m in result.modules])  # GPT-2: attn.c_proj, mlp.c_proj
    panels = []
    for leaf in dict.fromkeys(label.values()):
        mods = [m for m in result.modules if label[m.module] == leaf]
        phi = _mean_phi(mods, side)
        if phi is not None:
            d = mods[0].shape[1] if side == "row" else mods[0].shape[0]
            panels.append((f"{leaf} ({mods[0].family}), d={d}", phi, d))
    if not panels:
        return None
    _, first, d0 = panels[0]
    panels.append((f"random Gaussian, d={d0}", _random_phi(d0, *first.shape, seed), d0))
    width = 2.6 * len(panels) + 1
    fig = Figure(figsize=(width, 3.4))  # no layout engine: constrained layout costs seconds
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.6 / width, right=1 - 1.0 / width, bottom=0.17, top=0.8,
                        wspace=0.45)  # fmt: skip
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    image = None
    for ax, (title, phi, _) in zip(axes, panels, strict=True):
        image = ax.imshow(phi.numpy(), vmin=0.0, vmax=1.0, cmap="viridis", origin="upper",
                          aspect="auto", interpolation="nearest",
                          extent=(0.5, phi.shape[1] + 0.5, phi.shape[0] + 0.5, 0.5))  # fmt: skip
        ax.set(title=title, xlabel=f"j ({result.b})", ylabel=f"i ({result.a})")
        ax.title.set_fontsize("small")
        for axis, n in ((ax.xaxis, phi.shape[1]), (ax.yaxis, phi.shape[0])):
            if n <= 8:
                axis.set_ticks(range(1, n + 1))
            else:
                axis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, cax=fig.add_axes((1 - 0.75 / width, 0.17, 0.012, 0.63)), label="φ(i, j)")
    fig.suptitle(f"{side} space: φ(i, j) = ‖Q_a^iᵀ Q_b^j‖²/min(i, j)", fontsize="medium")
    return fig


def _json(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(type(value).__name__)


def to_json(result: CompareResult | ComposeResult) -> str:
    """A comparison or a composition as JSON (what ``compare.json`` / ``compose.json`` hold;
    ``NaN`` written as ``NaN``)."""
    return json.dumps(dataclasses.asdict(result), indent=1, allow_nan=True, default=_json)


def compare_report(result: CompareResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``report.html``, the φ heatmaps and ``compare.json`` into ``out_dir``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report, figures or ``compare.json``.
    """
    folder = Path(out_dir)
    if (folder / "report.html").exists() or (folder / "compare.json").exists():
        raise FileExistsError(f"{folder} already holds a comparison; choose another folder")
    figures = []
    for side in SIDES:
        fig = phi_figure(result, side)
        if fig is not None:
            figures.append(rep.save_figure(fig, folder, f"phi-{side}", caption=(
                f"φ over the leading {side}-space directions of each update (mean over "
                "blocks), and φ of two independent random Gaussian subspaces of the same size "
                "(expected max(i, j)/d).")))  # fmt: skip
    with open(folder / "compare.json", "x", encoding="utf-8") as handle:
        handle.write(to_json(result))
    spec = {"a": result.source_a, "b": result.source_b, "policy": result.policy}
    return rep.write_report(
        rep.StudyReport(name=f"compare {result.a} vs {result.b}", spec=spec,
                        tables=compare_tables(result), figures=figures, notes=result.notes,
                        study=False),
        folder,
    )  # fmt: skip


def compose_tables(result: ComposeResult) -> list[rep.Table]:
    """The rank ledger, the interference table and (when measured) the losses."""
    fmt = lambda xs: ", ".join(f"{x:.4g}" for x in xs)  # noqa: E731
    ledger = rep.Table(
        title=f"Rank ledger of the composition ({result.method}"
        + (f", rank {result.rank})" if result.rank else ")"),
        columns=["module", "r_j", "s_j", "λ_j", "rank B_cat", "rank A_cat", "bound",
                 "measured rank", "written rank", "rel. residual", "max |Δ| of paths"],
        rows=[[m.module, fmt(m.ranks), fmt(m.scales), fmt(m.coefficients), m.rank_b_cat,
               m.rank_a_cat, m.rank_bound, m.measured_rank, m.written_rank,
               m.relative_residual, m.max_abs_difference] for m in result.ledger],
        caption="bound = min(rank B_cat, rank A_cat, Σ r_j) (seed 003 §0x05B); measured: the "
        "numerical rank of B_cat A_cat; s_j from each source's own (α, r, rsLoRA); max |Δ| "
        "of paths: B_cat A_cat against Σ λ_j s_j B_j A_j formed densely.",
    )  # fmt: skip
    pairs = {(o.module, o.first, o.second): o for o in result.outputs}
    rows = []
    for m in result.ledger:
        for p in m.pairs:
            o = pairs.get((m.module, p.first, p.second))
            rows.append([m.module, f"{p.first}·{p.second}", p.row_overlap, p.column_overlap,
                         p.cross_term, p.cosine, o.output_cross_term if o else None,
                         o.output_cosine if o else None])  # fmt: skip
    tables = [ledger]
    if rows:
        outputs = ("output terms: (2/N)Σ⟨ΔW_i x, ΔW_j x⟩ on N = "
                   f"{result.outputs[0].n_samples} real layer inputs of the pretrained model on "
                   "the targets' validation windows" if result.outputs
                   else "output terms: not computed (no base model and data)")  # fmt: skip
        tables.append(rep.Table(
            title="Novelty and interference of each pair of sources",
            columns=["module", "pair", "row Ω_min", "column Ω_min", "2⟨ΔW_i, ΔW_j⟩_F",
                     "Frobenius cosine", "output cross term", "output cosine"],
            rows=rows,
            caption="Span overlap (novelty) and coefficients inside the spans (interference) "
            f"are separate measurements (seed 003 §0x05D); {outputs}. Sources numbered in the "
            "order given.",
        ))  # fmt: skip
    if result.stages:
        measured = "retention" in result.stages[0]
        n = len(result.sources)
        tables.append(rep.Table(
            title="Merge stage by stage (the running sum after each source)",
            columns=["stage", "source", "Σ rank of stage", "Σ rank of total",
                     "Σ growth of rank A_cat", "Σ growth of rank B_cat",
                     *([f"target {j}" for j in range(n)] + ["retention"] if measured else [])],
            rows=[[s["stage"], s["source"], s["rank_stage"], s["rank_total"], s["new_row"],
                   s["new_column"],
                   *([s[f"target[{j}]"] for j in range(n)] + [s["retention"]] if measured
                     else [])]
                  for s in result.stages],
            caption="Sums over modules of numerical ranks (seed 003 §0x05G). Growth of rank "
            "A_cat / B_cat: the dimensions the stage added to the span of the concatenated down "
            "/ up factors at the factors' float tolerance — factor spans, not the update's: "
            "it counts directions that are only nearly shared, so it can be > 0 where the "
            "interference table's update-span overlap is ≈ 1; a stage adds 0 only where its "
            "directions repeat earlier ones to within that tolerance. The total's rank can "
            "grow by less (cancellation)."
            + (" Losses in nats/char; target j is source j's." if measured else ""),
        ))  # fmt: skip
    if result.losses:
        names = [f"target of {s}" for s in result.sources]
        tables.append(rep.Table(
            title="Validation loss (nats/char): the composition against each adapter alone",
            columns=["model", *names, "retention"],
            rows=[[label, *(v[f"target[{j}]"] for j in range(len(names))), v["retention"]]
                  for label, v in result.losses.items()],
            caption="Each source's target is the validation split of the corpus it was "
            "fine-tuned on; retention: the pretrain corpus's (tiny-shakespeare).",
        ))  # fmt: skip
    return tables


def compose_report(result: ComposeResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``report.html`` and ``compose.json`` into ``out_dir``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or ``compose.json``.
    """
    folder = Path(out_dir)
    if (folder / "report.html").exists() or (folder / "compose.json").exists():
        raise FileExistsError(f"{folder} already holds a report; choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "compose.json", "x", encoding="utf-8") as handle:
        handle.write(to_json(result))
    spec = {"sources": result.sources, "weights": list(result.weights), "method": result.method,
            "rank": result.rank, "out": str(result.out)}  # fmt: skip
    return rep.write_report(
        rep.StudyReport(name=f"compose {Path(result.out).name}", spec=spec,
                        tables=compose_tables(result), notes=result.notes, study=False),
        folder,
    )  # fmt: skip
