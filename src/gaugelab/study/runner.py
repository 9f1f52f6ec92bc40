"""Execute one run in this process: an attempt in the store, a context, a termination class.

A spec (an :class:`~gaugelab.study.spec.ExperimentSpec` subclass with ``execute(run)``) is
executed against a :class:`RunContext`, which logs metrics and artifacts into an open attempt.
Whatever ends the attempt is recorded as one of the termination classes:

* ``completed`` — ``execute`` returned;
* ``validation_stopped`` — it raised :class:`ValidationStop` (a declared early stop);
* ``numerical_failure`` — :class:`gaugelab.NonFiniteError` (a NaN/inf loss, gradient or metric);
* ``admission_failure`` — the spec was rejected before training (``admit()`` or import raised);
* ``cancelled`` — ``KeyboardInterrupt``;
* ``infrastructure_failure`` — anything else (the environment or the code failed). Only these
  are retried by a sweep, and only when :func:`retryable`.

A long run writes checkpoints with :meth:`RunContext.checkpoint` and starts with
:meth:`RunContext.resume`: an attempt that follows a killed one continues from the killed
attempt's latest checkpoint, and the outcome says from which step.
"""

from __future__ import annotations

import atexit
import importlib
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gaugelab.errors import NonFiniteError
from gaugelab.study.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from gaugelab.study.spec import ExperimentSpec
from gaugelab.study.store import RunStore


class ValidationStop(Exception):
    """Raised by ``execute`` to end a run early by its declared validation rule."""


class AdmissionError(ValueError):
    """A spec that cannot be run (rejected before any training)."""


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended.

    Attributes:
        identity: the run.
        attempt: the attempt's ordinal (1 for the first).
        termination: one of the termination classes.
        message: the exception's summary, or "" when completed.
        retryable: an infrastructure failure worth another attempt.
        resumed_from: the checkpoint step this attempt resumed from, or ``None`` (from step 0).
    """

    identity: str
    attempt: int
    termination: str
    message: str = ""
    retryable: bool = False
    resumed_from: int | None = None


class RunContext:
    """What a running experiment may do: log metrics, write and record artifacts.

    Attributes:
        spec: the spec being executed.
        identity: its run identity.
        attempt_id: the store's id of the open attempt.
        directory: a private folder for this attempt's files
            (``<store dir>/<store name>.artifacts/<identity[:16]>/attempt-<n>/``: per store,
            so two stores in one folder never share a run's files).
        checkpoints: the run's checkpoint folder, shared by its attempts so a retry resumes
            from the latest checkpoint (``…/<identity[:16]>/checkpoints/``).
        resumed_from: the step :meth:`resume` returned a checkpoint of, else ``None``.
    """

    def __init__(
        self,
        store: RunStore,
        spec: ExperimentSpec,
        attempt_id: int,
        ordinal: int,
        progress: Callable[[str, int, int], None] | None = None,
    ):
        self.spec = spec
        self._progress = progress
        self.identity = spec.identity()
        self.attempt_id = attempt_id
        self._store = store
        run_dir = store.path.parent / f"{store.path.name}.artifacts" / self.identity[:16]
        self.directory = run_dir / f"attempt-{ordinal}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.checkpoints = run_dir / "checkpoints"
        self.checkpoints.mkdir(exist_ok=True)
        self.resumed_from: int | None = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Append the metrics of one step (raises NonFiniteError on NaN/inf, writing nothing)."""
        self._store.log_metrics(self.attempt_id, step, metrics)

    def progress(self, label: str, step: int, total: int) -> None:
        """Report ``step`` of ``total`` of the part ``label`` (e.g. a rule) to whoever watches
        (a progress bar when the run executes in the caller's process; nothing otherwise)."""
        if self._progress is not None:
            self._progress(label, step, total)

    def artifact(self, path: str | os.PathLike[str], kind: str) -> Path:
        """Record a file this attempt wrote (its sha256 is stored); returns its path."""
        self._store.add_artifact(self.attempt_id, path, kind)
        return Path(path)

    def _folder(self, scope: str) -> Path:
        if scope and (scope in (".", "..") or "/" in scope or "\\" in scope):
            raise ValueError(f"RunContext: scope={scope!r}; allowed: a name without a path")
        return self.checkpoints / scope if scope else self.checkpoints

    def resume(self, scope: str = "") -> Checkpoint | None:
        """The run's latest checkpoint, written by an earlier attempt, or ``None``.

        Call before training; a checkpoint found sets :attr:`resumed_from`.

        Args:
            scope: a sub-folder name, for a run that trains several things in turn (e.g. one
                per rule); ``""``: the run's checkpoint folder itself.

        Raises:
            StoreError: the latest checkpoint is corrupt (its sha256 differs).
        """
        path = latest_checkpoint(self._folder(scope))
        if path is None:
            return None
        checkpoint = load_checkpoint(path)
        self.resumed_from = checkpoint.step
        return checkpoint

    def checkpoint(
        self,
        step: int,
        *,
        scope: str = "",
        model_state: dict[str, Any],
        optimizer_state: dict[str, Any],
        rng_states: dict[str, Any] | None = None,
        data_position: int = 0,
        extra: dict[str, Any] | None = None,
    ) -> Path:
        """Write the checkpoint of ``step`` into :attr:`checkpoints` (or its ``scope`` folder;
        see :func:`gaugelab.study.checkpoint.save_checkpoint` for the arguments and errors),
        then delete the older ones there: a resumed run needs only the latest."""
        path = save_checkpoint(
            self._folder(scope),
            step=step,
            model_state=model_state,
            optimizer_state=optimizer_state,
            rng_states=rng_states or {},
            data_position=data_position,
            extra=extra,
        )
        prune_checkpoints(self._folder(scope), keep=1)
        return path


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
    frames = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" (at {frames[0].filename}:{frames[0].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


_OPEN: dict[tuple[int, str], RunStore] = {}


def _worker_store(path: str | os.PathLike[str]) -> RunStore:
    """One open store per process and path: reopening per run costs a WAL flush each time."""
    key = (os.getpid(), os.fspath(Path(path).absolute()))
    if key not in _OPEN:
        _OPEN[key] = RunStore(path, create=False)
        atexit.register(_OPEN[key].close)
    return _OPEN[key]


def execute_run(
    store_path: str | os.PathLike[str],
    identity: str,
    module: str,
    qualname: str,
    payload: str,
    progress: Callable[[str, int, int], None] | None = None,
) -> Outcome:
    """Run one registered spec to the end of one attempt, in this process.

    Args:
        store_path: the run store (opened once per worker process and kept open).
        identity: the registered run's identity.
        module, qualname, payload: from :func:`spec_reference`.
        progress: receives the run's :meth:`RunContext.progress` reports.

    Returns:
        The attempt's :class:`Outcome`. Exceptions are recorded, not raised — except that
        ``KeyboardInterrupt`` is re-raised after the attempt is recorded as ``cancelled``.
    """
    store = _worker_store(store_path)  # stays open for this worker's next run
    attempt_id = store.start_attempt(identity)
    ordinal = store.attempts(identity)[-1].ordinal
    context = None
    try:
        spec = rebuild_spec(module, qualname, payload)
        if spec.identity() != identity:
            raise AdmissionError(f"the rebuilt spec has identity {spec.identity()[:16]}…")
        context = RunContext(store, spec, attempt_id, ordinal, progress)
        admit = getattr(spec, "admit", None)
        if admit is not None:
            try:
                admit()
            except ValueError as exc:
                raise AdmissionError(str(exc)) from exc
        spec.execute(context)
    except ValidationStop as exc:
        termination, message, retry = "validation_stopped", str(exc), False
    except NonFiniteError as exc:
        termination, message, retry = "numerical_failure", _summary(exc), False
    except AdmissionError as exc:
        termination, message, retry = "admission_failure", _summary(exc), False
    except KeyboardInterrupt:
        store.end_attempt(attempt_id, "cancelled", "interrupted")
        raise
    except Exception as exc:
        termination, message, retry = "infrastructure_failure", _summary(exc), retryable(exc)
    else:
        termination, message, retry = "completed", "", False
    store.end_attempt(attempt_id, termination, message)
    resumed = context.resumed_from if context is not None else None
    return Outcome(identity, ordinal, termination, message, retry, resumed)
