"""The read side of results: a run's files, verified, and a study's runs as read back.

Nothing a run wrote is trusted unverified. :meth:`ResultReader.result` is the one path from a
run to one of its files: the run's latest *completed* attempt, its artifact of the asked kind
(and file name), the bytes read once and checked against the sha256 the store recorded when
the run wrote them. A run without a completed attempt, a missing file or a changed one raises
one :class:`ArtifactError` naming the run, the attempt and the file. The experiments parse the
verified bytes into their own result types; they never open a run's files by hand.

:class:`ResultReader` is a mixin of :class:`~gaugelab.study.store.db.RunStore`: every open store
has these methods.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gaugelab.study.store.queries import ArtifactRow, StudyRow
from gaugelab.study.store.seals import ArtifactError

__all__ = [
    "PENDING",
    "UNVERIFIED",
    "ArtifactError",
    "ResultReader",
    "RunState",
    "VerifiedArtifact",
    "failed",
    "verified_bytes",
    "verified_json",
]

PENDING = ("open", "not run")
"""Read-back states of a run that has not ended: running (``open``) or not yet attempted; such a
run is neither completed nor failed (a report written while its study runs lists it as
running)."""
UNVERIFIED = "unverified"
"""The read-back state of a completed run whose artifact fails verification (not a termination
class of the store: the attempt did complete; its file changed afterwards)."""




def verified_bytes(artifact: ArtifactRow) -> bytes:
    """The bytes of a stored artifact, checked against the sha256 recorded when it was written.

    The file is read once and the digest is taken of the bytes returned, so nothing unverified
    is ever parsed.

    Raises:
        ArtifactError: the file is missing or unreadable, or its sha256 differs.
    """
    where = f"run {artifact.run[:12]} (attempt {artifact.ordinal})"
    try:
        data = artifact.path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ArtifactError(f"{artifact.path}: {artifact.kind} file of {where}: {reason}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.sha256:
        raise ArtifactError(
            f"{artifact.path}: {artifact.kind} file of {where} has sha256 {digest[:16]}…, not "
            f"the {artifact.sha256[:16]}… the store recorded; it changed after the run wrote it"
        )
    return data


def verified_json(artifact: ArtifactRow) -> Any:
    """A stored JSON artifact, parsed only after :func:`verified_bytes` has checked it.

    Raises:
        ArtifactError: as :func:`verified_bytes`, or the verified bytes are not UTF-8 JSON
            (a file that was already malformed when the run recorded it).
    """
    return VerifiedArtifact(artifact, verified_bytes(artifact)).json()


@dataclass(frozen=True)
class VerifiedArtifact:
    """A file a run wrote, read once and checked against the store's sha256.

    Attributes:
        row: the store's record of the file (run, attempt ordinal, path, sha256, kind).
        data: the file's verified bytes.
    """

    row: ArtifactRow
    data: bytes

    @property
    def path(self) -> Path:
        """The file's absolute path."""
        return self.row.path

    def json(self) -> Any:
        """The verified bytes parsed as UTF-8 JSON.

        Raises:
            ArtifactError: the bytes are not UTF-8 JSON (the file was already malformed when
                the run recorded it).
        """
        try:
            return json.loads(self.data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ArtifactError(
                f"{self.row.path}: {self.row.kind} file of run {self.row.run[:12]} is not JSON "
                f"({exc})"
            ) from None


def failed(termination: str) -> bool:
    """Whether a run read back in state ``termination`` ended without completing: neither
    ``completed`` nor :data:`PENDING`."""
    return termination != "completed" and termination not in PENDING


@dataclass
class RunState:
    """One run of a study as read back from the store.

    Attributes:
        identity: the run identity.
        spec: the run's spec fields (JSON mode).
        termination: the latest attempt's termination class, ``"open"`` while it runs,
            ``"not run"``, or :data:`UNVERIFIED` when the run completed but a file it wrote no
            longer matches the store's record (the run is then left out of the results).
        message: that attempt's message (for :data:`UNVERIFIED`: which file, and why).
    """

    identity: str
    spec: dict[str, Any]
    termination: str
    message: str

    @property
    def completed(self) -> bool:
        """The latest attempt completed (and, once read back, its files verified)."""
        return self.termination == "completed"

    @property
    def failed(self) -> bool:
        """The run ended without completing (or its files failed verification): neither
        completed nor :data:`PENDING` (:func:`failed`)."""
        return failed(self.termination)

    def unverified(self, error: ArtifactError) -> RunState:
        """This run as :data:`UNVERIFIED`, with ``error`` and what to do as the message."""
        message = f"{error}; rerun the same command to execute the run again"
        return RunState(self.identity, self.spec, UNVERIFIED, message)


class ResultReader:
    """The verified read path of :class:`~gaugelab.study.store.db.RunStore` (a mixin)."""

    def completed_files(self, run: str, kind: str | None = None) -> list[ArtifactRow]:
        """The files recorded by ``run``'s latest completed attempt (of ``kind``, if given),
        in the order they were recorded; empty when no attempt completed."""
        done = [a.ordinal for a in self.attempts(run) if a.termination == "completed"]
        if not done:
            return []
        return [
            a
            for a in self.artifacts(run)
            if a.ordinal == done[-1] and (kind is None or a.kind == kind)
        ]

    def result(self, run: str, kind: str = "result", name: str | None = None) -> VerifiedArtifact:
        """One file of ``run``'s latest completed attempt, verified.

        Args:
            run: the run identity.
            kind: the artifact kind (``"result"``, ``"weights"``, ``"deltas"``, …).
            name: the file name, when the attempt recorded several files of ``kind``; without
                it, the last one recorded.

        Returns:
            The :class:`VerifiedArtifact` (bytes checked against the store's sha256).

        Raises:
            ArtifactError: the run has no completed attempt, recorded no such file, or the
                file is missing, unreadable or changed; the message names the run and file.
        """
        files = self.completed_files(run, kind)
        if name is not None:
            files = [a for a in files if a.path.name == name]
        if not files:
            what = f"{kind} file" + ("" if name is None else f" {name!r}")
            if not self.completed(run):
                raise ArtifactError(f"run {run[:12]} has no completed attempt (no {what})")
            raise ArtifactError(f"run {run[:12]} recorded no {what} in its completed attempt")
        return VerifiedArtifact(files[-1], verified_bytes(files[-1]))

    def study_row(self, study: str) -> StudyRow:
        """The store's record of ``study``.

        Raises:
            ValueError: no such study (the message lists the known ones).
        """
        rows = self.studies()
        for row in rows:
            if row.name == study:
                return row
        known = ", ".join(repr(r.name) for r in rows) or "none"
        raise ValueError(f"unknown study {study!r} in {self.path}; known: {known}")

    def study_of_kind(self, study: str, spec_class: type) -> StudyRow:
        """:meth:`study_row` of ``study``, checked to be of ``spec_class.kind``.

        Raises:
            ValueError: no such study, or one of another kind.
        """
        row = self.study_row(study)
        if row.kind != spec_class.kind:
            raise ValueError(
                f"collect: study {study!r} is a {row.kind!r} study, not a {spec_class.kind!r} "
                "study"
            )
        return row

    def run_states(self, study: str) -> list[RunState]:
        """Every run of ``study`` with its latest attempt's termination, oldest first."""
        states = []
        for run in self.runs(study):
            attempts = self.attempts(run.identity)
            last = attempts[-1] if attempts else None
            termination = "not run" if last is None else (last.termination or "open")
            message = last.message if last else ""
            states.append(RunState(run.identity, run.spec, termination, message))
        return states

    def completed_result(self, state: RunState) -> tuple[RunState, Any]:
        """The verified ``result`` JSON of a completed run.

        Returns:
            ``(state, data)``: ``data`` is ``None`` for a run that did not complete; a
            completed run whose result file is missing or changed comes back as
            ``state.unverified(…)`` with ``None``.
        """
        if not state.completed:
            return state, None
        try:
            return state, self.result(state.identity).json()
        except ArtifactError as exc:
            return state.unverified(exc), None
