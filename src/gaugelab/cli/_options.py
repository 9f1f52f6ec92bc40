"""What every study command shares: the run options (``--executor``, ``--max-workers``,
``--address``, ``--threads``, ``--store``, ``--out``) as one :class:`RunOptions`, the LoRA tools'
``--base``, and the parsing of comma-separated numbers and names."""

from __future__ import annotations

import functools
import inspect
import os
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from gaugelab.cli._defaults import DEFAULT_STORE_PATH, EXECUTORS
from gaugelab.cli._errors import fail

Store = Annotated[Path, typer.Option("--store", help="Run store file.")]
Out = Annotated[Path | None, typer.Option("--out", help="Report folder (default: in the store's).")]
Workers = Annotated[
    int,
    typer.Option(
        "--max-workers", "--workers", help="Runs at once, each in its own worker process."
    ),
]
Threads = Annotated[
    int,
    typer.Option(
        help="Torch threads per run process (1 is fastest for these small models; use "
        "--max-workers for more cores)."
    ),
]
Executor = Annotated[
    str, typer.Option(help="local (worker processes on this machine) or ray (needs gaugelab[ray]).")
]
BaseCheckpoint = Annotated[
    Path | None,
    typer.Option(
        "--base",
        help="The base model of adapter folders: a .safetensors file or a Hugging Face "
        "checkpoint folder (never a pickle). Every module is checked against it; DoRA "
        "adapters need it.",
        show_default=False,
    ),
]
Address = Annotated[
    str | None,
    typer.Option(help="Ray cluster address (with --executor ray; default: a local Ray)."),
]


@dataclass(frozen=True)
class RunOptions:
    """How a study command runs its study: the six options every study command takes, each
    field declared as its option (:func:`study_command` reads them from here).

    Attributes:
        executor: ``local`` or ``ray``.
        max_workers: runs at once (>= 1).
        address: the Ray cluster's address, or ``None``.
        threads: torch threads per run process (>= 1).
        store: the run store file.
        out: the report folder, or ``None`` (a new one in the store's folder).

    Raises:
        ValueError: an executor not in ``local, ray``, or ``max_workers`` / ``threads`` < 1;
            the message names the option.
    """

    executor: Executor = "local"
    max_workers: Workers = 1
    address: Address = None
    threads: Threads = 1
    store: Store = DEFAULT_STORE_PATH
    out: Out = None

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"--executor {self.executor!r}; allowed: {', '.join(EXECUTORS)}")
        for option, value in (("--max-workers", self.max_workers), ("--threads", self.threads)):
            if value < 1:
                raise ValueError(f"{option} {value}; allowed: an integer >= 1")

    def how(self) -> dict[str, Any]:
        """The keyword arguments of :func:`gaugelab.study.experiment.run_experiment`."""
        how = asdict(self)
        how["report_dir"] = how.pop("out")
        return how


_DECLARED = typing.get_type_hints(RunOptions, include_extras=True)
_RUN_OPTIONS = [
    inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                      annotation=_DECLARED[f.name])
    for f in fields(RunOptions)
]  # fmt: skip


def study_command(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with the six run options added after its own options.

    Typer reads the options from the returned function's signature: ``command``'s own, then
    ``--executor``, ``--max-workers``, ``--address``, ``--threads``, ``--store``, ``--out``.
    They are checked first (a bad one is one ``error:`` line, exit 2); ``command`` receives
    them as one keyword argument, ``run_options`` (a :class:`RunOptions`), which its signature
    declares last.
    """
    own = inspect.signature(command, eval_str=True)
    kept = [p for name, p in own.parameters.items() if name != "run_options"]

    @functools.wraps(command)
    def with_run_options(**options: Any) -> Any:
        try:
            run = RunOptions(**{p.name: options.pop(p.name) for p in _RUN_OPTIONS})
        except ValueError as exc:
            raise fail(exc) from None
        return command(**options, run_options=run)

    with_run_options.__signature__ = own.replace(parameters=kept + _RUN_OPTIONS)  # type: ignore[attr-defined]
    return with_run_options


def check_dtype(dtype: str) -> None:
    """Validate ``--dtype``.

    Raises:
        ValueError: not ``float32`` or ``float64``; the message names the option.
    """
    if dtype not in ("float32", "float64"):
        raise ValueError(f"--dtype {dtype!r}; allowed: float32, float64")


def nonempty_study(value: str | None) -> str | None:
    """``--study``'s check (a Typer callback): an empty or blank name is refused in one line,
    never read as "the default study"."""
    if value is not None and not value.strip():
        raise fail(f"--study {value!r}; allowed: a non-empty study name")
    return value


def comma_separated(text: str, option: str, kind: type = int) -> tuple:
    """The comma-separated values of ``text`` as ``kind`` (``int`` or ``float``).

    Raises:
        ValueError: a value that is not a ``kind``, or no value at all; the message names
            ``option``, the text and what is allowed.
    """
    what = "integers" if kind is int else "numbers"
    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{option} {text!r}; allowed: comma-separated {what}") from None
    if not values:
        raise ValueError(f"{option} is empty; allowed: comma-separated {what}")
    return values


def names(text: str) -> tuple[str, ...]:
    """The comma-separated names of ``text``, stripped, empty ones left out."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(needed: int, what: str) -> None:
    """Refuse work whose memory, known before it starts, exceeds the machine's.

    Args:
        needed: the estimated peak in bytes (a lower bound: what the work must hold at once).
        what: the options that set it, as the user gave them (``"--size 200000"``).

    Raises:
        ValueError: ``needed`` exceeds :func:`machine_memory`; the message gives both.
    """
    total = machine_memory()
    if needed > total:
        raise ValueError(
            f"{what} needs at least {needed / 2**30:,.1f} GiB of memory; this machine has "
            f"{total / 2**30:,.1f} GiB; allowed: a size whose estimate fits"
        )
