"""The ``gaugelab`` command: the Typer app, one module per command group, and ``main``.

Commands are registered in the order ``gaugelab --help`` lists them: ``optimizers``, ``check``
(cli/optimizers.py, cli/check.py), ``bench`` (cli/bench.py), ``twins``,
``report`` and ``runs`` (cli/runs.py), ``zoo`` and ``dial`` (cli/zoo.py).
"""

from __future__ import annotations

import typer

from gaugelab.cli import bench, check, optimizers, runs, twins, zoo

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


optimizers.register(app)
check.register(app)
bench.register(app)
twins.register(app)
runs.register(app)
zoo.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
