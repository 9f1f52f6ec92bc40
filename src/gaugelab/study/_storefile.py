"""The run store's file: its format, its creation, and opening it before any row is read.

A store is one SQLite file in WAL mode, recognised by ``PRAGMA application_id``
(``0x47415547``, "GAUG") and ``PRAGMA user_version`` (the schema version). :func:`open_store`
reads the raw 100-byte header first and hands the file to SQLite only once it looks like a
gaugelab store of this schema; anything else at the path — not SQLite, empty, truncated, corrupt
pages, another application's database, another schema version — is refused with
:class:`StoreError` and left byte-identical. A new store is built complete in a temporary file
and published atomically, so no reader ever sees a half-created one.

The rows and the :class:`~gaugelab.study.store.RunStore` API are in :mod:`gaugelab.study.store`,
which re-exports the public names defined here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from pathlib import Path

__all__ = [
    "APPEND_ONLY",
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "TERMINATION_CLASSES",
    "StoreError",
    "check_header",
    "create",
    "open_store",
    "refused",
    "schema",
    "truncated",
]

APPLICATION_ID = 0x47415547  # "GAUG"
SCHEMA_VERSION = 1
TERMINATION_CLASSES = (
    "completed",
    "validation_stopped",
    "numerical_failure",
    "infrastructure_failure",
    "admission_failure",
    "cancelled",
)
APPEND_ONLY = "gaugelab run store is append-only"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLES = ("studies", "runs", "study_runs", "attempts", "metrics", "artifacts")
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


class StoreError(ValueError):
    """The file at a store path is not a usable gaugelab run store, or stored data is corrupt.

    The message names the path and what was found there. The file is never modified.
    """


def refused(path: Path, error: sqlite3.DatabaseError) -> StoreError:
    """The :class:`StoreError` for an SQLite error raised while reading the store at ``path``.

    Corrupt pages (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``) read as a corrupt store; any other
    SQLite error (a lock held past the busy timeout, an unreadable file) as SQLite refusing
    it. Either way the message names the path and says the file was left untouched: SQLite
    rolls a failed statement back, and gaugelab never repairs or rewrites a store.
    """
    code = getattr(error, "sqlite_errorname", None) or type(error).__name__
    what = "corrupt gaugelab run store" if code in _CORRUPT else "SQLite refused the run store"
    return StoreError(f"{path}: {what} ({code}: {error}); the file was left untouched")


def schema() -> str:
    """The DDL of a new store: six tables, two indexes and the append-only triggers."""
    classes = ", ".join(f"'{c}'" for c in TERMINATION_CLASSES)
    ddl = f"""
    CREATE TABLE studies (
        name TEXT PRIMARY KEY CHECK (length(name) > 0),
        kind TEXT,
        spec_json TEXT,
        created_at TEXT NOT NULL
    );
    CREATE TABLE runs (
        identity TEXT PRIMARY KEY CHECK (length(identity) = 64),
        kind TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        manifest_json TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE study_runs (
        study TEXT NOT NULL REFERENCES studies(name),
        run TEXT NOT NULL REFERENCES runs(identity),
        created_at TEXT NOT NULL,
        PRIMARY KEY (study, run)
    );
    CREATE TABLE attempts (
        id INTEGER PRIMARY KEY,
        run TEXT NOT NULL REFERENCES runs(identity),
        ordinal INTEGER NOT NULL CHECK (ordinal >= 1),
        environment_digest TEXT NOT NULL,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        termination TEXT CHECK (termination IS NULL OR termination IN ({classes})),
        message TEXT NOT NULL DEFAULT '',
        CHECK ((ended_at IS NULL) = (termination IS NULL)),
        UNIQUE (run, ordinal)
    );
    CREATE TABLE metrics (
        run TEXT NOT NULL REFERENCES runs(identity),
        attempt INTEGER NOT NULL REFERENCES attempts(id),
        step INTEGER NOT NULL CHECK (step >= 0),
        name TEXT NOT NULL CHECK (length(name) > 0),
        value REAL NOT NULL
            CHECK (value BETWEEN -1.7976931348623157e308 AND 1.7976931348623157e308),
        UNIQUE (attempt, name, step)
    );
    CREATE INDEX metrics_by_run ON metrics (run, name, step);
    CREATE TABLE artifacts (
        id INTEGER PRIMARY KEY,
        run TEXT NOT NULL REFERENCES runs(identity),
        attempt INTEGER NOT NULL REFERENCES attempts(id),
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
        kind TEXT NOT NULL CHECK (length(kind) > 0),
        created_at TEXT NOT NULL
    );
    CREATE INDEX artifacts_by_run ON artifacts (run);
    """
    # Rows are never updated or deleted; INSERT OR REPLACE onto an existing key is refused too
    # (REPLACE deletes without firing DELETE triggers).
    keys = {
        "studies": "name = NEW.name",
        "runs": "identity = NEW.identity",
        "study_runs": "study = NEW.study AND run = NEW.run",
        "attempts": "id = NEW.id OR (run = NEW.run AND ordinal = NEW.ordinal)",
        "metrics": "attempt = NEW.attempt AND name = NEW.name AND step = NEW.step",
        "artifacts": "id = NEW.id",
    }
    for table, key in keys.items():
        ddl += f"""
        CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table}
        WHEN EXISTS (SELECT 1 FROM {table} WHERE {key})
        BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}: {table} row exists'); END;
        CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
        BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}: DELETE on {table}'); END;
        """
        if table != "attempts":
            ddl += f"""
            CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
            BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}: UPDATE on {table}'); END;
            """
    ddl += f"""
    CREATE TRIGGER attempts_end_once BEFORE UPDATE ON attempts
    WHEN OLD.termination IS NOT NULL OR NEW.termination IS NULL OR NEW.ended_at IS NULL
        OR NEW.id IS NOT OLD.id OR NEW.run IS NOT OLD.run OR NEW.ordinal IS NOT OLD.ordinal
        OR NEW.environment_digest IS NOT OLD.environment_digest
        OR NEW.started_at IS NOT OLD.started_at
    BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}: an open attempt can only be ended, once'); END;
    """
    for table in ("metrics", "artifacts"):
        ddl += f"""
        CREATE TRIGGER {table}_open_attempt BEFORE INSERT ON {table}
        WHEN (SELECT run FROM attempts WHERE id = NEW.attempt AND termination IS NULL)
            IS NOT NEW.run
        BEGIN SELECT RAISE(ABORT, '{table} rows belong to an open attempt of their run'); END;
        """
    return ddl


def check_header(path: Path) -> None:
    """Refuse anything but a gaugelab store of this schema, reading only the raw header.

    Nothing is opened with SQLite before this passes, so a foreign file is never touched.

    Raises:
        StoreError: ``path`` is empty, not SQLite, another application's database, another
            schema version, or truncated.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(100)
    if size == 0:
        # Stores are created complete and published atomically, so an empty file is never one
        # of ours (half-created or otherwise): refuse rather than guess.
        raise StoreError(
            f"{path}: empty file (0 bytes), not a gaugelab run store; remove it or choose "
            "another --store path"
        )
    if len(header) < 100 or header[:16] != _SQLITE_MAGIC:
        raise StoreError(
            f"{path}: not an SQLite database (first bytes {header[:16]!r}), so not a gaugelab "
            "run store"
        )
    app_id = int.from_bytes(header[68:72], "big")
    if app_id != APPLICATION_ID:
        raise StoreError(
            f"{path}: not a gaugelab run store: application_id {app_id:#010x} ≠ "
            f"{APPLICATION_ID:#010x} (an SQLite database of another program)"
        )
    version = int.from_bytes(header[60:64], "big")
    if version != SCHEMA_VERSION:
        newer = " (written by a newer gaugelab)" if version > SCHEMA_VERSION else ""
        raise StoreError(
            f"{path}: gaugelab run store schema version {version}{newer}; this gaugelab reads "
            f"version {SCHEMA_VERSION}"
        )
    if truncated(path) and truncated(path):  # asked twice: a checkpoint may be under way
        raise StoreError(f"{path}: truncated gaugelab run store (shorter than its header says)")


def truncated(path: Path) -> bool:
    """Whether a quiescent store's file is shorter than the page count in its header.

    Only judged while no ``-wal``/``-shm`` file exists, i.e. no connection is open: a WAL
    checkpoint in progress writes page 1 (with the new size) before the pages after it.
    """

    def busy() -> bool:
        return any(Path(f"{path}{s}").exists() for s in ("-wal", "-shm"))

    if busy():
        return False
    with open(path, "rb") as f:
        header = f.read(100)
    size = path.stat().st_size
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    size_valid = header[24:28] == header[92:96]  # SQLite's "version-valid-for" rule
    return size_valid and size < pages * page_size and not busy()


def _connect(path: Path) -> sqlite3.Connection:
    """Connect to a store whose header passed, in WAL mode; check its tables exist.

    Raises:
        StoreError: SQLite reports the file corrupt or refuses it, WAL mode is unavailable,
            or a table is missing; the connection is closed and the file left untouched.
    """
    try:
        conn = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
    except sqlite3.DatabaseError as e:
        raise refused(path, e) from None
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA foreign_keys = ON")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(
                f"{path}: SQLite could not enable WAL mode (journal_mode={mode!r}); the run "
                "store needs a local file system"
            )
        # Durable across process crashes; a power loss may drop the last commits, never corrupt.
        conn.execute("PRAGMA synchronous = NORMAL")
        found = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        missing = sorted(set(_TABLES) - found)
        if missing:
            raise StoreError(f"{path}: gaugelab run store lacks tables {missing}")
    except sqlite3.DatabaseError as e:
        conn.close()
        raise refused(path, e) from None
    except BaseException:
        conn.close()
        raise
    return conn


def create(path: Path) -> None:
    """Build a complete store in a temporary file and publish it at ``path`` atomically.

    If another process publishes first, its store is kept and this one discarded. An existing
    file at ``path`` is never replaced.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    name = str(path.parent / f".{path.name}.{secrets.token_hex(8)}.creating")
    os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # umask applies
    tmp = Path(name)
    try:
        conn = sqlite3.connect(name, isolation_level=None)
        try:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.executescript("BEGIN;" + schema() + "COMMIT;")
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if anything exists at path: never replaces a file
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for leftover in (tmp, Path(name + "-wal"), Path(name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def open_store(path: Path, *, create_missing: bool) -> sqlite3.Connection:
    """Open the store file at ``path`` (creating it first if asked): the checked connection.

    Args:
        path: absolute path of the store file.
        create_missing: create a new store (and its parent directories) when nothing exists.

    Returns:
        A connection in autocommit mode (``isolation_level=None``), WAL, foreign keys on,
        60 s busy timeout. Only the header and the schema have been read, not every page.

    Raises:
        FileNotFoundError: nothing at ``path`` and ``create_missing`` is false.
        StoreError: ``path`` is a directory or anything but a readable gaugelab store of this
            schema (:func:`check_header`; corrupt pages or an SQLite refusal while connecting,
            :func:`refused`); the file is left byte-identical.
    """
    if not path.exists():
        if not create_missing:
            raise FileNotFoundError(f"RunStore: no run store at {path}")
        create(path)
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a gaugelab run store")
    check_header(path)
    return _connect(path)
