"""``gaugelab bench``: discover and run the benchmarks in ``benchmarks/bench_<name>.py``.

A benchmark file defines ``TITLE`` (str), ``COLUMNS`` (list of column names) and
``run(*, quick, progress) -> list[list]`` returning table rows; ``progress`` is a
``rich.progress.Progress`` it may add tasks to. The ratio column compares against a peer timed
in the same run, since absolute seconds on a shared machine mean little.

Every benchmark times with :func:`time_calls`: each function is called once or more to warm up
(state, caches, compilation), then timed ``repeat`` times, the functions interleaved repeat by
repeat so a load that comes and goes hits both sides alike. A timing is shown as its median and
its range over the repeats (:meth:`Timing.cell`), a ratio as the ratio of medians with the range
of the repeat-by-repeat ratios (:func:`ratio_cell`): one slow repeat widens the range instead of
becoming the result. ``gaugelab bench`` pins torch (and any process it starts) to ``--threads``
threads, 1 by default, as the experiments run.
"""

import contextlib
import importlib.util
import os
import statistics
import time
import timeit
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gaugelab.cli._console import wide_console
from gaugelab.cli._errors import fail
from gaugelab.lazy import LazyModule

torch = LazyModule("torch")


def matmul_rate(number: int = 20, size: int = 1024) -> float:
    """This machine's fp32 matmul rate now, in GFLOP/s (best of 3 repeats of ``number``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = min(timeit.repeat(lambda: a @ b, number=number, repeat=3)) / number
    return 2 * size**3 / best / 1e9


WIDE = 2.0
"""A range of repeat-by-repeat ratios wider than this factor (max / min) is marked noisy."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one function, one sample per timed repeat.

    Attributes:
        samples: ``[repeat]`` seconds per call, in the order timed (each the mean over the
            repeat's ``number`` calls).
    """

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median seconds per call: the timing's value."""
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        """The fastest repeat (seconds per call)."""
        return min(self.samples)

    @property
    def high(self) -> float:
        """The slowest repeat (seconds per call)."""
        return max(self.samples)

    def cell(self, scale: float = 1e3, digits: int = 3) -> str:
        """``"median [low–high]"`` in units of ``1/scale`` seconds (default milliseconds)."""
        m, lo, hi = (scale * x for x in (self.median, self.low, self.high))
        return f"{_num(m, digits)} [{_num(lo, digits)}–{_num(hi, digits)}]"


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}" if abs(x) < 10 ** (6 - digits) else f"{x:.0f}"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's C++ start/stop lines) for the block."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_mib(fn: Callable[[], object]) -> tuple[float, object]:
    """``(peak MiB, value)`` of one call of ``fn``: the peak of live torch CPU allocations,
    the running sum of every recorded op's own allocations and frees in start-time order
    (``torch.profiler`` with ``profile_memory``), and what ``fn`` returned.

    Counts torch tensors only (not numpy or Python objects).
    """
    activities = [torch.profiler.ProfilerActivity.CPU]
    with _quiet_stderr(), torch.profiler.profile(activities=activities, profile_memory=True) as p:
        value = fn()
    live = peak = 0
    for event in sorted(p.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak / 2**20, value


def time_calls(
    functions: Mapping[str, Callable[[], object]],
    *,
    number: int,
    repeat: int,
    warmup: int = 1,
    progress: Callable[[], None] | None = None,
) -> dict[str, Timing]:
    """Time every function, interleaved repeat by repeat, after warming each up.

    Each function is called ``warmup`` times (not timed), then for each of ``repeat`` rounds
    every function in turn is called ``number`` times; a round's sample is its mean seconds per
    call (``time.perf_counter``). Interleaving puts the two sides of a ratio seconds apart in
    every round, so a load that starts or stops shifts both.

    Args:
        functions: name → a function of no arguments.
        number: calls per sample, ≥ 1.
        repeat: samples per function, ≥ 1 (3 or more for a meaningful median).
        warmup: untimed calls per function before the first round, ≥ 0.
        progress: called after every round (e.g. to advance a bar).

    Returns:
        name → :class:`Timing`, in the order of ``functions``.

    Raises:
        ValueError: ``number`` or ``repeat`` below 1, ``warmup`` below 0, or no function.
    """
    if not functions:
        raise ValueError("time_calls: functions is empty")
    for name, value, least in (("number", number, 1), ("repeat", repeat, 1),
                               ("warmup", warmup, 0)):  # fmt: skip
        if not isinstance(value, int) or value < least:
            raise ValueError(f"time_calls: {name}={value!r}; allowed: an integer >= {least}")
    for fn in functions.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeat):
        for name, fn in functions.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            samples[name].append((time.perf_counter() - start) / number)
        if progress is not None:
            progress()
    return {name: Timing(tuple(values)) for name, values in samples.items()}


def ratio_cell(numerator: Timing, denominator: Timing, digits: int = 2) -> str:
    """``numerator / denominator`` (e.g. peer / ours) as ``"3.10× [2.80–3.40]"``: the ratio of
    the medians, then the range of the round-by-round ratios (the two sides of a round of
    :func:`time_calls` ran seconds apart); ``" noisy"`` is appended when that range spans more
    than a factor :data:`WIDE` — rerun before trusting it.

    Raises:
        ValueError: the two timings have different numbers of samples.
    """
    if len(numerator.samples) != len(denominator.samples):
        raise ValueError(
            f"ratio_cell: {len(numerator.samples)} vs {len(denominator.samples)} samples; "
            "time both sides in one time_calls"
        )
    rounds = [a / b for a, b in zip(numerator.samples, denominator.samples, strict=True)]
    lo, hi = min(rounds), max(rounds)
    cell = f"{numerator.median / denominator.median:.{digits}f}× [{lo:.{digits}f}–{hi:.{digits}f}]"
    return cell + (" noisy" if hi > WIDE * lo else "")


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch threads, and ``OMP_NUM_THREADS`` /
    ``MKL_NUM_THREADS`` set to it for every process the block starts; restored afterwards.

    Raises:
        ValueError: ``threads`` below 1.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"--threads {threads!r}; allowed: an integer >= 1")

    before = torch.get_num_threads()
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {name: os.environ.get(name) for name in names}
    torch.set_num_threads(threads)
    os.environ.update(dict.fromkeys(names, str(threads)))
    try:
        yield
    finally:
        torch.set_num_threads(before)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _default_dir() -> Path:
    repo = Path(__file__).resolve().parents[3] / "benchmarks"
    return repo if repo.is_dir() else Path.cwd() / "benchmarks"


def available_benchmarks(directory: Path | None = None) -> dict[str, Path]:
    """Map benchmark name → file for every ``bench_<name>.py`` in ``directory`` (underscores
    of the file name are dashes in the benchmark name: ``bench_lora_twins.py`` is ``lora-twins``).

    Raises:
        FileNotFoundError: the folder does not exist.
    """
    folder = Path(directory) if directory is not None else _default_dir()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"bench: no benchmarks folder at {folder}; run from the repository or pass --dir"
        )
    files = sorted(folder.glob("bench_*.py"))
    return {p.stem.removeprefix("bench_").replace("_", "-"): p for p in files}


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


def run_benchmark(
    path: Path, *, quick: bool = False, threads: int = 1, console: Console | None = None
) -> Table:
    """Run one benchmark file with ``threads`` torch threads and return its results as a rich
    table (captioned with how its cells read).

    Raises:
        ValueError: the file does not define ``TITLE``, ``COLUMNS`` and ``run``; ``threads`` < 1.
    """
    module = _load(path)
    with (
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress,
        pinned_threads(threads),
    ):
        rows = module.run(quick=quick, progress=progress)
    caption = (
        f"{threads} torch thread{'s' if threads > 1 else ''}; times: median [fastest–slowest "
        "repeat] after warm-up; ratios: of the medians [range of the repeat-by-repeat ratios]"
    )
    table = Table(title=escape(module.TITLE), caption=escape(caption))
    for col in module.COLUMNS:
        table.add_column(escape(col), justify="right")
    for row in rows:
        table.add_row(*(escape(str(x)) for x in row))
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
    threads: Annotated[
        int,
        typer.Option(
            help="Torch threads (and OMP/MKL threads of any process a benchmark starts), 1 like "
            "the experiments."
        ),
    ] = 1,
) -> None:
    """Performance benchmarks, each timed against a peer in the same run.

    Every timing is warmed up and repeated, the two sides interleaved, and printed as its median
    and range over the repeats; every ratio as the ratio of medians with the range of the
    repeat-by-repeat ratios ("noisy" when it spans more than 2×: rerun before trusting it).
    """
    try:
        if threads < 1:
            raise ValueError(f"--threads {threads}; allowed: an integer >= 1")
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
            out.print(run_benchmark(found[name], quick=quick, threads=threads, console=out))
    except (ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None


def register(app: typer.Typer) -> None:
    """Add ``gaugelab bench`` to ``app``."""
    app.command()(bench)
