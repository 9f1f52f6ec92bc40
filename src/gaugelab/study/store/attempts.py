"""Attempts: opening, claiming, heartbeats, ending; abandoned attempts closed.

:class:`AttemptClaims` is the part of :class:`gaugelab.study.store.db.RunStore` that opens and
ends attempts, and lets several processes (two identical commands, a sweep's workers) share one
store without training a run twice. An attempt is owned by the process that opened it and is
ended exactly once (the SQL triggers allow nothing else but its heartbeat).

:meth:`AttemptClaims.claim` decides in one ``BEGIN IMMEDIATE`` transaction: an open attempt
whose owner is alive (:mod:`gaugelab.study.store.owner`) holds the run — nothing is opened; an open
attempt whose owner is gone is ended as ``infrastructure_failure`` ("killed: pid N …",
"heartbeat stale …"); a run that completed is not attempted again; otherwise a new attempt is
opened, owned by this process, with the next ordinal.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from gaugelab.study.environment import environment_digest as _environment_digest
from gaugelab.study.store.owner import Owner, gone, hold, now_iso, release, this_process
from gaugelab.study.store.queries import _ATTEMPT_SELECT, AttemptRow, _exists
from gaugelab.study.store.seals import metrics_digest
from gaugelab.study.store.storefile import TERMINATION_CLASSES

__all__ = ["AttemptClaims", "Claim"]


@dataclass(frozen=True)
class Claim:
    """What :meth:`AttemptClaims.claim` found.

    Attributes:
        identity: the run.
        attempt_id, ordinal: the attempt opened for this process, or ``None`` when none was.
        holder: the open attempt of a live process that holds the run (nothing was opened).
        completed: the run's trusted completed attempt (nothing was opened).
        closed: attempts of gone owners that this claim ended as ``infrastructure_failure``.
    """

    identity: str
    attempt_id: int | None = None
    ordinal: int | None = None
    holder: AttemptRow | None = None
    completed: AttemptRow | None = None
    closed: tuple[AttemptRow, ...] = ()

    @property
    def claimed(self) -> bool:
        """Whether a new attempt was opened for this process."""
        return self.attempt_id is not None


def owner_of(row: AttemptRow) -> Owner:
    """The :class:`Owner` recorded in an attempt row."""
    return Owner(row.owner_host, row.owner_pid, row.owner_started)


def _registered(conn: sqlite3.Connection, caller: str, identity: str) -> None:
    """Raise ``ValueError`` naming ``caller`` unless run ``identity`` is registered."""
    if not _exists(conn, "runs", "identity", identity):
        raise ValueError(f"{caller}: unknown run {identity!r}; register_run first")


def _end(conn: sqlite3.Connection, attempt_id: int, termination: str, message: str) -> None:
    """End an open attempt (inside a write transaction), sealing its metric rows."""
    rows = conn.execute(
        "SELECT step, name, value FROM metrics WHERE attempt = ?", (attempt_id,)
    ).fetchall()
    conn.execute(
        "UPDATE attempts SET ended_at = ?, termination = ?, message = ?, metrics_digest = ? "
        "WHERE id = ?",
        (now_iso(), termination, message, metrics_digest(rows), attempt_id),
    )


class AttemptClaims:
    """Attempts: start, claim, heartbeat, end, and the closing of abandoned ones; the class
    using it provides ``_transaction``, ``_path`` and ``attempt`` (see
    :class:`gaugelab.study.store.db.RunStore`)."""

    def start_attempt(self, identity: str, *, environment_digest: str | None = None) -> int:
        """Open a new attempt at a run, owned by this process, whether or not another attempt
        is open; its ordinal is the run's previous maximum + 1 (in the same transaction).

        :meth:`claim` is the guarded form a sweep uses: it refuses a run that a live process
        holds or that completed.

        Args:
            identity: the full run identity (64 hex characters).
            environment_digest: digest of the attempting environment; default
                :func:`gaugelab.study.spec.environment_digest` of this process.

        Returns:
            The attempt id (the handle for :meth:`log_metrics`, :meth:`end_attempt`).

        Raises:
            ValueError: the run is not registered.
        """
        digest = environment_digest or _environment_digest()  # before taking the write lock
        with self._transaction(write=True) as conn:
            _registered(conn, "start_attempt", identity)
            return self._insert_attempt(conn, identity, digest)[0]

    def end_attempt(self, attempt_id: int, termination: str, message: str = "") -> AttemptRow:
        """Close an open attempt with its termination class (once), sealing the metric rows it
        logged with their digest (:func:`~gaugelab.study.store.seals.metrics_digest`), which
        every later read of them checks.

        Args:
            attempt_id: from :meth:`start_attempt`.
            termination: one of :data:`TERMINATION_CLASSES`.
            message: free text, e.g. the exception that ended it.

        Returns:
            The ended attempt.

        Raises:
            ValueError: unknown termination class or attempt, or the attempt already ended.
        """
        if termination not in TERMINATION_CLASSES:
            raise ValueError(
                f"end_attempt: termination={termination!r}; allowed: "
                f"{', '.join(TERMINATION_CLASSES)}"
            )
        with self._transaction(write=True) as conn:
            self._open_attempt(conn, "end_attempt", attempt_id)
            _end(conn, attempt_id, termination, str(message))
        release(str(self._path), attempt_id)
        return self.attempt(attempt_id)

    @staticmethod
    def _open_attempt(conn: sqlite3.Connection, caller: str, attempt_id: int) -> tuple:
        row = conn.execute(
            "SELECT run, termination FROM attempts WHERE id = ?", (attempt_id,)
        ).fetchone()
        if row is None:
            raise ValueError(f"{caller}: unknown attempt id {attempt_id!r}")
        if row[1] is not None:
            raise ValueError(
                f"{caller}: attempt {attempt_id} already ended as {row[1]!r}; "
                "start a new attempt instead"
            )
        return tuple(row)

    def _insert_attempt(
        self, conn: sqlite3.Connection, identity: str, environment_digest: str
    ) -> tuple[int, int]:
        """Insert an open attempt owned by this process (inside a write transaction):
        ``(id, ordinal)``; the ordinal is the run's maximum + 1, read in the same transaction."""
        (ordinal,) = conn.execute(
            "SELECT COALESCE(MAX(ordinal), 0) + 1 FROM attempts WHERE run = ?", (identity,)
        ).fetchone()
        me, now = this_process(), now_iso()
        cursor = conn.execute(
            "INSERT INTO attempts (run, ordinal, environment_digest, started_at, owner_host, "
            "owner_pid, owner_started, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (identity, ordinal, environment_digest, now, me.host, me.pid, me.started, now),
        )
        attempt_id = int(cursor.lastrowid)
        hold(str(self._path), attempt_id)
        return attempt_id, int(ordinal)

    def _gone(self, row: AttemptRow) -> str | None:
        return gone(
            owner_of(row),
            row.heartbeat_at or row.started_at,
            store=str(self._path),
            attempt_id=row.id,
        )

    def _close_gone(
        self, conn: sqlite3.Connection, identity: str, termination: str, note: str
    ) -> tuple[list[AttemptRow], AttemptRow | None]:
        """End the run's open attempts whose owner is gone (inside a write transaction);
        returns them as they were, and the open attempt of a live owner, if any."""
        rows = conn.execute(
            f"{_ATTEMPT_SELECT} WHERE run = ? AND termination IS NULL ORDER BY ordinal",
            (identity,),
        ).fetchall()
        closed, holder = [], None
        for row in (AttemptRow(*r) for r in rows):
            why = self._gone(row)
            if why is None:
                holder = holder or row
                continue
            _end(conn, row.id, termination, why + note)
            closed.append(row)
        return closed, holder

    def claim(
        self,
        identity: str,
        *,
        distrust_through: int = 0,
        environment_digest: str | None = None,
    ) -> Claim:
        """Open an attempt at a run for this process, unless a live process holds the run or
        it completed — decided atomically (one ``BEGIN IMMEDIATE`` transaction).

        Args:
            identity: the full run identity (64 hex characters).
            distrust_through: completed attempts with an ordinal up to this one do not count
                (their artifacts failed verification: the run is executed again).
            environment_digest: as :meth:`~gaugelab.study.store.db.RunStore.start_attempt`.

        Returns:
            A :class:`Claim`: the new attempt's id and ordinal, or the live holder, or the
            completed attempt. Either way, open attempts of gone owners were ended first as
            ``infrastructure_failure`` with ``"killed: pid N ended before its run did"`` or
            ``"heartbeat stale …"``.

        Raises:
            ValueError: the run is not registered.
        """
        digest = environment_digest or _environment_digest()  # before taking the write lock
        with self._transaction(write=True) as conn:
            _registered(conn, "claim", identity)
            closed, holder = self._close_gone(conn, identity, "infrastructure_failure", "")
            if holder is not None:
                return Claim(identity, holder=holder, closed=tuple(closed))
            done = conn.execute(
                f"{_ATTEMPT_SELECT} WHERE run = ? AND termination = 'completed' AND ordinal > ? "
                "ORDER BY ordinal DESC LIMIT 1",
                (identity, distrust_through),
            ).fetchone()
            if done is not None:
                return Claim(identity, completed=AttemptRow(*done), closed=tuple(closed))
            attempt_id, ordinal = self._insert_attempt(conn, identity, digest)
        return Claim(identity, attempt_id, ordinal, closed=tuple(closed))

    def heartbeat(self, attempt_id: int) -> bool:
        """Refresh the heartbeat of an open attempt (its owner calls this while it trains).

        Returns:
            Whether the attempt is still open (``False``: another process ended it).
        """
        with self._transaction(write=True) as conn:
            cursor = conn.execute(
                "UPDATE attempts SET heartbeat_at = ? WHERE id = ? AND termination IS NULL",
                (now_iso(), attempt_id),
            )
        return cursor.rowcount == 1

    def reap(
        self, identity: str, *, termination: str = "infrastructure_failure", note: str = ""
    ) -> list[AttemptRow]:
        """End the run's open attempts whose owner is gone, leaving a live owner's alone.

        Args:
            identity: the run.
            termination: the class to record (a sweep records its own interrupted runs'
                abandoned attempts as ``cancelled``).
            note: appended to the reason (``"killed: pid N …"``, ``"heartbeat stale …"``).

        Returns:
            The attempts ended, as they were before.
        """
        with self._transaction(write=True) as conn:
            closed, _ = self._close_gone(conn, identity, termination, note)
        return closed

    def holder(self, identity: str) -> AttemptRow | None:
        """The open attempt at run ``identity`` of an owner that is alive, or ``None``
        (reads only: an abandoned attempt is ended by the next :meth:`claim` or :meth:`reap`)."""
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                f"{_ATTEMPT_SELECT} WHERE run = ? AND termination IS NULL ORDER BY ordinal",
                (identity,),
            ).fetchall()
        return next((a for a in (AttemptRow(*r) for r in rows) if self._gone(a) is None), None)
