"""The ``gaugelab`` command: the Typer app, one module per command group, and ``main``.

Commands are registered in the order ``gaugelab --help`` lists them: ``optimizers``, ``check``
(cli/optimizers.py, cli/check.py), ``atlas`` (cli/atlas.py), ``bench`` (cli/bench.py),
``twins``, ``lora`` (cli/lora.py),
``report`` and ``runs`` (cli/runs.py), ``zoo`` and ``dial`` (cli/zoo.py). Every command is then
guarded (cli/_errors.py): Ctrl-C prints ``interrupted`` and exits 130, a failure of the machine
(full disk, read-only folder, a path under a regular file) is one line, never a traceback.
"""

from importlib.metadata import PackageNotFoundError, version  # 50 ms: only for --version
from typing import Annotated

import typer

from gaugelab.cli import (
    atlas,
    bench,
    check,
    intrinsic,
    learn_forget,
    lora,
    optimizers,
    runs,
    twins,
    zoo,
)
from gaugelab.cli._errors import guarded

app = typer.Typer(
    name="gaugelab",
    help=(
        "Optimizer geometry on factored models. The main job: `gaugelab twins` (the "
        "attention-head twin protocol). Also: the optimizer zoo and its certificates "
        "(`optimizers`, `check`; `atlas`: every optimizer a module exports, checked), the "
        "matrix-sensing zoo and the Adam-p dial (`zoo`, `dial`), "
        "LoRA adapters: fine-tuning, inspection, comparison and composition, gauge twins and "
        "kernel diagnostics (`lora`), the intrinsic dimension (`intrinsic-dim`), the "
        "learning–forgetting rank study with a sealed test set (`learn-forget`), the run "
        "store (`runs`, `report`) and benchmarks (`bench`)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def _version(show: bool) -> None:
    if show:
        try:
            typer.echo(f"gaugelab {version('gaugelab')}")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            typer.echo("gaugelab (not installed: no package metadata)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Optimizer geometry on factored models."""


def _guard_every_command(cli: typer.Typer) -> None:
    for command in cli.registered_commands:
        command.callback = guarded(command.callback)
    for group in cli.registered_groups:
        _guard_every_command(group.typer_instance)


optimizers.register(app)
check.register(app)
atlas.register(app)
bench.register(app)
twins.register(app)
lora.register(app)
runs.register(app)
zoo.register(app)
intrinsic.register(app)
learn_forget.register(app)
_guard_every_command(app)


def main() -> None:
    """Console-script entry point."""
    app()
