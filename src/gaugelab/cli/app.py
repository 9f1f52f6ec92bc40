"""The ``gaugelab`` command: the Typer app, one module per command group, and ``main``.

Commands are registered in the order ``gaugelab --help`` lists them: ``optimizers``, ``check``
(cli/optimizers.py, cli/check.py), ``bench`` (below: its machinery is cli/bench.py), ``twins``,
``report`` and ``runs`` (cli/runs.py), ``zoo`` and ``dial`` (cli/zoo.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gaugelab.cli import check, optimizers, runs, twins, zoo
from gaugelab.cli._console import wide_console
from gaugelab.cli._errors import fail
from gaugelab.cli.bench import available_benchmarks, run_benchmark

app = typer.Typer(
    name="gaugelab",
    help=(
        "Optimizer geometry on factored models. The main job: `gaugelab twins` (the "
        "attention-head twin protocol). Also: the optimizer zoo and its certificates "
        "(`optimizers`, `check`), the matrix-sensing zoo and the Adam-p dial (`zoo`, `dial`), "
        "the run store (`runs`, `report`) and benchmarks (`bench`)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def bench(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Benchmarks to run (default: all), e.g. optim msign."),
    ] = None,
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Folder of bench_*.py files (default: the repo's benchmarks/)."),
    ] = None,
    quick: Annotated[bool, typer.Option(help="Fewer repeats, for a first look.")] = False,
) -> None:
    """Performance benchmarks, each printed as a ratio against a peer timed in the same run."""
    try:
        found = available_benchmarks(directory)
        chosen = names or sorted(found)
        unknown = [n for n in chosen if n not in found]
        if unknown:
            raise ValueError(
                f"bench: unknown benchmark(s) {', '.join(unknown)}; available: "
                f"{', '.join(sorted(found)) or 'none'}"
            )
        out = wide_console()
        for name in chosen:
            out.print(run_benchmark(found[name], quick=quick, console=out))
    except (ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None


optimizers.register(app)
check.register(app)
app.command()(bench)
twins.register(app)
runs.register(app)
zoo.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
