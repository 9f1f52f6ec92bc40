"""The run store's schema: its version, its DDL (tables, indexes, append-only triggers), and the
migration of older versions.

Rows are never updated or deleted, except that an open attempt may have its heartbeat refreshed
and is ended exactly once; SQL triggers enforce this for every client of the file.
"""

from __future__ import annotations

import sqlite3

from gaugelab.errors import TERMINATION_CLASSES

__all__ = [
    "APPEND_ONLY",
    "APPLICATION_ID",
    "MIGRATES_FROM",
    "SCHEMA_VERSION",
    "TABLES",
    "TERMINATION_CLASSES",
    "migrate",
    "schema",
]

APPLICATION_ID = 0x47415547  # "GAUG"
SCHEMA_VERSION = 3
MIGRATES_FROM = (1, 2)
"""Older schema versions a writable store is migrated from when opened (1: attempts without
an owner or heartbeat; 2: attempts without the digest of their metrics)."""
APPEND_ONLY = "gaugelab run store is append-only"

TABLES = ("studies", "runs", "study_runs", "attempts", "metrics", "artifacts")


_ATTEMPTS_UPDATE = f"""
    CREATE TRIGGER attempts_heartbeat_or_end_once BEFORE UPDATE ON attempts
    WHEN OLD.termination IS NOT NULL
        OR NEW.id IS NOT OLD.id OR NEW.run IS NOT OLD.run OR NEW.ordinal IS NOT OLD.ordinal
        OR NEW.environment_digest IS NOT OLD.environment_digest
        OR NEW.started_at IS NOT OLD.started_at
        OR NEW.owner_host IS NOT OLD.owner_host OR NEW.owner_pid IS NOT OLD.owner_pid
        OR NEW.owner_started IS NOT OLD.owner_started
        OR (NEW.termination IS NULL
            AND (NEW.ended_at IS NOT NULL OR NEW.message IS NOT OLD.message
                 OR NEW.metrics_digest IS NOT OLD.metrics_digest))
    BEGIN SELECT RAISE(ABORT,
        '{APPEND_ONLY}: an open attempt can only have its heartbeat refreshed, or be ended once');
    END;
"""
# Schema 1 → 3: attempts gain their owner and heartbeat (the update trigger admits a
# heartbeat), and the digest of their metrics; 2 → 3: the digest. Attempts that ended before
# the digest existed keep NULL: their metrics read back unsealed, as before.
_MIGRATE = {
    1: f"""
    ALTER TABLE attempts ADD COLUMN owner_host TEXT NOT NULL DEFAULT '';
    ALTER TABLE attempts ADD COLUMN owner_pid INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE attempts ADD COLUMN owner_started TEXT NOT NULL DEFAULT '';
    ALTER TABLE attempts ADD COLUMN heartbeat_at TEXT;
    ALTER TABLE attempts ADD COLUMN metrics_digest TEXT;
    DROP TRIGGER attempts_end_once;
    {_ATTEMPTS_UPDATE}
""",
    2: f"""
    ALTER TABLE attempts ADD COLUMN metrics_digest TEXT;
    DROP TRIGGER attempts_heartbeat_or_end_once;
    {_ATTEMPTS_UPDATE}
""",
}


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
        owner_host TEXT NOT NULL DEFAULT '',
        owner_pid INTEGER NOT NULL DEFAULT 0,
        owner_started TEXT NOT NULL DEFAULT '',
        heartbeat_at TEXT,
        metrics_digest TEXT CHECK (metrics_digest IS NULL OR length(metrics_digest) = 64),
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
    ddl += _ATTEMPTS_UPDATE
    for table in ("metrics", "artifacts"):
        ddl += f"""
        CREATE TRIGGER {table}_open_attempt BEFORE INSERT ON {table}
        WHEN (SELECT run FROM attempts WHERE id = NEW.attempt AND termination IS NULL)
            IS NOT NEW.run
        BEGIN SELECT RAISE(ABORT, '{table} rows belong to an open attempt of their run'); END;
        """
    return ddl


def migrate(conn: sqlite3.Connection) -> None:
    """Bring an older store to :data:`SCHEMA_VERSION` in one transaction (another process may
    have done it meanwhile: the version is read again under the write lock)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version in _MIGRATE:
            for statement in _statements(_MIGRATE[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    """``script`` split into complete SQL statements (triggers hold ``;`` in their bodies)."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out
