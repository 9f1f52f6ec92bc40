"""The run store's rows and its read side: studies, runs, attempts, metrics and artifacts.

:class:`StoreQueries` is the reading half of :class:`gaugelab.study.store.db.RunStore` (which adds
opening, transactions and the append-only writes); the row types are what both halves return.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gaugelab.study.spec import Manifest
from gaugelab.study.store.owner import as_recorded
from gaugelab.study.store.seals import MetricsTampered, check_sealed, file_sha256
from gaugelab.study.store.storefile import StoreError

_PREFIX = re.compile(r"[0-9a-f]{4,64}")
CHECKPOINT_KINDS = ("checkpoint", "checkpoint-metadata")
"""Artifact kinds of checkpoint files: superseded by design (a run keeps only its latest
checkpoint), so :meth:`StoreQueries.verify_artifacts` leaves them to
:meth:`gaugelab.study.runner.RunContext.resume`, which verifies the one it reads."""


@dataclass(frozen=True)
class StudyRow:
    """A study: a named group of runs, with the spec that generated them (if any)."""

    name: str
    kind: str | None
    spec: dict[str, Any] | None
    created_at: str


@dataclass(frozen=True)
class RunRow:
    """A run: its identity, spec, manifest and the studies that include it."""

    identity: str
    kind: str
    spec: dict[str, Any]
    manifest: Manifest
    created_at: str
    studies: tuple[str, ...]


@dataclass(frozen=True)
class AttemptRow:
    """One attempt at a run; ``ended_at``/``termination`` are ``None`` while it is open.

    ``owner_host``, ``owner_pid``, ``owner_started`` name the process that opened it (empty /
    0 for attempts recorded before owners were kept); ``heartbeat_at`` is its owner's latest
    heartbeat while it trained (ISO 8601, UTC); ``metrics_digest`` seals the metric rows it
    logged, recorded when it ended (:func:`metrics_digest`; ``None`` while open, and for
    attempts that ended before stores kept it). An attempt of a killed command that an older
    store recorded in another form reads as today's
    (:func:`~gaugelab.study.store.owner.as_recorded`).
    """

    id: int
    run: str
    ordinal: int
    environment_digest: str
    started_at: str
    ended_at: str | None
    termination: str | None
    message: str
    owner_host: str = ""
    owner_pid: int = 0
    owner_started: str = ""
    heartbeat_at: str | None = None
    metrics_digest: str | None = None

    def __post_init__(self) -> None:  # an older store's killed attempt reads as today's
        termination, message = as_recorded(self.termination, self.message)
        object.__setattr__(self, "termination", termination)
        object.__setattr__(self, "message", message)


@dataclass(frozen=True)
class MetricRow:
    """One scalar: ``name`` at ``step`` (steps), logged by attempt ``ordinal`` of ``run``."""

    run: str
    ordinal: int
    step: int
    name: str
    value: float


@dataclass(frozen=True)
class ArtifactRow:
    """A file written by an attempt; ``path`` is absolute, ``sha256`` its content at logging."""

    run: str
    ordinal: int
    path: Path
    sha256: str
    kind: str
    created_at: str


class StoreQueries:
    """Read-only queries of a run store; the class using it provides ``_transaction`` and
    ``_path`` (see :class:`gaugelab.study.store.db.RunStore`)."""

    def studies(self) -> list[StudyRow]:
        """All studies, oldest first."""
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                "SELECT name, kind, spec_json, created_at FROM studies ORDER BY created_at, name"
            ).fetchall()
        return [_study_row(r) for r in rows]

    def _study(self, name: str) -> StudyRow:
        query = "SELECT name, kind, spec_json, created_at FROM studies WHERE name = ?"
        with self._transaction(write=False) as conn:
            return _study_row(conn.execute(query, (name,)).fetchone())

    def runs(self, study: str | None = None) -> list[RunRow]:
        """Runs, oldest first: all of them, or those of one study.

        Raises:
            ValueError: ``study`` is not a recorded study.
        """
        with self._transaction(write=False) as conn:
            if study is None:
                rows = conn.execute(f"{_RUN_SELECT} ORDER BY created_at, identity").fetchall()
            else:
                if not _exists(conn, "studies", "name", study):
                    raise ValueError(f"runs: unknown study {study!r}")
                rows = conn.execute(
                    f"{_RUN_SELECT} WHERE identity IN "
                    "(SELECT run FROM study_runs WHERE study = ?) ORDER BY created_at, identity",
                    (study,),
                ).fetchall()
            links: dict[str, list[str]] = {}
            for s, r in conn.execute("SELECT study, run FROM study_runs ORDER BY study"):
                links.setdefault(r, []).append(s)
        return [self._run_row(r, links.get(r[0], [])) for r in rows]

    def run(self, identity_prefix: str) -> RunRow:
        """The run whose identity starts with ``identity_prefix``.

        Args:
            identity_prefix: at least 4 lowercase hex characters of the identity.

        Raises:
            ValueError: a malformed prefix, no such run, or several runs share the prefix
                (the message lists them).
        """
        if not isinstance(identity_prefix, str) or not _PREFIX.fullmatch(identity_prefix):
            raise ValueError(
                f"run: identity prefix {identity_prefix!r}; allowed: 4 to 64 lowercase hex "
                "characters"
            )
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                f"{_RUN_SELECT} WHERE substr(identity, 1, ?) = ? ORDER BY identity LIMIT 11",
                (len(identity_prefix), identity_prefix),
            ).fetchall()
            if len(rows) == 1:
                studies = [
                    s
                    for (s,) in conn.execute(
                        "SELECT study FROM study_runs WHERE run = ? ORDER BY study", (rows[0][0],)
                    )
                ]
        if not rows:
            raise ValueError(f"run: no run in {self._path} has identity {identity_prefix}…")
        if len(rows) > 1:
            shown = ", ".join(r[0][:12] for r in rows[:10]) + (", …" if len(rows) > 10 else "")
            raise ValueError(
                f"run: identity prefix {identity_prefix!r} is ambiguous ({shown}); give more "
                "characters"
            )
        return self._run_row(rows[0], studies)

    def _run_row(self, row: tuple, studies: list[str]) -> RunRow:
        identity, kind, spec_json, manifest_json, created_at = row
        try:
            manifest = Manifest.model_validate_json(manifest_json)
        except ValueError as e:
            raise StoreError(f"{self._path}: run {identity} has an invalid manifest ({e})") from e
        return RunRow(identity, kind, json.loads(spec_json), manifest, created_at, tuple(studies))

    def completed(self, identity: str) -> bool:
        """Whether any attempt at run ``identity`` ended as ``completed``."""
        with self._transaction(write=False) as conn:
            row = conn.execute(
                "SELECT 1 FROM attempts WHERE run = ? AND termination = 'completed' LIMIT 1",
                (identity,),
            ).fetchone()
        return row is not None

    def incomplete(self, identity: str) -> str:
        """Why run ``identity`` has not completed, in words: ``"it has not been run"``,
        ``"it is still running (attempt 2)"``, or ``"it failed: numerical_failure —
        NonFiniteError: …"`` (its latest attempt's class and message); ``""`` when it has."""
        attempts = self.attempts(identity)
        if any(a.termination == "completed" for a in attempts):
            return ""
        if not attempts:
            return "it has not been run"
        last = attempts[-1]
        if last.termination is None:
            return f"it is still running (attempt {last.ordinal})"
        return f"it failed: {last.termination} — {last.message}".rstrip(" —")

    def attempts(self, identity: str) -> list[AttemptRow]:
        """The attempts at run ``identity`` by ordinal (empty for an unknown run)."""
        with self._transaction(write=False) as conn:
            query = f"{_ATTEMPT_SELECT} WHERE run = ? ORDER BY ordinal"
            rows = conn.execute(query, (identity,)).fetchall()
        return [AttemptRow(*r) for r in rows]

    def attempt(self, attempt_id: int) -> AttemptRow:
        """The attempt with store id ``attempt_id`` (from ``start_attempt`` or ``claim``).

        Raises:
            ValueError: no such attempt.
        """
        with self._transaction(write=False) as conn:
            row = conn.execute(f"{_ATTEMPT_SELECT} WHERE id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise ValueError(f"attempt: unknown attempt id {attempt_id!r}")
        return AttemptRow(*row)

    def metrics(
        self, identity: str, *, ordinal: int | None = None, name: str | None = None
    ) -> list[MetricRow]:
        """Metrics of a run, sorted by name then step.

        Args:
            identity: the full run identity.
            ordinal: one attempt's rows only. Default: the run's trajectory — for each
                ``(name, step)`` the value of the latest attempt that logged it, among the
                attempts up to the latest ``completed`` one (all attempts if none completed).
                A run resumed from a checkpoint thus reads as one run: steps before the resume
                point from the interrupted attempt, later steps from the resumed one.
            name: one metric only.

        Returns:
            The rows; each names the attempt ordinal that logged it.

        Raises:
            MetricsTampered: an ended attempt that a returned row comes from holds rows that
                differ from the digest sealed when it ended (:func:`check_sealed`).
        """
        query = (
            "SELECT m.run, a.ordinal, m.step, m.name, m.value, m.attempt FROM metrics m "
            "JOIN attempts a ON a.id = m.attempt WHERE m.run = ?"
        )
        params: list[Any] = [identity]
        with self._transaction(write=False) as conn:
            if ordinal is not None:
                query += " AND a.ordinal = ?"
                params.append(ordinal)
            else:
                (last,) = conn.execute(
                    "SELECT MAX(ordinal) FROM attempts WHERE run = ? AND termination = 'completed'",
                    (identity,),
                ).fetchone()
                if last is not None:
                    query += " AND a.ordinal <= ?"
                    params.append(last)
            if name is not None:
                query += " AND m.name = ?"
                params.append(name)
            rows = conn.execute(query + " ORDER BY m.name, m.step, a.ordinal", params).fetchall()
            latest = {(r[3], r[2]): r for r in rows}  # later ordinals overwrite
            whole: dict[int, list[tuple[int, str, float]]] | None = None
            if name is None:  # every row of each attempt read is here: seal them as read
                whole = {}
                for r in rows:
                    whole.setdefault(r[5], []).append((r[2], r[3], r[4]))
            check_sealed(conn, {r[5] for r in latest.values()}, whole)  # the attempts read from
        return [MetricRow(*r[:5]) for r in latest.values()]

    def verify_metrics(self, identity: str, ordinal: int) -> list[str]:
        """Check attempt ``ordinal`` of a run against the digest its metric rows were sealed
        with: ``[]`` when they are intact (or unsealed, or there is no such attempt), else
        one line naming the run, the attempt and both digests."""
        with self._transaction(write=False) as conn:
            row = conn.execute(
                "SELECT id FROM attempts WHERE run = ? AND ordinal = ?", (identity, ordinal)
            ).fetchone()
            try:
                check_sealed(conn, {row[0]} if row else set())
            except MetricsTampered as exc:
                return [str(exc)]
        return []

    def artifacts(self, identity: str) -> list[ArtifactRow]:
        """Artifacts of run ``identity`` in the order they were added."""
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                "SELECT f.run, a.ordinal, f.path, f.sha256, f.kind, f.created_at "
                "FROM artifacts f JOIN attempts a ON a.id = f.attempt WHERE f.run = ? "
                "ORDER BY f.id",
                (identity,),
            ).fetchall()
        base = self._path.parent
        return [ArtifactRow(r[0], r[1], base / r[2], r[3], r[4], r[5]) for r in rows]

    def verify_artifacts(self, identity: str, *, ordinal: int | None = None) -> list[str]:
        """Check the files a run's attempt recorded against the sha256 the store holds.

        Args:
            identity: the full run identity.
            ordinal: the attempt; default: the run's latest ``completed`` attempt (whose
                artifacts a report reads). Checkpoint files (:data:`CHECKPOINT_KINDS`) are not
                checked: older ones are deleted by design, and resuming verifies the one read.

        Returns:
            One line per problem, empty when every file is intact (or there is no such
            attempt): ``"<path>: missing (recorded by run <id> attempt <n>)"`` or
            ``"<path>: sha256 <found> differs from <recorded> recorded by run <id> attempt
            <n>"`` (digests shortened to 12 characters).
        """
        if ordinal is None:
            done = [a.ordinal for a in self.attempts(identity) if a.termination == "completed"]
            if not done:
                return []
            ordinal = done[-1]
        problems = []
        for art in self.artifacts(identity):
            if art.ordinal != ordinal or art.kind in CHECKPOINT_KINDS:
                continue
            where = f"recorded by run {identity[:12]} attempt {ordinal}"
            try:
                found = file_sha256(art.path)
            except FileNotFoundError:
                problems.append(f"{art.path}: missing ({where})")
                continue
            except OSError as e:
                problems.append(f"{art.path}: unreadable ({e.strerror or e}; {where})")
                continue
            if found != art.sha256:
                problems.append(
                    f"{art.path}: sha256 {found[:12]}… differs from {art.sha256[:12]}… {where}"
                )
        return problems


_RUN_SELECT = "SELECT identity, kind, spec_json, manifest_json, created_at FROM runs"
_ATTEMPT_SELECT = (
    "SELECT id, run, ordinal, environment_digest, started_at, ended_at, termination, message, "
    "owner_host, owner_pid, owner_started, heartbeat_at, metrics_digest FROM attempts"
)


def _exists(conn: sqlite3.Connection, table: str, column: str, value: object) -> bool:
    row = conn.execute(f"SELECT 1 FROM {table} WHERE {column} = ?", (value,)).fetchone()
    return row is not None


def _study_row(row: tuple) -> StudyRow:
    name, kind, spec_json, created_at = row
    return StudyRow(name, kind, None if spec_json is None else json.loads(spec_json), created_at)
