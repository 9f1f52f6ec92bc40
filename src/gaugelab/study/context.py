"""What a running experiment may do: log metrics, report progress, write and record artifacts,
checkpoint and resume.

:func:`gaugelab.study.runner.execute_run` hands a :class:`RunContext` to a spec's ``execute``.
Every file a run records (:meth:`RunContext.artifact`), checkpoints included, is stored with
its sha256; :meth:`RunContext.resume` uses the latest checkpoint only when its files still
match that record, and otherwise sets it aside and starts from step 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gaugelab.study.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from gaugelab.study.spec import ExperimentSpec
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.queries import CHECKPOINT_KINDS
from gaugelab.study.store.seals import file_sha256

__all__ = ["RunContext"]


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
        checkpoint_rejected: why :meth:`resume` set the latest checkpoint aside, else ``""``.
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
        self.checkpoint_rejected = ""
        self._ordinal = ordinal

    @property
    def store(self) -> RunStore:
        """The open run store this attempt writes to (for reading other runs' verified
        artifacts, e.g. a pretrained model a fine-tuning run starts from)."""
        return self._store

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

        Call before training; a checkpoint found sets :attr:`resumed_from`. Its two files must
        match the sha256 the store recorded when they were written, and the metric rows of
        the earlier attempts their seal: otherwise (edited, replaced, or not on record) the
        checkpoint is set aside — both files renamed
        ``<name>.rejected-attempt-<n>``, never deleted — :attr:`checkpoint_rejected` says
        which file and why, and ``None`` is returned: the run starts from step 0.

        Args:
            scope: a sub-folder name, for a run that trains several things in turn (e.g. one
                per rule); ``""``: the run's checkpoint folder itself.

        Raises:
            StoreError: the latest checkpoint is on record but unreadable (not a gaugelab
                checkpoint, a tensor missing).
        """
        path = latest_checkpoint(self._folder(scope))
        if path is None:
            return None
        problem = self._unrecorded(path)
        if problem:
            for file in (path, path.with_suffix(".safetensors")):
                if file.exists():
                    file.rename(file.with_name(f"{file.name}.rejected-attempt-{self._ordinal}"))
            why = f"{problem}; it was set aside and the run starts from step 0"
            self.checkpoint_rejected = "; ".join(filter(None, (self.checkpoint_rejected, why)))
            return None
        checkpoint = load_checkpoint(path)
        self.resumed_from = checkpoint.step
        return checkpoint

    def _unrecorded(self, path: Path) -> str:
        """Why a checkpoint's files do not match the store's record of them, or the metric
        rows logged before it no longer match their seal ("" if both hold: a resumed run
        reads its earlier steps from those rows)."""
        for a in self._store.attempts(self.identity):
            if a.ordinal < self._ordinal and (tampered := self._store.verify_metrics(
                self.identity, a.ordinal
            )):
                return f"the metric rows before checkpoint {path.name}: {tampered[0]}"
        recorded = {
            a.path: a.sha256
            for a in self._store.artifacts(self.identity)
            if a.kind in CHECKPOINT_KINDS
        }  # later records of a path win
        for file in (path.with_suffix(".safetensors"), path):
            run = f"run {self.identity[:12]}"
            if file not in recorded:
                return f"checkpoint {file} is not on record for {run}"
            try:
                found = file_sha256(file)
            except OSError as e:
                return f"checkpoint {file} of {run} is unreadable ({e.strerror or e})"
            if found != recorded[file]:
                return (
                    f"checkpoint {file}: sha256 {found[:12]}… differs from {recorded[file][:12]}… "
                    f"recorded for {run}"
                )
        return ""

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
        recording both files as artifacts (kinds ``checkpoint`` and ``checkpoint-metadata``,
        before the checkpoint is published), then delete the older ones there: a resumed run
        needs only the latest."""
        kinds = {".safetensors": "checkpoint", ".json": "checkpoint-metadata"}

        def record(file: Path, sha256: str) -> None:
            self._store.add_artifact(self.attempt_id, file, kinds[file.suffix], sha256=sha256)

        path = save_checkpoint(
            self._folder(scope),
            step=step,
            model_state=model_state,
            optimizer_state=optimizer_state,
            rng_states=rng_states or {},
            data_position=data_position,
            extra=extra,
            on_write=record,
        )
        prune_checkpoints(self._folder(scope), keep=1)
        return path
