"""`gaugelab intrinsic-dim`: the d90 intrinsic-dimension protocol.

Parses its options into an :class:`~gaugelab.experiments.intrinsic.run.IntrinsicSpec`, makes one
library call (:func:`gaugelab.experiments.intrinsic.run.run_intrinsic_dim`) and renders what it
returns. Heavy imports (torch, the experiments) happen inside the command function, so that
``gaugelab --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from gaugelab.cli._console import print_outcome, run_study, wide_console
from gaugelab.cli._errors import fail, guarded
from gaugelab.cli._options import RunOptions, comma_separated, study_command
from gaugelab.lazy import LazyModule

_intrinsic = LazyModule("gaugelab.experiments.intrinsic.run")

__all__ = ["intrinsic_dim", "register"]

OPTIONS = {
    "problem": "--problem",
    "method": "--method",
    "family": "--family",
    "normalization": "--normalization",
    "dims": "--dims",
    "seeds": "--seeds",
    "lrs": "--lrs",
    "full_lrs": "--full-lrs",
    "steps": "--steps",
    "threshold": "--threshold",
    "threshold_value": "--threshold-value",
    "aggregator": "--aggregator",
    "hidden": "--hidden",
    "layers": "--layers",
    "dtype": "--dtype",
}
"""IntrinsicSpec fields → the command's options (for its error messages)."""


@study_command
def intrinsic_dim(
    problem: Annotated[
        str,
        typer.Option(
            help="scratch: an MLP on all ten digits from its initialization (Li et al.); "
            "finetune: pretrained on digits 0–4, adapted to 5–9 with a new head counted in d "
            "(Aghajanyan et al.); char: a character Transformer on tiny-shakespeare, next-"
            "character accuracy."
        ),
    ] = "scratch",
    method: Annotated[
        str, typer.Option(help="did (θ₀ + P u) or said (group scales in d).")
    ] = "did",
    family: Annotated[
        str, typer.Option(help="Projection: dense, orthonormal, sparse or fastfood.")
    ] = "dense",
    normalization: Annotated[
        str | None,
        typer.Option(
            help="Column normalization: unit-columns (the default of dense, sparse and "
            "fastfood); qr (orthonormal, its only one); fastfood also takes 1/p."
        ),
    ] = None,
    dims: Annotated[
        str | None,
        typer.Option(
            help="Grid of d (default 10,20,…,640; 8,32 with --quick). Each d must fit the "
            "problem: DID 1 <= d <= D; SAID m <= d <= D + m (its m group scales are inside d)."
        ),
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Projection seeds, >= 0 (default 0,1,2; 0,1 with --quick).")
    ] = None,
    lrs: Annotated[
        str | None,
        typer.Option(
            help="Subspace Adam learning rates, > 0, searched per (d, seed) (default "
            "0.01,0.03; 0.03 with --quick)."
        ),
    ] = None,
    full_lrs: Annotated[
        str | None,
        typer.Option(
            help="Full fine-tuning Adam learning rates, > 0, one reference run each (default "
            "0.001,0.003; 0.003 with --quick)."
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(help="Adam steps per trial (default 400; 40 with --quick).")
    ] = None,
    hidden: Annotated[
        int | None,
        typer.Option(
            help="Hidden width (scratch), d_model (char, even); >= 2, default 64 (16 with --quick)."
        ),
    ] = None,
    layers: Annotated[
        int | None, typer.Option(help="Hidden layers (scratch), blocks (char); >= 1, default 2.")
    ] = None,
    threshold: Annotated[
        str, typer.Option(help="historical (ratio · S_full) or normalized-gain (G_d ≥ τ).")
    ] = "historical",
    threshold_value: Annotated[float, typer.Option(help="The ratio or τ.")] = 0.9,
    aggregator: Annotated[
        str, typer.Option(help="Seed aggregator: median, mean or min.")
    ] = "median",
    quick: Annotated[bool, typer.Option(help="A tiny MLP, two d, two seeds: seconds.")] = False,
    dtype: Annotated[str, typer.Option(help="float32 (the protocol) or float64.")] = "float32",
    *,
    run_options: RunOptions,
) -> None:
    """Estimate d90: the smallest tested d whose subspace-trained score reaches the threshold.

    Runs the full fine-tuning reference (one run per --full-lrs value) and every (d, seed, lr)
    trial as a stored run; per (d, seed) the best evaluation accuracy over its trials is kept,
    aggregated over every seed (median; a failed seed counts as -inf, not passing) and compared
    with the target (historically 0.9 · S_full). The result is the first passing tested d with
    its grid bracket (prev, d], or the censoring state — `d90 <= d_min` when the first tested d
    passes, `> d_max / unresolved` when none does — never d_min or d_max standing in for an
    estimate; a d where every seed failed is a failing d (it can be the bracket's lower end);
    raw scores are never smoothed by a cumulative maximum. Every d is checked against the
    problem first (DID 1 <= d <= D, SAID m <= d <= D + m).
    Prints the per-d table, the estimate with its envelope and the raw records, and writes a
    figure (score against d per seed and aggregated, the threshold, the bracket) and a report.
    """
    console = wide_console()
    try:
        fields: dict = dict(
            problem=problem,
            method=method,
            family=family,
            threshold=threshold,
            threshold_value=threshold_value,
            aggregator=aggregator,
            dtype=dtype,
        )
        if normalization is not None or family == "orthonormal":
            fields["normalization"] = normalization or "qr"
        for name, text, kind in (
            ("dims", dims, int),
            ("seeds", seeds, int),
            ("lrs", lrs, float),
            ("full_lrs", full_lrs, float),
        ):
            if text is not None:
                fields[name] = comma_separated(text, OPTIONS[name], kind)
        for name, value in (("steps", steps), ("hidden", hidden), ("layers", layers)):
            if value is not None:
                fields[name] = value
        spec = _intrinsic.quick_spec(**fields) if quick else _intrinsic.IntrinsicSpec(**fields)
        sweep = _intrinsic.plan(spec)
        total = len(sweep.specs())
    except ValueError as exc:
        raise fail(exc, OPTIONS) from None
    header = (
        f"{spec.method.upper()} on {_intrinsic.PROBLEM_LABELS[spec.problem]}, "
        f"{spec.family} projection "
        f"({spec.normalization}): {total} runs (full reference × {len(spec.full_lrs)}, d in "
        f"{list(spec.dims)} × seeds {list(spec.seeds)} × lrs {list(spec.lrs)}), {spec.steps} "
        f"steps each"
    )
    outcome = run_study(
        console, header, "intrinsic-dim runs", _intrinsic.run_intrinsic_dim, spec, sweep=sweep,
        options=run_options,
    )
    result = outcome.result
    notes = [Text(n) for n in result.notes]
    if result.estimate is not None:
        notes.insert(0, Text(result.estimate.crossing.statement, style="bold"))
    print_outcome(console, outcome, _intrinsic.tables(result), notes=notes, label_columns=1)


def register(app: typer.Typer) -> None:
    """Add ``gaugelab intrinsic-dim`` to ``app``."""
    app.command("intrinsic-dim")(guarded(intrinsic_dim))
