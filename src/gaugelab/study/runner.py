"""Execute one run in this process: an attempt in the store, a context, a termination class.

A spec (an :class:`~gaugelab.study.spec.ExperimentSpec` subclass with ``execute(run)``) is
executed against a :class:`RunContext`, which logs metrics and artifacts into an open attempt.
Whatever ends the attempt is recorded as one of the termination classes:

* ``completed`` — ``execute`` returned;
* ``validation_stopped`` — it raised :class:`ValidationStop` (a declared early stop);
* ``numerical_failure`` — :class:`gaugelab.NonFiniteError` (a NaN/inf loss, gradient or metric);
* ``admission_failure`` — the spec was rejected before training (``admit()`` or import raised);
* ``cancelled`` — ``KeyboardInterrupt``;
* ``infrastructure_failure`` — anything else (the environment or the code failed), and a run
  whose command was killed (``killed: pid N ended before its run did``: ended by the next
  command's claim, or by a pool worker whose driver died). Only these are retried by a sweep,
  and only when :func:`retryable`.

An attempt is opened by :meth:`~gaugelab.study.store.db.RunStore.claim`: a run that a live process
holds is not attempted (the outcome is ``"held"``), nor one that completed meanwhile
(``"reused"``). While the run trains, a :class:`~gaugelab.study.store.owner.Heartbeat` thread keeps
its claim fresh and, in a worker, stops the run when the driver that asked for it is gone.

A long run writes checkpoints with :meth:`RunContext.checkpoint` (each file recorded in the
store with its sha256) and starts with :meth:`RunContext.resume`: an attempt that follows a
killed one continues from the killed attempt's latest checkpoint, and the outcome says from
which step. A checkpoint whose files differ from the store's record is not used: it is set
aside (renamed ``*.rejected-attempt-<n>``) and the run starts from step 0, as the outcome's
``checkpoint_rejected`` says.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gaugelab.errors import NonFiniteError, disk_full, out_of_memory
from gaugelab.study.context import RunContext
from gaugelab.study.spec import ExperimentSpec
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.owner import KILLED, Heartbeat, Owner

__all__ = [
    "HELD",
    "REUSED",
    "AdmissionError",
    "Outcome",
    "RunContext",
    "RunInterrupted",
    "ValidationStop",
    "execute_run",
    "rebuild_spec",
    "retryable",
    "spec_reference",
    "worker_sigint",
]

HELD = "held"
"""An :class:`Outcome`'s termination when the run was not attempted: a live process holds it."""
REUSED = "reused"
"""An :class:`Outcome`'s termination when the run was not attempted: it completed meanwhile."""


class ValidationStop(Exception):
    """Raised by ``execute`` to end a run early by its declared validation rule."""


class AdmissionError(ValueError):
    """A spec that cannot be run (rejected before any training)."""


class RunInterrupted(KeyboardInterrupt):
    """``KeyboardInterrupt`` out of :func:`execute_run`, after the attempt was recorded as
    ``cancelled``; :attr:`outcome` is that attempt's :class:`Outcome`."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended.

    Attributes:
        identity: the run.
        attempt: the attempt's ordinal (1 for the first); for :data:`HELD` / :data:`REUSED`,
            the holding / completed attempt's; 0 when no attempt was recorded.
        termination: one of the termination classes, or :data:`HELD` (not attempted: a live
            process holds the run; the message names it) or :data:`REUSED` (not attempted:
            the run completed meanwhile).
        message: the exception's summary, or "" when completed.
        retryable: an infrastructure failure worth another attempt.
        resumed_from: the checkpoint step this attempt resumed from, or ``None`` (from step 0).
        checkpoint_rejected: why the run's latest checkpoint was not used (its files differ
            from the store's record), or ``""``.
    """

    identity: str
    attempt: int
    termination: str
    message: str = ""
    retryable: bool = False
    resumed_from: int | None = None
    checkpoint_rejected: str = ""


def spec_reference(spec: ExperimentSpec) -> tuple[str, str, str]:
    """``(module, class name, JSON)``: enough to rebuild the spec in another process."""
    cls = type(spec)
    return cls.__module__, cls.__qualname__, spec.model_dump_json()


def rebuild_spec(module: str, qualname: str, payload: str) -> ExperimentSpec:
    """Inverse of :func:`spec_reference` (imports the module; validates the JSON).

    Raises:
        AdmissionError: the class cannot be imported or is not an ExperimentSpec.
    """
    try:
        cls = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError) as exc:
        raise AdmissionError(f"cannot import spec class {module}:{qualname}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, ExperimentSpec)):
        raise AdmissionError(f"{module}:{qualname} is not an ExperimentSpec")
    try:
        return cls.model_validate_json(payload)
    except ValidationError as exc:
        raise AdmissionError(f"{module}:{qualname} rejects the spec: {exc}") from None


_NOT_TRANSIENT = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)


def retryable(exc: BaseException) -> bool:
    """Environment failures worth retrying: memory, connection and worker-process errors, and
    OS errors other than a missing, existing or forbidden path (which a retry cannot mend)."""
    if isinstance(exc, _NOT_TRANSIENT):
        return False
    return isinstance(exc, OSError | MemoryError | EOFError | ConnectionError)


def _summary(exc: BaseException) -> str:
    """One line: the exception and where it was raised; a full disk or exhausted memory says
    so, with what to do (the user's remedy, not the code's traceback)."""
    frames = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" (at {frames[0].filename}:{frames[0].lineno})" if frames else ""
    if disk_full(exc):
        what = getattr(exc, "filename", None) or "a file of the run"
        return (f"disk full while writing {what} — free space and rerun the same command "
                f"(completed runs are kept){where}")  # fmt: skip
    if (asked := out_of_memory(exc)) is not None:
        asked = f" ({asked})" if asked else ""
        return f"out of memory{asked} — a smaller size, or fewer --max-workers, then rerun{where}"
    return f"{type(exc).__name__}: {exc}{where}"


_OPEN: dict[tuple[int, str], RunStore] = {}


def _worker_store(path: str | os.PathLike[str]) -> RunStore:
    """One open store per process and path: reopening per run costs a WAL flush each time."""
    key = (os.getpid(), os.fspath(Path(path).absolute()))
    if key not in _OPEN:
        _OPEN[key] = RunStore(path, create=False)
        atexit.register(_OPEN[key].close)
    return _OPEN[key]


_RUNNING = False  # a run executes in this process (a worker's SIGINT then interrupts it)
_STOPPING = False  # a worker received SIGINT: it starts no further run


def worker_sigint(signum: int, frame: Any) -> None:
    """The SIGINT handler of a sweep's worker process: interrupt the run in progress
    (``KeyboardInterrupt``, recorded as ``cancelled``); between runs, only remember it, so the
    worker starts no further run (and an idle worker dies without a traceback)."""
    global _STOPPING
    _STOPPING = True
    if _RUNNING:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while an interrupted attempt is being recorded (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def execute_run(
    store_path: str | os.PathLike[str],
    identity: str,
    module: str,
    qualname: str,
    payload: str,
    progress: Callable[[str, int, int], None] | None = None,
    *,
    distrust_through: int = 0,
    driver: Owner | None = None,
) -> Outcome:
    """Claim one registered run and execute it to the end of one attempt, in this process.

    Args:
        store_path: the run store (opened once per worker process and kept open).
        identity: the registered run's identity.
        module, qualname, payload: from :func:`spec_reference`.
        progress: receives the run's :meth:`RunContext.progress` reports.
        distrust_through: completed attempts up to this ordinal do not count (their artifacts
            failed verification; see :meth:`~gaugelab.study.store.db.RunStore.claim`).
        driver: the process that asked for the run, when it is another one (a sweep's
            driver): if it dies, the run stops, is recorded as a killed command's run
            (:func:`~gaugelab.study.store.owner.killed`, as when the run executes in the
            command's process), and this worker exits.

    Returns:
        The attempt's :class:`Outcome` (:data:`HELD` or :data:`REUSED` when no attempt was
        opened). Exceptions are recorded, not raised — except that ``KeyboardInterrupt`` is
        recorded as ``cancelled`` and raised again as :class:`RunInterrupted`.
    """
    store = _worker_store(store_path)  # stays open for this worker's next run
    if _STOPPING:
        return Outcome(identity, 0, "cancelled", "interrupted before it started")
    claim = store.claim(identity, distrust_through=distrust_through)
    if claim.holder is not None:
        holder = claim.holder
        owner = Owner(holder.owner_host, holder.owner_pid, holder.owner_started)
        return Outcome(identity, holder.ordinal, HELD, f"attempt {holder.ordinal} of {owner}")
    if claim.completed is not None:
        return Outcome(identity, claim.completed.ordinal, REUSED, "completed by another process")
    attempt_id, ordinal = claim.attempt_id, claim.ordinal
    connect = functools.partial(RunStore, store_path, create=False)
    beat = Heartbeat(connect, attempt_id, driver=driver).start()
    context = None
    contexts: list[RunContext] = []
    try:
        reference = (identity, module, qualname, payload)
        termination, message, retry = _execute(
            store, reference, attempt_id, ordinal, progress, contexts
        )
        context = contexts[0] if contexts else None
    except KeyboardInterrupt:
        beat.stop()
        with _sigint_ignored():
            if beat.orphaned:  # the command was killed: recorded as if the run were in it
                with contextlib.suppress(ValueError):  # already ended
                    store.end_attempt(attempt_id, KILLED, beat.stopped or "")
                os._exit(1)  # nobody waits for this worker
            if beat.stopped is not None:
                # another process ended this attempt (it judged its heartbeat stale)
                return Outcome(identity, ordinal, "infrastructure_failure", beat.stopped)
            with contextlib.suppress(ValueError):  # already ended
                store.end_attempt(attempt_id, "cancelled", "interrupted")
        raise RunInterrupted(Outcome(identity, ordinal, "cancelled", "interrupted")) from None
    finally:
        beat.stop()
    store.end_attempt(attempt_id, termination, message)
    resumed = context.resumed_from if context is not None else None
    rejected = context.checkpoint_rejected if context is not None else ""
    return Outcome(identity, ordinal, termination, message, retry, resumed, rejected)


def _execute(
    store: RunStore,
    reference: tuple[str, str, str, str],
    attempt_id: int,
    ordinal: int,
    progress: Callable[[str, int, int], None] | None,
    contexts: list[RunContext],
) -> tuple[str, str, bool]:
    """Rebuild, admit and execute the spec in an open attempt: ``(termination, message,
    retryable)``; the :class:`RunContext` is appended to ``contexts``."""
    global _RUNNING
    identity, module, qualname, payload = reference
    try:
        _RUNNING = True
        try:
            if _STOPPING:  # SIGINT arrived while the run was being claimed
                raise KeyboardInterrupt
            spec = rebuild_spec(module, qualname, payload)
            if spec.identity() != identity:
                raise AdmissionError(f"the rebuilt spec has identity {spec.identity()[:16]}…")
            contexts.append(RunContext(store, spec, attempt_id, ordinal, progress))
            admit = getattr(spec, "admit", None)
            if admit is not None:
                try:
                    admit()
                except ValueError as exc:
                    raise AdmissionError(str(exc)) from exc
            spec.execute(contexts[0])
        finally:
            _RUNNING = False
    except ValidationStop as exc:
        return "validation_stopped", str(exc), False
    except NonFiniteError as exc:
        return "numerical_failure", _summary(exc), False
    except AdmissionError as exc:
        return "admission_failure", _summary(exc), False
    except Exception as exc:
        return "infrastructure_failure", _summary(exc), retryable(exc)
    return "completed", "", False
