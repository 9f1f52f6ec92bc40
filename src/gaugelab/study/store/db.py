"""The run store: an append-only SQLite database of studies, runs, attempts, metrics, artifacts.

One file (default ``./gaugelab-runs/store.sqlite``) in WAL mode, so several worker processes
write at once while readers browse. Nothing is ever updated or deleted, except that an open
attempt's heartbeat is refreshed and the attempt is ended exactly once; SQL triggers enforce
this for every client, not only this module. A failed attempt stays beside its retry, which
gets the next ordinal. Each attempt names its owner process; :meth:`RunStore.claim` opens one
only when no live process holds the run, so concurrent sweeps never train a run twice, and it
ends attempts whose owner died (see :mod:`gaugelab.study.store.attempts`).

Each :class:`RunStore` owns one connection and belongs to the process (and thread) that opened
it: a sweep opens one per worker. The file is recognised by ``PRAGMA application_id``
(``0x47415547``, "GAUG") and ``PRAGMA user_version`` (the schema version); any other file at the
path, or a store with corrupt pages, is refused with :class:`StoreError` and left untouched.
The file format, its creation and the opening checks are in :mod:`gaugelab.study.store.storefile`
(the schema in :mod:`gaugelab.study.store.schema`); this module holds the :class:`RunStore` API:
opening, transactions and the append-only writes of studies, runs, metrics and artifacts; the
attempts' lifecycle is in :mod:`gaugelab.study.store.attempts`, the rows and the read queries in
:mod:`gaugelab.study.store.queries`. A store this process may not write is opened read-only
(:attr:`RunStore.readonly`).
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import re
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gaugelab.errors import NonFiniteError
from gaugelab.study.spec import ExperimentSpec, Manifest
from gaugelab.study.store.attempts import AttemptClaims, Claim
from gaugelab.study.store.owner import now_iso
from gaugelab.study.store.queries import (
    ArtifactRow,
    AttemptRow,
    MetricRow,
    RunRow,
    StoreQueries,
    StudyRow,
    _exists,
)
from gaugelab.study.store.results import ResultReader
from gaugelab.study.store.seals import file_sha256
from gaugelab.study.store.storefile import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    TERMINATION_CLASSES,
    StoreError,
    open_store,
    refused,
    release,
)

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_STORE_PATH",
    "SCHEMA_VERSION",
    "TERMINATION_CLASSES",
    "ArtifactRow",
    "AttemptRow",
    "Claim",
    "MetricRow",
    "RunRow",
    "RunStore",
    "StoreError",
    "StudyRow",
    "file_sha256",
]

DEFAULT_STORE_PATH = Path("gaugelab-runs") / "store.sqlite"


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class RunStore(AttemptClaims, StoreQueries, ResultReader):
    """An open run store (one SQLite connection).

    Args:
        path: the store file (the CLI's ``--store``; default ``./gaugelab-runs/store.sqlite``).
        create: create a new store (and its parent directories) when nothing exists at ``path``.

    Raises:
        StoreError: something other than a gaugelab store this gaugelab reads is at ``path``
            (not SQLite, empty, truncated or corrupt, another application's database, a newer
            schema version) — the file is left byte-identical; WAL mode is unavailable;
            ``path`` lies under a regular file; or no store can be created there (a read-only
            folder). One line, naming the path and what to do.
        FileNotFoundError: nothing at ``path`` and ``create`` is false.

    A ``RunStore`` must stay in the process and thread that opened it (methods raise
    ``RuntimeError`` in another process, ``sqlite3.ProgrammingError`` in another thread): open
    one per worker. Opening reads the header and the schema, not every page (an older schema
    is migrated); :meth:`check` runs SQLite's full integrity check. Writes use ``BEGIN
    IMMEDIATE`` transactions with a 60 s busy timeout, so concurrent workers queue rather than
    fail; on a read-only store (:attr:`readonly`) reads work and every write raises
    :class:`StoreError` saying why.
    """

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_STORE_PATH, *, create: bool = True):
        self._path = Path(path).absolute()
        self._pid = os.getpid()
        self._conn: sqlite3.Connection | None = None
        self._conn, self._readonly, self._file = open_store(self._path, create_missing=create)

    def check(self) -> None:
        """Run SQLite's ``PRAGMA integrity_check`` (reads every page; slow on big stores).

        Raises:
            StoreError: the database is corrupt; the message carries SQLite's first findings.
                The file is left untouched (the check only reads).
        """
        try:
            found = [r[0] for r in self._connection().execute("PRAGMA integrity_check(10)")]
        except sqlite3.DatabaseError as e:
            raise refused(self._path, e) from None
        if found != ["ok"]:
            raise StoreError(
                f"{self._path}: corrupt gaugelab run store: {'; '.join(found)}; the file was "
                "left untouched"
            )

    @classmethod
    def open(
        cls, path: str | os.PathLike[str] = DEFAULT_STORE_PATH, *, create: bool = True
    ) -> RunStore:
        """Same as ``RunStore(path, create=create)``."""
        return cls(path, create=create)

    @property
    def path(self) -> Path:
        """Absolute path of the store file."""
        return self._path

    @property
    def readonly(self) -> str | None:
        """Why this process may only read the store (a read-only file or folder), or ``None``
        when it may write."""
        return self._readonly

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None and os.getpid() == self._pid:
            self._conn.close()
            release(self._file)
        self._conn = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self._path)!r})"

    # --- connection and transactions -------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"RunStore({self._path}) was opened in process {self._pid} and used in "
                f"{os.getpid()}; open one RunStore per process"
            )
        if self._conn is None:
            raise RuntimeError(f"RunStore({self._path}) is closed")
        return self._conn

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        """A transaction (``BEGIN IMMEDIATE`` to write).

        Raises:
            StoreError: a write to a read-only store, a full disk, or corrupt pages (SQLite's
                errors, in one line naming the store and what to do).
        """
        conn = self._connection()
        if write and self._readonly is not None:
            raise self._read_only_error(self._readonly)
        try:
            try:  # an interrupt can land between BEGIN and the body, or in COMMIT
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as e:
            name = getattr(e, "sqlite_errorname", "") or ""
            if name.startswith("SQLITE_READONLY"):
                raise self._read_only_error(f"SQLite: {e}") from None
            if name == "SQLITE_FULL":
                raise StoreError(
                    f"{self._path}: the disk is full ({e}); free some space and run the same "
                    "command again (what was recorded is kept)"
                ) from None
            if name not in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
                raise
            raise refused(self._path, e) from None

    def _read_only_error(self, why: str) -> StoreError:
        return StoreError(
            f"{self._path}: the run store is read-only for this process ({why}); writing needs "
            "write access to the file and its folder: fix the permissions or choose another "
            "--store"
        )

    # --- writing ---------------------------------------------------------------------------

    def add_study(self, name: str, spec: ExperimentSpec | None = None) -> StudyRow:
        """Record a study (idempotent for an identical spec).

        Args:
            name: non-empty study name.
            spec: the spec that generates the study's runs, or ``None``.

        Returns:
            The stored row (the existing one if the study was already recorded).

        Raises:
            ValueError: empty name, or a study ``name`` exists with a different spec.
            TypeError: ``spec`` is neither an :class:`ExperimentSpec` nor ``None``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"add_study: name={name!r}; allowed: a non-empty string")
        if spec is not None and not isinstance(spec, ExperimentSpec):
            raise TypeError(f"add_study: spec={spec!r}; allowed: an ExperimentSpec or None")
        kind = spec_json = None
        if spec is not None:
            payload = json.loads(spec.canonical_json())
            kind, spec_json = payload["kind"], _dumps(payload["spec"])
        with self._transaction(write=True) as conn:
            row = conn.execute(
                "SELECT kind, spec_json FROM studies WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO studies (name, kind, spec_json, created_at) VALUES (?, ?, ?, ?)",
                    (name, kind, spec_json, now_iso()),
                )
            elif tuple(row) != (kind, spec_json):
                raise ValueError(
                    f"add_study: study {name!r} exists with a different spec "
                    f"(kind {row[0]!r}); studies are immutable, choose another name"
                )
        return self._study(name)

    def register_run(self, manifest: Manifest, study: str | None = None) -> RunRow:
        """Record a run (idempotent: the first manifest of an identity is kept).

        Args:
            manifest: the run's manifest (:meth:`Manifest.for_spec`).
            study: add the run to this existing study.

        Returns:
            The stored row.

        Raises:
            TypeError: ``manifest`` is not a :class:`Manifest`.
            ValueError: ``study`` is not a recorded study.
        """
        if not isinstance(manifest, Manifest):
            raise TypeError(f"register_run: manifest={manifest!r}; allowed: a Manifest")
        with self._transaction(write=True) as conn:
            if study is not None and not _exists(conn, "studies", "name", study):
                raise ValueError(f"register_run: unknown study {study!r}; add_study it first")
            if not _exists(conn, "runs", "identity", manifest.identity):
                conn.execute(
                    "INSERT INTO runs (identity, kind, spec_json, manifest_json, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        manifest.identity,
                        manifest.kind,
                        _dumps(manifest.spec),
                        manifest.model_dump_json(),
                        now_iso(),
                    ),
                )
            if study is not None:
                linked = conn.execute(
                    "SELECT 1 FROM study_runs WHERE study = ? AND run = ?",
                    (study, manifest.identity),
                ).fetchone()
                if linked is None:
                    conn.execute(
                        "INSERT INTO study_runs (study, run, created_at) VALUES (?, ?, ?)",
                        (study, manifest.identity, now_iso()),
                    )
        return self.run(manifest.identity)

    def log_metrics(self, attempt_id: int, step: int, metrics: Mapping[str, float]) -> int:
        """Append scalar metrics of one step in one transaction.

        Args:
            attempt_id: an open attempt, from :meth:`start_attempt`.
            step: the step (≥ 0) the values belong to.
            metrics: name → finite value (anything ``float()`` accepts, e.g. a 0-dim tensor).

        Returns:
            The number of rows written.

        Raises:
            NonFiniteError: a value is NaN or infinite; nothing is written.
            ValueError: negative step, empty name, unknown or ended attempt, or a name already
                logged at this step by this attempt (nothing is written).
        """
        step = operator.index(step)
        if step < 0:
            raise ValueError(f"log_metrics: step={step}; allowed: an integer ≥ 0")
        rows = []
        for name, value in metrics.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"log_metrics: metric name {name!r}; allowed: non-empty string")
            x = float(value)
            if not math.isfinite(x):
                raise NonFiniteError(f"log_metrics: metric {name!r} = {x} at step {step}")
            rows.append((step, name, x))
        with self._transaction(write=True) as conn:
            run = self._open_attempt(conn, "log_metrics", attempt_id)[0]
            try:
                conn.executemany(
                    "INSERT INTO metrics (run, attempt, step, name, value) VALUES (?, ?, ?, ?, ?)",
                    [(run, attempt_id, s, n, v) for s, n, v in rows],
                )
            except sqlite3.IntegrityError as e:
                raise ValueError(
                    f"log_metrics: attempt {attempt_id} already logged one of "
                    f"{sorted(metrics)} at step {step} ({e})"
                ) from None
        return len(rows)

    def add_artifact(
        self,
        attempt_id: int,
        path: str | os.PathLike[str],
        kind: str,
        *,
        sha256: str | None = None,
    ) -> ArtifactRow:
        """Record a file written by an open attempt, with the sha256 of its content.

        The path is stored relative to the store's directory when it lies inside it (so a
        moved ``gaugelab-runs/`` folder stays valid), else absolute.

        Args:
            attempt_id: an open attempt.
            path: an existing file; or, with ``sha256``, a file about to be published there
                (a checkpoint's commit marker is recorded before it appears, so a checkpoint
                on disk is always on record).
            kind: what it is, e.g. ``"checkpoint"``, ``"plot"``, ``"report"``.
            sha256: the content's digest (64 lowercase hex); default: read from the file.

        Raises:
            FileNotFoundError: ``path`` is not a file (and no ``sha256`` was given).
            ValueError: empty kind, malformed ``sha256``, unknown or ended attempt.
        """
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"add_artifact: kind={kind!r}; allowed: a non-empty string")
        file = Path(path).absolute()
        if sha256 is None:
            if not file.is_file():
                raise FileNotFoundError(f"add_artifact: {file} is not a file")
            digest = file_sha256(file)
        elif isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256):
            digest = sha256
        else:
            raise ValueError(f"add_artifact: sha256={sha256!r}; allowed: 64 lowercase hex")
        base = self._path.parent
        stored = file.relative_to(base).as_posix() if file.is_relative_to(base) else str(file)
        with self._transaction(write=True) as conn:
            run = self._open_attempt(conn, "add_artifact", attempt_id)[0]
            conn.execute(
                "INSERT INTO artifacts (run, attempt, path, sha256, kind, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run, attempt_id, stored, digest, kind, now_iso()),
            )
        return self.artifacts(run)[-1]
