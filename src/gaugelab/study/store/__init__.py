"""The run store: the SQLite database, its attempts and owners, its read side and the verified
reader of results.

* ``attempts`` — Attempts: opening, claiming, heartbeats, ending; abandoned attempts closed.
* ``db`` — The run store: an append-only SQLite database of studies, runs, attempts, metrics,
  artifacts.
* ``owner`` — Who holds an open attempt, whether that process still lives, and the heartbeat that
  says so.
* ``queries`` — The run store's rows and its read side: studies, runs, attempts, metrics and
  artifacts.
* ``results`` — The read side of results: a run's files, verified, and a study's runs as read back.
* ``seals`` — The sha256 of each file a run wrote and the digest sealing each ended attempt's
  metric rows; a read that finds either changed raises.
* ``schema`` — The run store's schema: its version, its DDL (tables, indexes, append-only
  triggers), and the migration of older versions.
* ``storefile`` — The run store's file: its format, its creation, and opening it before any row is
  read.

The public names of ``db``, ``results`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "db", "results")
