"""The seals of the run store: the sha256 of each file a run wrote, and the digest each ended
attempt's metric rows are sealed with; a read that finds either changed raises."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Mapping

from gaugelab.study.store.storefile import StoreError

__all__ = ["ArtifactError", "MetricsTampered", "check_sealed", "file_sha256", "metrics_digest"]


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 hex digest of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class ArtifactError(StoreError):
    """A file a run wrote is missing, unreadable, or differs from the sha256 the store recorded
    for it (or the run has no completed attempt to read from); or its metric rows differ from
    their seal (:class:`MetricsTampered`). The message names the file or rows and the run."""


class MetricsTampered(ArtifactError):
    """An ended attempt's metric rows differ from the digest the store sealed them with when
    the attempt ended: rows were edited, added or removed afterwards. The message names the
    run, the attempt and both digests."""


def metrics_digest(rows: list[tuple[int, str, float]]) -> str:
    """sha256 hex of one attempt's metric rows ``(step, name, value)``: one line
    ``step\tname\trepr(value)`` each, sorted by step then name, so the same rows give the
    same digest in any order and any process."""
    digest = hashlib.sha256()
    for step, name, value in sorted(rows, key=lambda r: (r[0], r[1])):
        digest.update(f"{step}\t{name}\t{float(value)!r}\n".encode())
    return digest.hexdigest()


def check_sealed(
    conn: sqlite3.Connection,
    attempt_ids: set[int],
    rows: Mapping[int, list[tuple[int, str, float]]] | None = None,
) -> None:
    """Raise :class:`MetricsTampered` unless every ended attempt of ``attempt_ids`` with a
    recorded digest still holds exactly the rows it was sealed with.

    ``rows``: attempt id → every ``(step, name, value)`` row of that attempt, when the caller
    read them already (otherwise they are read here)."""
    for attempt_id in sorted(attempt_ids):
        run, ordinal, sealed = conn.execute(
            "SELECT run, ordinal, metrics_digest FROM attempts WHERE id = ?", (attempt_id,)
        ).fetchone()
        if sealed is None:
            continue
        held = rows.get(attempt_id) if rows is not None else None
        if held is None:
            held = conn.execute(
                "SELECT step, name, value FROM metrics WHERE attempt = ?", (attempt_id,)
            ).fetchall()
        found = metrics_digest(held)
        if found != sealed:
            raise MetricsTampered(
                f"run {run[:12]} attempt {ordinal}: its metric rows have digest {found[:16]}…, "
                f"not the {sealed[:16]}… the store sealed them with when the attempt ended; "
                "they were changed afterwards (tampered); the run is unverified: rerun the command "
                "that made it, which executes it again"
            )
