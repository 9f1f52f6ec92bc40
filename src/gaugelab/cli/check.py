"""``gaugelab check OPTIMIZER``: certify gauge equivariance with the twin triplet."""

import ast
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gaugelab.cli._console import working
from gaugelab.cli._defaults import GROUP_NAMES, PROBLEM_NAMES
from gaugelab.cli._errors import OPTIMIZER_FAILED, fail, guarded
from gaugelab.errors import NonFiniteError, OptimizerFailure
from gaugelab.lazy import LazyModule

console = Console()
torch = LazyModule("torch")
equivariance = LazyModule("gaugelab.equivariance")  # imports torch and scipy
verdicts = LazyModule("gaugelab.equivariance.verdicts")
optim_registry = LazyModule("gaugelab.optim.registry")

DTYPES = ("float64", "float32")
OPTIONS = {name: f"--{name}" for name in ("group", "problem", "steps", "draws", "dtype", "seed")}
"""check_equivariance's arguments → the options that set them (for its error messages)."""
_OBJECTS = {"attention": "logits / QK invariants"}


def _verdict_styles() -> dict[str, str]:
    """Verdict → its style (the verdicts module is loaded by then: the check imported it)."""
    v = verdicts
    return {v.EQUIVARIANT: "bold green", v.BREAKS: "bold red",
            v.PRECISION_LIMITED: "bold yellow", v.NONDETERMINISTIC: "bold magenta",
            v.INCONCLUSIVE: "bold"}  # fmt: skip


def check_equivariance(optimizer: str, **options: Any) -> Any:
    """:func:`gaugelab.equivariance.check_equivariance`, imported on the first check (it
    imports torch and scipy, which ``gaugelab --help`` must not)."""
    return equivariance.check_equivariance(optimizer, **options)


def _parse_opt(items: list[str]) -> dict:
    hyper = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise fail(f"--opt {item!r}: expected KEY=VALUE, e.g. --opt lr=0.01")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw  # a bare word such as mean=geometric
        hyper[key.replace("-", "_")] = value
    return hyper


def _check_opt_names(optimizer: str, hyper: dict) -> None:
    """Refuse an ``--opt`` key that a zoo rule does not take (a class given as
    ``package.module:Class`` checks its own keyword arguments)."""
    rules = optim_registry.OPTIMIZERS
    if optimizer not in rules:
        return
    allowed = [h for h in rules[optimizer].hyperparameters() if h != "member_dims"]
    unknown = [key for key in hyper if key not in allowed]
    if unknown:
        keys = ", ".join(f"--opt {key}=…" for key in unknown)
        raise fail(f"{keys}: {optimizer} has no such hyperparameter; allowed: "
                   f"{', '.join(allowed)}")  # fmt: skip


def _opt_message(message: str, hyper: dict) -> str:
    """A rule's refusal of an ``--opt`` value (``adam: lr=-1 …``), said as the option's."""
    for key in hyper:
        if any(f" {key}{mark}" in f" {message}" for mark in ("=", "[")):
            return f"--opt {message}"
    return message


def check(
    optimizer: Annotated[
        str,
        typer.Argument(
            help="A zoo name (see `gaugelab optimizers`) or a class as 'package.module:Class', "
            "e.g. torch.optim:Muon, or myopts:MyOpt for a myopts.py in the current directory "
            "(searched first, as `python -m` does)."
        ),
    ],
    group: Annotated[
        str, typer.Option(help=f"Gauge group: {', '.join(GROUP_NAMES)}.")
    ] = "orthogonal",
    problem: Annotated[
        str,
        typer.Option(
            help="'sensing' (U Vᵀ, n=6, k=3, rank 2, m=20), 'quadratic', or 'attention' "
            "(a small Transformer with its head gauge: logits and QK invariants compared)."
        ),
    ] = "sensing",
    steps: Annotated[int, typer.Option(help="Optimizer steps per run (>= 1).")] = 10,
    draws: Annotated[int, typer.Option(help="Independent group elements (>= 1).")] = 3,
    dtype: Annotated[str, typer.Option(help="float64 (certification) or float32.")] = "float64",
    seed: Annotated[int, typer.Option(help="Seeds the problem and the draws.")] = 0,
    opt: Annotated[
        list[str] | None,
        typer.Option(
            "--opt",
            help="Hyperparameter KEY=VALUE (repeatable); lr defaults to 3e-2. "
            "Values are Python literals: --opt betas='(0.9, 0.99)' --opt mean=geometric.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Certify an optimizer's gauge equivariance with the gauge / identity / noise twins.

    Runs the base problem and three twins from the same zero state, compares the represented
    objects (U Vᵀ; logits and QK invariants for --problem attention) after every step, and
    gives a verdict: equivariant, breaks, precision-limited, nondeterministic or inconclusive.
    The check computes the gradients itself before every step(), so an optimizer whose step()
    ignores the closure, or takes none, is checked too; one that does not move the parameters
    is inconclusive, never equivariant. An optimizer that raises (in its constructor or a
    step) or rebinds a parameter gets one line naming the phase, verdict ``error``, exit code
    4 (docs/errors.md).
    """
    if dtype not in DTYPES:
        raise fail(f"--dtype {dtype!r}; allowed: {', '.join(DTYPES)}")
    for option, value in (("--steps", steps), ("--draws", draws)):
        if value < 1:
            raise fail(f"{option} {value}; allowed: an integer >= 1")
    for option, value, allowed in (("--group", group, GROUP_NAMES),
                                   ("--problem", problem, PROBLEM_NAMES)):  # fmt: skip
        if value not in allowed:
            raise fail(f"{option} {value!r}; allowed: {', '.join(allowed)}")
    hyper = _parse_opt(opt or [])
    _check_opt_names(optimizer, hyper)
    equivariance.check_equivariance  # noqa: B018  imported before the progress starts

    try:
        with working(console, f"check: twins of {optimizer} under {group} on {problem}"):
            report = check_equivariance(
                optimizer,
                group=group,
                problem=problem,
                steps=steps,
                draws=draws,
                dtype=getattr(torch, dtype),
                seed=seed,
                **hyper,
            )
    except (ValueError, TypeError) as exc:
        raise fail(_opt_message(str(exc).removeprefix("check_equivariance: "), hyper),
                   OPTIONS) from None  # fmt: skip
    except NonFiniteError as exc:
        what = str(exc).removeprefix("check_equivariance: ")
        advice = "try a smaller learning rate, --opt lr=…"
        if as_json:  # stdout carries the status too: verdict diverged, as the atlas records it
            typer.echo(json.dumps({"optimizer": optimizer, "verdict": verdicts.DIVERGED,
                                   "phase": None, "reason": what, "hint": advice,
                                   "group": group, "problem": problem}))  # fmt: skip
        raise fail(f"the run diverged ({what}); {advice}") from None
    except OptimizerFailure as exc:
        if as_json:
            typer.echo(json.dumps({"optimizer": exc.optimizer, "verdict": verdicts.ERROR,
                                   "phase": exc.phase, "reason": exc.reason, "hint": exc.hint,
                                   "group": group, "problem": problem}))  # fmt: skip
        else:
            typer.echo(f"error: {exc}; verdict: {verdicts.ERROR}", err=True)
        raise typer.Exit(code=OPTIMIZER_FAILED) from None
    if as_json:
        typer.echo(report.to_json())
        return
    table = Table(
        title=(
            f"{report.optimizer} under {report.group} on {report.problem} ({report.dtype}); "
            f"relative Frobenius distance of {_OBJECTS.get(report.problem, 'U Vᵀ')} to the "
            f"base, max over {report.draws} draws"
        )
    )
    for col in ("step", "gauge twin", "identity twin", "noise twin", "gauge twin factors"):
        table.add_column(col, justify="right")
    gauge, ident, noise = (report.worst(t) for t in ("gauge", "identity", "noise"))
    factors = [max(r[t] for r in report.factor_distances) for t in range(report.steps)]
    for t in range(report.steps):
        table.add_row(
            str(t + 1), f"{gauge[t]:.2e}", f"{ident[t]:.2e}", f"{noise[t]:.2e}", f"{factors[t]:.2e}"
        )
    console.print(table)
    style = _verdict_styles().get(report.verdict, "bold")
    console.print(f"verdict: [{style}]{report.verdict}[/] — {report.explanation}")
    if report.claimed is not None:
        agree = "agrees with" if report.claimed == report.verdict else "DIFFERS from"
        console.print(f"the zoo claims [bold]{report.claimed}[/]; the check {agree} the claim")
    for note in report.notes:
        console.print(f"note: {note}")
    if report.verdict != verdicts.EQUIVARIANT and report.dtype == "float64":
        console.print("not certified equivariant in float64.")


def register(app: typer.Typer) -> None:
    """Add ``gaugelab check`` to ``app``."""
    app.command()(guarded(check))
