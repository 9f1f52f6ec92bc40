"""Commands ``gaugelab zoo`` and ``gaugelab dial``: the matrix-sensing experiments.

Each parses its options into a spec, makes one library call (:func:`gaugelab.experiments.run_zoo`
or :func:`~gaugelab.experiments.run_dial`: run the study, collect, write the report) and renders
the tables it returns.
"""

from typing import Annotated

import typer
from rich.text import Text

from gaugelab.cli._console import count, print_outcome, run_study, wide_console
from gaugelab.cli._errors import fail, guarded
from gaugelab.cli._options import (
    RunOptions,
    check_memory,
    comma_separated,
    names,
    nonempty_study,
    study_command,
)
from gaugelab.lazy import LazyModule

_sensing_dial = LazyModule("gaugelab.experiments.sensing.dial")
_sensing_zoo = LazyModule("gaugelab.experiments.sensing.zoo")

__all__ = ["dial", "register", "zoo"]

QUICK_STEPS = 2000
QUICK_SEEDS = (42,)

_SENSING_OPTIONS = {
    "n": "--size", "rank": "--rank", "m": "--measurements", "init_scale": "--init-scale",
    "schedule": "--schedule", "steps": "--steps", "seeds": "--seeds", "dtype": "--dtype",
    "tail": "--tail",
}  # fmt: skip
ZOO_OPTIONS = {**_SENSING_OPTIONS, "rules": "--rules", "decayed": "--decayed", "lr_grids": "--lr",
               "convex": "--convex"}  # fmt: skip
"""ZooSpec fields → the options of ``gaugelab zoo`` (for its error messages)."""
DIAL_OPTIONS = {**_SENSING_OPTIONS, "ps": "--ps", "lrs": "--lrs", "mean": "--mean",
                "gd_reference": "--gd"}  # fmt: skip
"""DialSpec fields → the options of ``gaugelab dial``."""


def _size_options(spec) -> str:
    """The options that set a sensing spec's memory: ``--size 200000, --measurements 2399982,
    3 seeds``."""
    return (f"--size {spec.n}, --measurements {spec.measurement_count()}, "
            f"{count(len(spec.seeds), 'seed')}")  # fmt: skip


def _budget(steps: int | None, seeds: str | None, quick: bool, base: dict) -> dict:
    """``steps`` and ``seeds`` as given, else the quick look's, else the spec's defaults."""
    return {
        "steps": steps if steps is not None else (QUICK_STEPS if quick else base["steps"]),
        "seeds": comma_separated(seeds, "--seeds")
        if seeds is not None
        else (QUICK_SEEDS if quick else base["seeds"]),
    }


def _lr_overrides(items: list[str]) -> dict[str, tuple[float, ...]]:

    grids = {}
    for item in items:
        rule, sep, values = item.partition("=")
        if not sep or not rule.strip():
            raise ValueError(f"--lr {item!r}: expected RULE=lr1,lr2,… e.g. --lr adam=1e-4,1e-3")
        key = rule.strip().replace("-", "_")
        if key not in _sensing_zoo.LearningRateGrids.model_fields:
            known = ", ".join(
                f.replace("_", "-") for f in _sensing_zoo.LearningRateGrids.model_fields
            )
            raise ValueError(f"--lr {item!r}: no rule {rule.strip()!r}; rules with a grid: {known}")
        grids[key] = comma_separated(values, "--lr", float)
    return grids


Dtype = Annotated[str, typer.Option(help="float32 (the reference) or float64.")]
Quick = Annotated[bool, typer.Option(help=f"{QUICK_STEPS} steps, seed 42 only: a first look.")]


@study_command
def zoo(
    size: Annotated[
        int, typer.Option("--size", help="Matrix size n (60 with --rank 5: the size check).")
    ] = 40,
    rank: Annotated[int, typer.Option(help="Planted rank r*.")] = 3,
    measurements: Annotated[int | None, typer.Option(help="m (default 2·r*(2n − r*)).")] = None,
    init_scale: Annotated[float, typer.Option(help="Factor init scale.")] = 1e-3,
    schedule: Annotated[
        str,
        typer.Option(
            help="reference (cosine for the decayed set), constant or cosine (every rule)."
        ),
    ] = "reference",
    tail: Annotated[
        list[float] | None,
        typer.Option("--tail", help="Spectral tail τ; repeat for a grid (one study per τ)."),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Step budget (default 20000).")] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated seeds (default 42,123,456).")
    ] = None,
    rules: Annotated[
        str | None, typer.Option(help="Comma-separated rules (default: the reference nine).")
    ] = None,
    decayed: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated rules on the cosine schedule (default muon,signum,lion,rmsprop)."
        ),
    ] = None,
    lr: Annotated[
        list[str] | None, typer.Option("--lr", help="Override a grid: RULE=lr1,lr2,… (repeatable).")
    ] = None,
    convex: Annotated[
        bool, typer.Option(help="Minimum-nuclear-norm row (needs gaugelab[convex]).")
    ] = True,
    dtype: Dtype = "float32",
    quick: Quick = False,
    study: Annotated[
        str | None, typer.Option(
            callback=nonempty_study, help="Study name (default: zoo-HASH, HASH from the spec)."
        )
    ] = None,
    *,
    run_options: RunOptions,
) -> None:
    """The matrix-sensing optimizer zoo (docs/protocols.md §3): every rule, seeds × learning
    rates as one ensemble per rule, the protocol's rate selection, the table and the split
    verdict.

    The 60 × 60 rank-5 check: --size 60 --rank 5 --rules gd,adam,muon --decayed muon.
    Runs already completed in the store are not run again; a run killed mid-way resumes from
    its last checkpoint (every 2,000 steps) when the same command is run again.
    """
    console = wide_console()
    try:
        base = _sensing_zoo.ZooSpec().model_dump()
        overrides = _lr_overrides(lr or [])
        grids = {**base["lr_grids"], **overrides}
        fields = dict(
            n=size,
            rank=rank,
            m=measurements,
            init_scale=init_scale,
            schedule=schedule,
            dtype=dtype,
            convex=convex,
            lr_grids=grids,
            **_budget(steps, seeds, quick, base),
        )
        if rules is not None:
            fields["rules"] = names(rules)
        if decayed is not None:
            fields["decayed"] = names(decayed)
        specs = [_sensing_zoo.ZooSpec(**fields, tail=t) for t in (tail or [0.0])]
        if len(specs) > 1 and (study is not None or run_options.out is not None):
            raise ValueError(
                f"--study/--out name one study; {len(specs)} --tail values make {len(specs)} "
                "studies (each named from its spec, each with its own report folder)"
            )
        for spec in specs:
            check_memory(spec.memory_estimate(), _size_options(spec))
    except ValueError as exc:
        raise fail(exc, ZOO_OPTIONS) from None
    unused = sorted(set(overrides) - set(specs[0].rules))
    if unused:
        typer.echo(
            f"warning: --lr {', '.join(unused)}: not among the rules run "
            f"({', '.join(specs[0].rules)}); ignored", err=True,
        )  # fmt: skip
    for spec in specs:
        sweep = _sensing_zoo.plan(spec, study)
        header = (
            f"zoo: {count(len(spec.rules), 'rule')} × {count(len(spec.seeds), 'seed')}, "
            f"{spec.steps} steps, "
            f"n = {spec.n}, r* = {spec.rank}, τ = {spec.tail:g}, {spec.dtype}"
        )
        outcome = run_study(
            console, header, "rule runs", _sensing_zoo.run_zoo, spec, sweep=sweep,
            options=run_options, study=study,
        )
        split = outcome.result.split
        print_outcome(console, outcome, _sensing_zoo.tables(outcome.result), label_columns=1)
        if split is not None:
            style = "bold green" if split.clean else "bold red"
            console.print(Text(split.sentence(), style=style))
    if quick:
        console.print("This was the quick look; the full protocol is `gaugelab zoo`.")


@study_command
def dial(
    ps: Annotated[
        str | None, typer.Option("--ps", help="Comma-separated p (default 1,0.75,0.5,0.25,0).")
    ] = None,
    lrs: Annotated[
        str | None, typer.Option("--lrs", help="Shared grid (default 1e-3,3e-3,1e-2,3e-2,1e-1).")
    ] = None,
    mean: Annotated[str, typer.Option(help="rms (exact at p = 0) or geometric.")] = "rms",
    size: Annotated[int, typer.Option("--size", help="Matrix size n.")] = 40,
    rank: Annotated[int, typer.Option(help="Planted rank r*.")] = 3,
    init_scale: Annotated[float, typer.Option(help="Factor init scale.")] = 1e-3,
    schedule: Annotated[
        str, typer.Option(help="reference/constant (no decay) or cosine.")
    ] = "reference",
    steps: Annotated[int | None, typer.Option(help="Step budget (default 30000).")] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated seeds (default 42,123,456).")
    ] = None,
    gd: Annotated[bool, typer.Option(help="Train gd for the reference line.")] = True,
    dtype: Dtype = "float32",
    quick: Quick = False,
    study: Annotated[
        str | None, typer.Option(
            callback=nonempty_study, help="Study name (default: dial-HASH, HASH from the spec)."
        )
    ] = None,
    *,
    run_options: RunOptions,
) -> None:
    """The Adam-p dial (docs/protocols.md §4): recovery error and effective rank as Adam's
    denominator is pooled toward one scalar, with the per-p rate arm and the fixed-rate arm.

    Runs already completed in the store are not run again; a run killed mid-way resumes from
    its last checkpoint when the same command is run again.
    """
    console = wide_console()
    try:
        base = _sensing_dial.DialSpec().model_dump()
        spec = _sensing_dial.DialSpec(
            ps=comma_separated(ps, "--ps", float) if ps is not None else base["ps"],
            lrs=comma_separated(lrs, "--lrs", float) if lrs is not None else base["lrs"],
            mean=mean,
            n=size,
            rank=rank,
            init_scale=init_scale,
            schedule=schedule,
            gd_reference=gd,
            dtype=dtype,
            **_budget(steps, seeds, quick, base),
        )
        check_memory(spec.memory_estimate(), _size_options(spec))
    except ValueError as exc:
        raise fail(exc, DIAL_OPTIONS) from None
    sweep = _sensing_dial.plan(spec, study)
    header = (
        f"dial: p ∈ {list(spec.ps)} × {count(len(spec.lrs), 'rate')} × "
        f"{count(len(spec.seeds), 'seed')}, "
        f"{spec.steps} steps, {spec.mean} mean, {spec.dtype}"
    )
    outcome = run_study(
        console, header, "dial runs", _sensing_dial.run_dial, spec, sweep=sweep,
        options=run_options, study=study,
    )
    print_outcome(console, outcome, _sensing_dial.tables(outcome.result), label_columns=1)
    if quick:
        console.print("This was the quick look; the full protocol is `gaugelab dial`.")


def register(app: typer.Typer) -> None:
    """Add ``gaugelab zoo`` and ``gaugelab dial`` to ``app``."""
    app.command()(guarded(zoo))
    app.command()(guarded(dial))
