"""Exceptions shared by every layer."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
from collections.abc import Iterator

__all__ = [
    "ADVICE",
    "TERMINATION_CLASSES",
    "NonFiniteError",
    "OptimizerFailure",
    "advice",
    "disk_full",
    "naming",
    "out_of_memory",
]

TERMINATION_CLASSES: tuple[str, ...] = (
    "completed",
    "validation_stopped",
    "numerical_failure",
    "infrastructure_failure",
    "admission_failure",
    "cancelled",
)
"""How an attempt ends: the run store's termination classes (every attempt ends in exactly one)
and the experimental design's attempt lineage (only ``infrastructure_failure`` is retried;
``numerical_failure`` is an outcome). Source: seed 003 §0x0CI."""


ADVICE: dict[str, str] = {
    "numerical_failure": "a smaller learning rate, or another rule (rerunning the same spec "
    "gives the same outcome)",
    "infrastructure_failure": "rerun the same command: it resumes from the last checkpoint",
    "admission_failure": "change what the message names, then rerun the same command",
    "cancelled": "rerun the same command to resume",
    "unverified": "rerun the same command to execute the run again",
}
"""What to do about a run that ended in each class without completing (docs/errors.md);
``unverified``: a completed run whose file no longer matches the store's record."""


def advice(termination: str, message: str = "") -> str:
    """What to do about a run that ended as ``termination`` with ``message``: the class's
    :data:`ADVICE`, or ``""`` when the message already says it (it names the rerun, as a full
    disk's, exhausted memory's or a blocked candidate's message does) or the class has none."""
    return "" if "rerun" in message else ADVICE.get(termination, "")


class NonFiniteError(FloatingPointError):
    """A loss, gradient or update became NaN or infinite.

    Raised before anything is modified, so the state that produced it can be inspected. The run
    harness records it as the attempt's termination class ``numerical_failure``.
    """


class OptimizerFailure(RuntimeError):
    """The optimizer under test raised, or broke the parameters it was given, in one phase.

    Raised by :func:`gaugelab.equivariance.check_equivariance` for a user's optimizer whose
    constructor or ``step()`` raises anything but a :class:`NonFiniteError` (a shape mismatch
    inside the rule, a missing parameter-group flag, ``NotImplementedError``), or whose
    ``step()`` rebinds a parameter to another shape. ``str()`` is one line:
    ``"<optimizer>: <phase>: <ExceptionType>: <message>"``.

    Attributes:
        optimizer: the optimizer's name as the check reports it.
        phase: ``"construct"`` or ``"step k"`` (1-based), with the twin being run.
        reason: the exception's type and first line, or what the step broke.
        hint: what the optimizer appears to need (``""`` when nothing is known).
    """

    def __init__(self, optimizer: str, phase: str, reason: str, hint: str = "") -> None:
        self.optimizer, self.phase, self.reason, self.hint = optimizer, phase, reason, hint
        super().__init__(f"{optimizer}: {phase}: {reason}" + (f" ({hint})" if hint else ""))


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk is full: an ``OSError`` with ``ENOSPC``, or SQLite's
    "database or disk is full"."""
    if isinstance(error, sqlite3.Error):
        return "full" in str(error)
    return isinstance(error, OSError) and error.errno == errno.ENOSPC


_ASKED = re.compile(r"tried to allocate (\d+) bytes")


def out_of_memory(error: BaseException) -> str | None:
    """Whether ``error`` says memory ran out: ``None`` if not, else what was asked for
    (``"47.7 GiB asked"``, or ``""`` when the error does not say). A ``MemoryError``, or the
    ``RuntimeError`` torch's allocators raise (``DefaultCPUAllocator: can't allocate memory:
    you tried to allocate N bytes``; CUDA's ``out of memory``)."""
    text = str(error)
    if not isinstance(error, MemoryError) and not (
        isinstance(error, RuntimeError)
        and ("can't allocate memory" in text or "out of memory" in text.lower())
    ):
        return None
    asked = _ASKED.search(text)
    return "" if asked is None else f"{int(asked.group(1)) / 2**30:,.1f} GiB asked"


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name ``path`` in an ``OSError`` raised inside without a file name: a write or fsync on
    a full disk raises ``ENOSPC`` naming none, so the message could not say which file. The
    error keeps its type and errno; one that names a file, or has no errno, passes unchanged.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        named = type(exc)(exc.errno, exc.strerror, os.fspath(path))
        raise named.with_traceback(exc.__traceback__) from exc  # raised where it was
