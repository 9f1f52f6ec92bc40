"""The learning–forgetting study's tables, figures, notes and report.

Source: biderman2024lora (Fig. 3: learning against forgetting; Fig. 6: the full update's
spectrum); seed 003 §0x0BD (the trade-off is empirical), §0x0BS (frontier ≠ feasible set),
§0x0BT (test is a report), §0x0CG (a seed range is not an interval), §0x0BX (what is not shown).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from gaugelab.experiments.learn_forget.figures import energy_figure, pareto_figure
from gaugelab.experiments.learn_forget.notes import notes
from gaugelab.experiments.learn_forget.results import LearnForgetResult
from gaugelab.experiments.learn_forget.train import DOMAINS3
from gaugelab.experiments.lora.spec import ALL_TARGETS
from gaugelab.study.report import builder as rep

__all__ = ["report", "tables"]


def _fmt(x: float | None, digits: int = 3) -> str | None:
    return None if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def candidate_table(result: LearnForgetResult, block: str) -> rep.Table:
    """Validation evidence per candidate of ``block`` at its validation-chosen checkpoint."""
    m = result.measured[block]
    decision = result.decision if block == "a" else None
    rows: list[list[Any]] = []
    for r in m.records:
        op = r.operational
        lora = r.method in ("lora", "rslora")
        tail = r.reconstruction.tail_energy if lora and r.reconstruction is not None else None
        overlap = m.overlaps.get(r.candidate_id)
        status = "—"
        if r.method == "base":
            status = "reference"
        elif block != "a":
            status = "described only"
        elif decision is not None:
            broken = decision.violations.get(r.candidate_id, ())
            status = (
                "selected"
                if decision.chosen == r.candidate_id
                else ("feasible" if not broken else "fails " + ", ".join(broken))
            )
        rows.append(
            [
                r.candidate_id,
                m.chosen.get(r.candidate_id, 0),
                r.cost.trainable_parameters,
                r.cost.optimizer_state_numel,
                r.cost.wall_seconds if r.method != "base" else None,
                op.target,
                op.retention,
                op.stress,
                op.target_gain,
                op.forgetting,
                op.stress_gain,
                tail,
                None if overlap is None else f"{overlap[0]:.2f} / {overlap[1]:.2f}",
                ("yes" if r.candidate_id in decision.frontier else "no") if decision else "—",
                status,
            ]
        )
    seeds = rep.seeds_phrase(result.spec.finetune.seeds)
    return rep.Table(
        title=f"Candidates on validation (block {block}), each at its validation-chosen checkpoint",
        columns=[
            "candidate",
            "checkpoint step",
            "trainable params",
            "optimizer state",
            "wall s",
            "target val loss",
            "retention val loss",
            "stress val loss",
            "target gain",
            "forgetting",
            "stress gain",
            "full-update tail at r",
            "overlap row / col",
            "Pareto",
            "gates",
        ],
        rows=rows,
        caption=f"Mean over {seeds} (nats per character). Gains are oriented "
        "(L_base − L, higher is better); forgetting is L − L_base on the retention domain. "
        "The tail is the full update's energy beyond rank r at its own chosen checkpoint (a "
        "gate, never the objective); overlap is the min-rank overlap of the LoRA update's row "
        "and column spaces with the full update's leading rank-r spaces (Haar baseline r/d).",
    )


def checkpoint_table(result: LearnForgetResult, block: str = "a") -> rep.Table:
    """Every candidate's declared checkpoints on validation (target / retention / stress)."""
    m = result.measured[block]
    steps = result.spec.checkpoint_steps()
    rows = []
    for cid, values in m.checkpoints.items():
        by_step = dict(values)
        rows.append(
            [
                cid,
                *(
                    "/".join(_fmt(by_step[s][d]) or "—" for d in DOMAINS3)
                    + (" ◀" if m.chosen.get(cid) == s else "")
                    for s in steps
                ),
            ]
        )
    return rep.Table(
        title=f"Declared checkpoints on validation (block {block}): target / retention / stress",
        columns=["candidate", *(f"step {s}" for s in steps)],
        rows=rows,
        caption="◀: the checkpoint chosen by the declared rule (lowest target validation loss; "
        "ties: the earliest), before any candidate is compared.",
    )


def contrast_table(result: LearnForgetResult) -> rep.Table:
    """Paired contrasts against full fine-tuning over the shared nuisance tuples."""
    rows = []
    for c in result.contrasts:
        lo_hi = None if c.range is None else f"[{c.range[0]:.3f}, {c.range[1]:.3f}]"
        rows.append(
            [
                c.block,
                c.candidate,
                c.metric,
                len(c.pairs),
                c.mean,
                c.run_variance,
                lo_hi,
                ", ".join(n.label for n in c.incomplete) or "—",
            ]
        )
    return rep.Table(
        title="Paired contrasts against full fine-tuning (candidate − full, per nuisance tuple)",
        columns=[
            "block",
            "candidate",
            "metric",
            "pairs",
            "mean D",
            "run variance (n−1)",
            "range (not an interval)",
            "incomplete pairs",
        ],
        rows=rows,
        caption="D_s = Y_candidate − Y_full on the same seed (initialisation, data order; no "
        "dropout), each at its validation-chosen checkpoint. An incomplete pair stays "
        "incomplete; no seed is substituted (seed 003 §0x0CF).",
    )


def factor_table(result: LearnForgetResult) -> rep.Table | None:
    """The LoRA candidates' factor record at their chosen checkpoint (seed 003 §0x08L)."""
    rows = [
        [
            r.candidate_id,
            *(
                r.trajectory.summary.get(k)
                for k in ("norm_A", "norm_B", "norm_update", "numerical_rank")
            ),
        ]
        for r in result.measured["a"].records
        if r.trajectory is not None
    ]
    if not rows:
        return None
    return rep.Table(
        title="LoRA factors at the chosen checkpoint (block a; the §0x08L record, summarised)",
        columns=["candidate", "‖A‖_F", "‖B‖_F", "‖s·B A‖_F", "numerical rank of s·B A"],
        rows=rows,
        caption="Norms pooled over the adapted projections (root of the summed squares), mean "
        "over seeds; the numerical rank is the mean over projections and seeds. Trajectory "
        "evidence, not evidence of useful feature learning (§0x0BJ).",
    )


def energy_table(result: LearnForgetResult, block: str = "a") -> rep.Table:
    """The full update's 90%-energy rank per layer and projection over checkpoints."""
    energy = result.measured[block].energy
    order = {name: i for i, name in enumerate(ALL_TARGETS)}
    paths = sorted(
        {p for ranks in energy.values() for p in ranks},
        key=lambda p: (int(p.split(".")[1]), order[p.rsplit(".", 1)[1]]),
    )
    rows = [[step, *(ranks.get(p) for p in paths)] for step, ranks in sorted(energy.items())]
    return rep.Table(
        title=f"Full fine-tuning (block {block}): energy rank r_0.9 of ΔW = W_ft − W_0 per layer "
        "and projection",
        columns=[
            "step",
            *(p.removeprefix("blocks.").replace(".attn", "").replace(".mlp", "") for p in paths),
        ],
        rows=rows,
        caption="The smallest r whose leading singular values hold 90% of ‖ΔW‖_F², mean over "
        "seeds (biderman2024lora Fig. 6; seed 003 §0x0BE): not a recommended LoRA rank.",
    )


def test_table(result: LearnForgetResult) -> rep.Table | None:
    """The held-out test report (opened once, after the freeze), or ``None``."""
    if result.test is None:
        return None
    base = result.test.get("base")
    rows = []
    for role in ("base", "selected", "full reference"):
        entry = result.test.get(role)
        if entry is None:
            continue
        means = {d: sum(entry[d]) / len(entry[d]) for d in DOMAINS3}
        b = {d: sum(base[d]) / len(base[d]) for d in DOMAINS3} if base else None
        rows.append(
            [
                role,
                entry["candidate"],
                entry["step"],
                *(means[d] for d in DOMAINS3),
                None if b is None else b["target"] - means["target"],
                None if b is None else means["retention"] - b["retention"],
                None if b is None else b["stress"] - means["stress"],
            ]
        )
    return rep.Table(
        title="Held-out test (opened once, after the freeze; no reselection)",
        columns=[
            "role",
            "candidate",
            "step",
            "target test loss",
            "retention test loss",
            "stress test loss",
            "target gain",
            "forgetting",
            "stress gain",
        ],
        rows=rows,
        caption=f"Frozen release {result.test.get('frozen', '')[:16]}…; the full fine-tuning "
        "row is a reference, not a competitor: nothing is selected on test (§0x0BT).",
    )


def tables(result: LearnForgetResult) -> list[rep.Table]:
    """Candidates (each block), checkpoints, paired contrasts, energy ranks, the test."""
    out = [candidate_table(result, b) for b in result.measured]
    out += [checkpoint_table(result, b) for b in result.measured]
    if result.contrasts:
        out.append(contrast_table(result))
    factors = factor_table(result)
    if factors is not None:
        out.append(factors)
    out += [energy_table(result, b) for b, m in result.measured.items() if m.energy]
    test = test_table(result)
    if test is not None:
        out.append(test)
    if result.access_log:
        out.append(access_table(result))
    return out


def access_table(result: LearnForgetResult) -> rep.Table:
    """Every event of the sealed test store, accepted or refused, in order."""
    rows = [
        [
            e["ordinal"],
            e["event"],
            "yes" if e["accepted"] else "refused",
            e.get("at"),
            (e.get("frozen") or {}).get("candidate_id"),
            e.get("reason"),
        ]
        for e in result.access_log
    ]
    return rep.Table(
        title="Sealed test: access log (every event, from the run store)",
        columns=["#", "event", "accepted", "at (UTC)", "frozen candidate", "reason"],
        rows=rows,
        caption=f"Design digest {result.design_digest[:16]}…; the test opens once, only "
        "after a freeze, and a changed gate is a new study that may not reopen these splits.",
    )


def report(result: LearnForgetResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write the study's HTML report (notes, tables, the Pareto and energy-rank figures, the
    failures, the spec) into ``out_dir``; returns ``report.html``.

    Raises:
        FileExistsError: ``out_dir`` already holds a report or figures.
    """
    folder = Path(out_dir)
    figures = []
    if result.measured["a"].records:
        figures.append(
            rep.save_figure(
                pareto_figure(result),
                folder,
                "pareto",
                caption="Target gain against forgetting per candidate (validation, mean over "
                "seeds); ringed: the Pareto front (with stress gain and cost); star: the selected "
                "candidate; dashed: the gates (when inside the view).",
            )
        )
    if result.measured["a"].energy:
        figures.append(
            rep.save_figure(
                energy_figure(result),
                folder,
                "full_update_rank",
                caption="90%-energy rank of the full fine-tuning update per layer and projection "
                "at each declared checkpoint.",
            )
        )
    runs = [
        rep.RunSummary(c.state.identity, c.state.termination, f"{c.candidate} ({c.block})", {})
        for c in result.cells
    ]
    failures = [
        rep.Failure(c.state.identity, c.state.termination, c.state.message)
        for c in result.cells
        if not c.state.completed
    ]
    return rep.write_result_report(
        result, folder, runs=runs, tables=tables(result), figures=figures, notes=notes(result),
        failures=failures,
    )  # fmt: skip
