"""The run store's file: its format, its creation, and opening it before any row is read.

A store is one SQLite file in WAL mode, recognised by ``PRAGMA application_id``
(``0x47415547``, "GAUG") and ``PRAGMA user_version`` (the schema version). :func:`open_store`
reads the raw 100-byte header first and hands the file to SQLite only once it looks like a
gaugelab store of this schema (or of an older one it migrates, in one transaction); anything
else at the path — not SQLite, empty, truncated, corrupt pages, another application's database,
a newer schema version — is refused with :class:`StoreError` and left byte-identical. A new
store is built complete in a temporary file and published atomically, so no reader ever sees a
half-created one. A store this process may not write (a read-only file or folder) is opened
read-only: reads work, writes are refused with a :class:`StoreError` that says why.

The rows and the :class:`~gaugelab.study.store.db.RunStore` API are in
:mod:`gaugelab.study.store.db`,
which re-exports the public names defined here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
from pathlib import Path

from gaugelab.study.store.schema import (
    APPEND_ONLY,
    APPLICATION_ID,
    MIGRATES_FROM,
    SCHEMA_VERSION,
    TABLES,
    TERMINATION_CLASSES,
    migrate,
    schema,
)

__all__ = [
    "APPEND_ONLY",
    "APPLICATION_ID",
    "MIGRATES_FROM",
    "SCHEMA_VERSION",
    "TERMINATION_CLASSES",
    "StoreError",
    "check_header",
    "create",
    "not_writable",
    "open_store",
    "refused",
    "release",
    "schema",
    "truncated",
]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


class StoreError(ValueError):
    """The file at a store path is not a usable gaugelab run store, or stored data is corrupt.

    The message names the path and what was found there. The file is never modified.
    """


def refused(path: Path, error: sqlite3.DatabaseError) -> StoreError:
    """The :class:`StoreError` for an SQLite error raised while reading the store at ``path``.

    Corrupt pages (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``) read as a corrupt store; an I/O
    error on a device with no free space (``SQLITE_IOERR_SHMSIZE`` when the ``-shm`` file
    cannot grow) as a full disk, with what to do; any other
    SQLite error (a lock held past the busy timeout, an unreadable file) as SQLite refusing
    it. Either way the message names the path and says the file was left untouched: SQLite
    rolls a failed statement back, and gaugelab never repairs or rewrites a store.
    """
    code = getattr(error, "sqlite_errorname", None) or type(error).__name__
    if code.startswith(("SQLITE_IOERR", "SQLITE_FULL")) and _no_space(path):
        return StoreError(
            f"{path}: disk full — SQLite could not write its shared-memory or journal file "
            f"beside the store ({code}); free space on the device and rerun (the file was left "
            "untouched)"
        )
    what = "corrupt gaugelab run store" if code in _CORRUPT else "SQLite refused the run store"
    return StoreError(f"{path}: {what} ({code}: {error}); the file was left untouched")


def _no_space(path: Path) -> bool:
    """Whether the device holding ``path``'s folder has no free block left for this user."""
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except OSError:
        return False


def check_header(path: Path) -> int:
    """Refuse anything but a gaugelab store this gaugelab reads, reading only the raw header.

    Nothing is opened with SQLite before this passes, so a foreign file is never touched.

    Returns:
        The store's schema version: :data:`SCHEMA_VERSION`, or one of :data:`MIGRATES_FROM`.

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
    if len(header) < 100 and header[:16] == _SQLITE_MAGIC[: len(header[:16])]:
        raise StoreError(
            f"{path}: truncated SQLite file ({size} bytes, shorter than SQLite's 100-byte "
            "header), not a usable gaugelab run store; the file was left untouched"
        )
    if header[:16] != _SQLITE_MAGIC:
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
    if version != SCHEMA_VERSION and version not in MIGRATES_FROM:
        newer = " (written by a newer gaugelab)" if version > SCHEMA_VERSION else ""
        raise StoreError(
            f"{path}: gaugelab run store schema version {version}{newer}; this gaugelab reads "
            f"version {SCHEMA_VERSION}"
        )
    if truncated(path) and truncated(path):  # asked twice: a checkpoint may be under way
        raise StoreError(f"{path}: truncated gaugelab run store (shorter than its header says)")
    return version


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


# Stores this process has open, by (pid, device, inode) → open connections. While one is open,
# the file must not be opened and closed outside SQLite: closing any descriptor of a file drops
# every POSIX lock this process holds on it, SQLite's included, and another process could then
# take this one's WAL for unused and delete it (a corrupt store). The header was checked when
# the first connection opened, and that connection migrated an older schema.
_OPEN: dict[tuple[int, int, int], int] = {}
_OPEN_LOCK = threading.Lock()


def _file_key(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return os.getpid(), st.st_dev, st.st_ino


def release(key: tuple[int, int, int]) -> None:
    """Forget one connection that :func:`open_store` counted (call after closing it)."""
    with _OPEN_LOCK:
        left = _OPEN.get(key, 0) - 1
        if left > 0:
            _OPEN[key] = left
        else:
            _OPEN.pop(key, None)


def not_writable(path: Path) -> str | None:
    """Why this process cannot write the existing store at ``path`` (its file or its folder is
    read-only for it: SQLite needs both, for the ``-wal`` and ``-shm`` files), or ``None``."""
    if not os.access(path, os.W_OK):
        return "the file is read-only"
    if not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is read-only"
    return None


def _connect(path: Path, version: int, readonly: str | None) -> sqlite3.Connection:
    """Connect to a store whose header passed; migrate an older schema; check its tables.

    A writable store is used in WAL mode. A read-only one (``readonly`` says why) is opened
    with ``mode=ro`` — and ``immutable=1`` when no ``-wal`` file exists, since then no process
    can be writing it and SQLite could not create its ``-shm`` file.

    Raises:
        StoreError: SQLite reports the file corrupt or refuses it, WAL mode is unavailable, a
            table is missing, or an older schema cannot be migrated because the store is
            read-only; the connection is closed and the file left untouched.
    """
    if readonly is not None:
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{path}: gaugelab run store schema version {version}, which this gaugelab "
                f"migrates to version {SCHEMA_VERSION} when it can write the store, and "
                f"{readonly}; give write access once, or use a copy in a writable folder"
            )
        quiet = not Path(f"{path}-wal").exists()
        target, uri = path.as_uri() + ("?mode=ro&immutable=1" if quiet else "?mode=ro"), True
    else:
        target, uri = str(path), False
    try:
        conn = sqlite3.connect(target, timeout=60.0, isolation_level=None, uri=uri)
    except sqlite3.DatabaseError as e:
        raise refused(path, e) from None
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA foreign_keys = ON")
        if readonly is None:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(
                    f"{path}: SQLite could not enable WAL mode (journal_mode={mode!r}); the "
                    "run store needs a local file system"
                )
            # Durable across process crashes; a power loss may drop the last commits only.
            conn.execute("PRAGMA synchronous = NORMAL")
            if version != SCHEMA_VERSION:
                migrate(conn)
        found = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        missing = sorted(set(TABLES) - found)
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

    Raises:
        OSError: the folder cannot be created or written (see :func:`open_store`).
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


def _not_a_folder(path: Path) -> Path | None:
    """The first ancestor of ``path`` that exists and is not a directory, if any."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def open_store(
    path: Path, *, create_missing: bool
) -> tuple[sqlite3.Connection, str | None, tuple[int, int, int]]:
    """Open the store file at ``path`` (creating it first if asked).

    Args:
        path: absolute path of the store file.
        create_missing: create a new store (and its parent directories) when nothing exists.

    Returns:
        ``(connection, readonly, key)``: a connection in autocommit mode
        (``isolation_level=None``), foreign keys on, 60 s busy timeout, WAL; ``None``, or why
        the store is read-only for this process (then the connection is read-only:
        ``mode=ro``); and the key to :func:`release` once the connection is closed. Only the
        header and the schema have been read, not every page (the raw header only when this
        process has no other connection to the file). A store of an older schema version is
        migrated first (one transaction).

    Raises:
        FileNotFoundError: nothing at ``path`` and ``create_missing`` is false.
        StoreError: ``path`` is a directory, lies under a regular file, cannot be created
            (a read-only folder), or is anything but a readable gaugelab store this gaugelab
            reads (:func:`check_header`; corrupt pages or an SQLite refusal while connecting,
            :func:`refused`); the file is left byte-identical.
    """
    blocker = _not_a_folder(path)
    if blocker is not None:
        raise StoreError(
            f"{path}: {blocker} is a file, not a folder, so no run store can be there; choose "
            "another --store path"
        )
    if not path.exists():
        if not create_missing:
            raise FileNotFoundError(f"RunStore: no run store at {path}")
        try:
            create(path)
        except OSError as e:
            raise StoreError(
                f"{path}: cannot create a run store there ({e.strerror or e}); choose a --store "
                "path in a folder you can write"
            ) from None
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a gaugelab run store")
    key = _file_key(path)
    with _OPEN_LOCK:
        already = _OPEN.get(key, 0) > 0
        _OPEN[key] = _OPEN.get(key, 0) + 1  # counted now: no raw read may start meanwhile
    try:
        version = SCHEMA_VERSION
        if not already:
            try:
                version = check_header(path)
            except PermissionError as e:
                raise StoreError(f"{path}: cannot read the run store ({e.strerror})") from None
        readonly = not_writable(path)
        conn = _connect(path, version, readonly)
    except BaseException:
        release(key)
        raise
    return conn, readonly, key
