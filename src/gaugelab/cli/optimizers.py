"""``gaugelab optimizers``: the zoo and its claimed behaviour under each gauge group."""

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gaugelab.cli._errors import guarded
from gaugelab.lazy import LazyModule

_equivariance_verdicts = LazyModule("gaugelab.equivariance.verdicts")
_optim = LazyModule("gaugelab.optim")

console = Console()


def optimizers(
    details: Annotated[
        bool, typer.Option("--details", help="Also list default hyperparameters and sources.")
    ] = False,
) -> None:
    """List the optimizer zoo with its equivariance claims per gauge group."""
    short = {
        _equivariance_verdicts.EQUIVARIANT: "[green]equivariant[/]",
        _equivariance_verdicts.BREAKS: "[red]breaks[/]",
    }
    table = Table(title="gaugelab optimizer zoo: claimed behaviour under each gauge group")
    table.add_column("rule", style="bold", no_wrap=True)
    table.add_column("update")
    table.add_column("O(k)", no_wrap=True)
    table.add_column("±perm", no_wrap=True)
    table.add_column("GL(k)", no_wrap=True)
    for name, rule in _optim.OPTIMIZERS.items():
        cells = []
        for group in _optim.CLAIM_GROUPS:
            c = rule.claims[group]
            cells.append(short[c.property] + ("*" if c.note else ""))
        table.add_row(name, rule.summary, *cells)
    console.print(table)
    console.print(
        "O(k): orthogonal gauge (U Q, V Q); ±perm: signed permutations; GL(k): (U A, V A⁻ᵀ). "
        "* depends on hyperparameters (adam-p is equivariant at p = 0; scaled-gd under GL(k) at "
        "damping = 0). "
        "Certify any optimizer with `gaugelab check`; --details lists defaults and sources."
    )
    if details:
        for name, rule in _optim.OPTIMIZERS.items():
            hyper = ", ".join(f"{k}={v}" for k, v in rule.hyperparameters().items())
            console.print(f"\n[bold]{name}[/]: {hyper}")
            for group in _optim.CLAIM_GROUPS:
                c = rule.claims[group]
                note = f" ({c.note})" if c.note else ""
                console.print(f"  {group}: {c.property}{note} — {c.source}")


def register(app: typer.Typer) -> None:
    """Add ``gaugelab optimizers`` to ``app``."""
    app.command()(guarded(optimizers))
