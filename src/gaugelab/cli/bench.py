"""``gaugelab bench``: discover and run the benchmarks in ``benchmarks/bench_<name>.py``.

A benchmark file defines ``TITLE`` (str), ``COLUMNS`` (list of column names) and
``run(*, quick, progress) -> list[list]`` returning table rows; ``progress`` is a
``rich.progress.Progress`` it may add tasks to. The ratio column compares against a peer timed
in the same run, since absolute seconds on a shared machine mean little.
"""

from __future__ import annotations

import importlib.util
import timeit
from pathlib import Path
from types import ModuleType
from typing import Annotated

import torch
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gaugelab.cli._console import wide_console
from gaugelab.cli._errors import fail


def matmul_rate(number: int = 20, size: int = 1024) -> float:
    """This machine's fp32 matmul rate now, in GFLOP/s (best of 3 repeats of ``number``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = min(timeit.repeat(lambda: a @ b, number=number, repeat=3)) / number
    return 2 * size**3 / best / 1e9


def _default_dir() -> Path:
    repo = Path(__file__).resolve().parents[3] / "benchmarks"
    return repo if repo.is_dir() else Path.cwd() / "benchmarks"


def available_benchmarks(directory: Path | None = None) -> dict[str, Path]:
    """Map benchmark name → file for every ``bench_<name>.py`` in ``directory``.

    Raises:
        FileNotFoundError: the folder does not exist.
    """
    folder = Path(directory) if directory is not None else _default_dir()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"bench: no benchmarks folder at {folder}; run from the repository or pass --dir"
        )
    return {p.stem.removeprefix("bench_"): p for p in sorted(folder.glob("bench_*.py"))}


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gaugelab_bench_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"bench: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for attr in ("TITLE", "COLUMNS", "run"):
        if not hasattr(module, attr):
            raise ValueError(f"bench: {path} does not define {attr}")
    return module


def run_benchmark(path: Path, *, quick: bool = False, console: Console | None = None) -> Table:
    """Run one benchmark file and return its results as a rich table."""
    module = _load(path)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        rows = module.run(quick=quick, progress=progress)
    table = Table(title=module.TITLE)
    for col in module.COLUMNS:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*(str(x) for x in row))
    return table


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


def register(app: typer.Typer) -> None:
    """Add ``gaugelab bench`` to ``app``."""
    app.command()(bench)
