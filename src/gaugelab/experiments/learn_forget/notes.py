"""The learning–forgetting study's notes: the verdict lines and what the study does not show.

Source: biderman2024lora; seed 003 §0x0BD (the trade-off is empirical), §0x0BF, §0x0BJ,
§0x0BS, §0x0BT, §0x0CG (a seed range is not an interval), §0x0CH.
"""

from __future__ import annotations

from gaugelab.experiments.learn_forget.results import LearnForgetResult

__all__ = ["not_shown", "notes"]


def not_shown(result: LearnForgetResult) -> str:
    """The paragraph on what the study does not show, for this study's size and design."""
    ft = result.spec.finetune
    full = next((r for r in result.measured["a"].records if r.method == "full"), None)
    size = (
        f"{full.cost.trainable_parameters:,} parameters"
        if full is not None
        else f"{ft.pretrain.n_layers} layers of width {ft.pretrain.d_model}"
    )
    n = len(ft.seeds)
    blocks = len(result.spec.blocks())
    corpora = (
        "one target corpus" if blocks == 1 else f"{blocks} target corpora (block b only described)"
    )
    spread = (
        "One seed gives no spread at all"
        if n == 1
        else f"{n} seeds give a range, not a confidence interval (§0x0CG)"
    )
    return (
        f"What this study does not show: it is one small character model ({size}) on "
        f"{corpora}, {n} seed{'s' if n != 1 else ''} per candidate, one learning rate per method "
        f"chosen before the study, {ft.steps} steps; the trade-off it measures is empirical and "
        "local to this pipeline (seed 003 §0x0BD) — not a universal rank, not a reproduction of "
        "biderman2024lora's Llama-2-7B results, not evidence that no lower-rank solution exists "
        "(the full update's energy rank describes one optimizer's path, §0x0BF). The selected "
        "candidate answers this study's declared gates only; other gates select differently "
        f"without any model changing (§0x0BS). {spread}. Overlap with "
        "the full update is geometry, not retention (§0x0BJ)."
    )


def notes(result: LearnForgetResult) -> list[str]:
    """The verdict lines (learning and forgetting against full fine-tuning, the selection, the
    test), then what the study does not show."""
    lines: list[str] = []
    m = result.measured["a"]
    ops = {r.candidate_id: r.operational for r in m.records}
    full = ops.get("full")
    if full is not None:
        for cid, op in ops.items():
            if cid in ("full", "base"):
                continue
            learns = "less" if op.target_gain < full.target_gain else "more"
            forgets = "less" if op.forgetting < full.forgetting else "more"
            lines.append(
                f"{cid}: learns {learns} (gain {op.target_gain:.3f} vs "
                f"{full.target_gain:.3f}) and forgets {forgets} (forgetting "
                f"{op.forgetting:.3f} vs {full.forgetting:.3f}) than full "
                "fine-tuning on validation"
            )
    d = result.decision
    if d is not None:
        if d.chosen is None:
            lines.append(f"{d.reason}; the test stays sealed")
        else:
            lines.append(
                f"selected {d.chosen} at step {m.chosen.get(d.chosen, 0)} by the declared "
                f"gates and tie-break (feasible: {', '.join(d.feasible)})"
            )
    opened = any(e["event"] == "open" and e["accepted"] for e in result.access_log)
    refused = [e for e in result.access_log if e["event"] == "open" and not e["accepted"]]
    current = result.current_design_digest
    if current is not None and current != result.design_digest:
        lines.append(
            "the design changed since the study was sealed (declared "
            f"{result.design_digest[:12]}…, now {current[:12]}…): a change after outcomes is a "
            "new study; nothing more opens"
        )
    if refused and not opened:
        lines.append(f"the test was refused: {refused[-1]['reason']}")
    if "b" in result.measured:
        a_digests = {f.sha256 for f in result.spec.block_corpus("a").target.files}
        b_files = result.spec.block_corpus("b").target.files
        shared = sorted(f.path for f in b_files if f.sha256 in a_digests)
        line = (
            "block b is described beside block a: it enters neither the selection nor the test "
            "(pooling: none, declared in the design)"
        )
        if shared:
            line += (
                f"; it shares {len(shared)} file(s) with block a's target ({', '.join(shared[:3])})"
            )
        lines.append(line)
    if result.incomplete:
        lines.append(f"not complete (no record): {', '.join(result.incomplete)}")
    lines.append(not_shown(result))
    return lines
