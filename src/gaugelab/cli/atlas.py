"""``gaugelab atlas``: every optimizer a module exports, certified under each group and problem.

Parses the options into an :class:`~gaugelab.experiments.atlas.spec.AtlasSpec` (discovering the
sources' optimizers), makes one library call (:func:`gaugelab.experiments.atlas.run.run_atlas`)
and renders what it returns: tables, ``--json``, or ``--markdown``. Heavy imports (torch, the
experiment) happen inside the command function, so that ``gaugelab --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gaugelab.cli._console import count, failure_line, print_outcome, run_study, wide_console
from gaugelab.cli._errors import RUNS_FAILED, fail, guarded
from gaugelab.cli._options import (
    RunOptions,
    check_dtype,
    names,
    study_command,
)
from gaugelab.lazy import LazyModule

_atlas = LazyModule("gaugelab.experiments.atlas.run")

__all__ = ["atlas", "register"]

OPTIONS = {
    "source": "--source", "only": "--only", "groups": "--groups", "problems": "--problems",
    "steps": "--steps", "draws": "--draws", "seed": "--seed", "dtype": "--dtype",
    "timeout": "--timeout",
}  # fmt: skip
"""atlas_spec's arguments and AtlasSpec's fields → the options that set them."""


def _listed(text: str, option: str) -> tuple[str, ...]:
    values = names(text)
    if not values:
        raise ValueError(f"{option} is empty; allowed: comma-separated names")
    return values


@study_command
def atlas(
    source: Annotated[
        str,
        typer.Option(
            help="Modules whose optimizers to check, comma-separated: torch.optim, "
            "pytorch_optimizer, heavyball (pip install 'gaugelab[atlas]'), or a module of "
            "your own (myopts for a myopts.py in the current directory)."
        ),
    ] = "torch.optim",
    only: Annotated[
        str | None,
        typer.Option(help="Only these optimizers: class names (Adam) or module:Class."),
    ] = None,
    groups: Annotated[
        str, typer.Option(help="Gauge groups, comma-separated (see gaugelab check --help).")
    ] = "orthogonal,general-linear",
    problems: Annotated[
        str, typer.Option(help="Check problems, comma-separated: sensing, quadratic, attention.")
    ] = "sensing,attention",
    steps: Annotated[int, typer.Option(help="Optimizer steps per run of the triplet.")] = 10,
    draws: Annotated[int, typer.Option(help="Independent group elements per check.")] = 3,
    dtype: Annotated[str, typer.Option(help="float64 (certification) or float32.")] = "float64",
    seed: Annotated[int, typer.Option(help="Seeds the problems and the draws.")] = 0,
    timeout: Annotated[
        float,
        typer.Option(help="Seconds one check may take; over it the check is recorded as timeout."),
    ] = 300.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the atlas as JSON (no tables).")
    ] = False,
    as_markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the atlas as a Markdown table (no tables).")
    ] = False,
    *,
    run_options: RunOptions,
) -> None:
    """Certify every optimizer a module exports: one gaugelab check per group × problem.

    Finds every torch.optim.Optimizer class the --source modules export and runs the twin
    triplet of `gaugelab check` on each, under each group, on each problem. Every check is a
    run in the store: a rerun checks only what is missing, whose package version changed, or
    what timed out. Checks run in --max-workers processes, each under --timeout. An optimizer
    that raises, or refuses the problem's parameters, is recorded with verdict error and its
    reason; one whose run became non-finite, diverged; one over time, timeout. Prints the
    verdict, the step-1 gauge / noise twin ratio and the seconds per check, then the reasons of
    the checks without a verdict; writes an HTML report (docs/commands/atlas.md).
    """
    if as_json and as_markdown:
        raise fail("--json and --markdown: choose one")
    console = wide_console()
    if as_json or as_markdown:  # stdout holds only the atlas; the rest goes to stderr
        wide = not sys.stderr.isatty() and "COLUMNS" not in os.environ
        console = Console(stderr=True, width=200 if wide else None)
    try:
        check_dtype(dtype)
        sources = _listed(source, "--source")
        chosen = _listed(only, "--only") if only is not None else ()
        spec = _atlas.atlas_spec(
            sources, only=chosen, groups=_listed(groups, "--groups"),
            problems=_listed(problems, "--problems"), steps=steps, draws=draws, dtype=dtype,
            seed=seed, timeout=timeout,
        )  # fmt: skip
        sweep = _atlas.plan(spec)
    except ValueError as exc:
        raise fail(exc, OPTIONS) from None
    total = len(spec.optimizers) * len(spec.groups) * len(spec.problems)
    header = (
        f"atlas of {', '.join(sources)}: {count(len(spec.optimizers), 'optimizer')} × groups "
        f"{', '.join(spec.groups)} × problems {', '.join(spec.problems)} = {count(total, 'check')} "
        f"({spec.steps} steps, {spec.draws} draws, {spec.dtype}, --timeout {spec.timeout:g} s)"
    )
    outcome = run_study(
        console, header, "atlas checks", _atlas.run_atlas, spec, sweep=sweep, options=run_options
    )
    result = outcome.result
    if not (as_json or as_markdown):
        notes = [Text(line) for line in _atlas.notes(result)]
        print_outcome(console, outcome, _atlas.tables(result), notes=notes, label_columns=1)
        return
    typer.echo(_atlas.EXPERIMENT.to_json(result) if as_json else _atlas.markdown(result))
    for run in result.failures:
        console.print(failure_line(run.identity, run.termination, run.message))
    if outcome.report is not None:
        console.print(Text(f"report: {outcome.report}"))
    if result.failures:
        raise typer.Exit(code=RUNS_FAILED)


def register(app: typer.Typer) -> None:
    """Add ``gaugelab atlas`` to ``app``."""
    app.command()(guarded(atlas))
