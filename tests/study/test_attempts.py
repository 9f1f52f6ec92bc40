"""Tests of gaugelab.study.store.attempts and _owner: claims, owners, heartbeats, abandoned
attempts,
and the schema-1 migration."""

import contextlib
import multiprocessing
import os
import sqlite3
import time
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import Field

from gaugelab.study.spec import ExperimentSpec, Manifest
from gaugelab.study.store.db import SCHEMA_VERSION, RunStore, StoreError
from gaugelab.study.store.owner import (
    KILLED,
    STALE_SECONDS,
    Heartbeat,
    Owner,
    gone,
    killed,
    this_process,
)

ENV = "e" * 64  # a fixed environment digest: keeps torch out of the writer processes


class ClaimSpec(ExperimentSpec):
    """A minimal spec for claim tests."""

    kind = "claim-toy"
    seed: int = Field(0, description="seed")


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "store.sqlite") as s:
        yield s


def register(store: RunStore, seed: int = 0) -> str:
    return store.register_run(Manifest.for_spec(ClaimSpec(seed=seed))).identity


def _open_and_exit(path: str, identity: str) -> None:
    """A process that opens an attempt and dies without ending it (as after kill -9)."""
    with RunStore(path, create=False) as s:
        s.claim(identity, environment_digest=ENV)
    os._exit(0)


def _dead_owner_attempt(store: RunStore, identity: str) -> int:
    """Open an attempt in another process that then exits; returns that process's pid."""
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_open_and_exit, args=(str(store.path), identity))
    proc.start()
    proc.join(timeout=120)
    assert proc.exitcode == 0
    return proc.pid


def test_a_claim_opens_one_attempt_and_a_held_or_completed_run_is_not_claimed(store):
    identity = register(store)
    first = store.claim(identity, environment_digest=ENV)
    assert first.claimed and first.ordinal == 1
    row = store.attempt(first.attempt_id)
    me = this_process()
    assert (row.owner_host, row.owner_pid, row.owner_started) == (me.host, me.pid, me.started)
    assert row.heartbeat_at is not None
    held = store.claim(identity, environment_digest=ENV)  # this process still holds it
    assert not held.claimed and held.holder.id == first.attempt_id
    store.end_attempt(first.attempt_id, "completed")
    done = store.claim(identity, environment_digest=ENV)
    assert not done.claimed and done.completed.ordinal == 1
    again = store.claim(identity, distrust_through=1, environment_digest=ENV)  # re-execute
    assert again.claimed and again.ordinal == 2
    assert [a.termination for a in store.attempts(identity)] == ["completed", None]


def test_an_attempt_whose_owner_pid_is_gone_is_closed_by_the_next_claim(store):
    identity = register(store)
    pid = _dead_owner_attempt(store, identity)
    assert store.holder(identity) is None  # a dead owner holds nothing (read-only check)
    assert store.attempts(identity)[0].termination is None  # ... and holder() closed nothing
    claim = store.claim(identity, environment_digest=ENV)
    assert claim.claimed and claim.ordinal == 2
    assert [a.ordinal for a in claim.closed] == [1]
    first = store.attempts(identity)[0]
    assert (first.termination, first.message) == ("infrastructure_failure", killed(pid))
    assert first.message == f"killed: pid {pid} ended before its run did"


def test_an_older_stores_killed_attempts_read_as_todays_class_and_message(store):
    # as stores wrote them before one class was kept for a killed command: in-process runs,
    # a pool worker whose driver died, a Ctrl-C'd worker stopped by force; and two that stay
    identity = register(store)
    old = [
        ("infrastructure_failure", "owner pid 4242 gone"),
        ("cancelled", "driver pid 4343 gone"),
        ("cancelled", "owner pid 4444 gone (interrupted)"),
        ("infrastructure_failure", "owner pid 4545 gone (worker process died: boom)"),
        ("cancelled", "interrupted"),
        ("infrastructure_failure", "OSError: driver pid 1 gone wrong"),
    ]
    for termination, message in old:
        store.end_attempt(store.start_attempt(identity, environment_digest=ENV), termination,
                          message)  # fmt: skip
    assert [(a.termination, a.message) for a in store.attempts(identity)] == [
        (KILLED, "killed: pid 4242 ended before its run did"),
        (KILLED, "killed: pid 4343 ended before its run did"),
        ("cancelled", "killed: pid 4444 ended before its run did (interrupted)"),
        (KILLED, "killed: pid 4545 ended before its run did (worker process died: boom)"),
        ("cancelled", "interrupted"),
        ("infrastructure_failure", "OSError: driver pid 1 gone wrong"),
    ]
    assert store.attempt(store.attempts(identity)[1].id).termination == KILLED  # one row alike
    assert store.incomplete(identity).startswith("it failed: infrastructure_failure — OSError")


def test_a_reused_pid_is_not_mistaken_for_the_owner():
    me = this_process()
    assert gone(Owner(me.host, me.pid, me.started), None) == killed(me.pid)  # not held
    parent = Owner(me.host, os.getppid(), "1")  # the parent's pid, another start time
    assert gone(parent, None) == killed(os.getppid())
    assert gone(Owner(me.host, os.getppid(), ""), None) is None  # start unknown: the pid decides


def _insert_foreign(store: RunStore, identity: str, heartbeat: datetime, ordinal: int) -> None:
    """An open attempt of a process on another host, written as that host's gaugelab would."""
    conn = sqlite3.connect(store.path)
    conn.execute(
        "INSERT INTO attempts (run, ordinal, environment_digest, started_at, owner_host, "
        "owner_pid, owner_started, heartbeat_at) VALUES (?, ?, ?, ?, 'elsewhere', 4242, '7', ?)",
        (identity, ordinal, ENV, heartbeat.isoformat(), heartbeat.isoformat()),
    )
    conn.commit()
    conn.close()


def test_another_hosts_attempt_holds_the_run_while_its_heartbeat_is_fresh(store):
    identity = register(store)
    now = datetime.now(UTC)
    _insert_foreign(store, identity, now - timedelta(seconds=STALE_SECONDS / 2), 1)
    assert store.claim(identity, environment_digest=ENV).holder.owner_host == "elsewhere"
    other = register(store, seed=1)
    _insert_foreign(store, other, now - timedelta(seconds=STALE_SECONDS + 5), 1)
    claim = store.claim(other, environment_digest=ENV)
    assert claim.claimed and claim.ordinal == 2
    closed = store.attempts(other)[0]
    assert closed.termination == "infrastructure_failure"
    assert (
        closed.message.startswith("heartbeat stale (last ")
        and "pid 4242 on elsewhere" in closed.message
    )


def test_the_triggers_allow_a_heartbeat_on_an_open_attempt_and_nothing_else(store):
    identity = register(store)
    attempt = store.start_attempt(identity, environment_digest=ENV)
    before = store.attempt(attempt).heartbeat_at
    time.sleep(0.01)
    assert store.heartbeat(attempt)
    assert store.attempt(attempt).heartbeat_at > before
    conn = sqlite3.connect(store.path, isolation_level=None)  # a client bypassing RunStore
    for statement in (
        "UPDATE attempts SET message = 'x'",
        "UPDATE attempts SET owner_pid = 1",
        "UPDATE attempts SET owner_host = 'h'",
        "UPDATE attempts SET started_at = 'then'",
        "UPDATE attempts SET ended_at = 'now'",  # ending needs a termination class (CHECK)
    ):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(statement)
    store.end_attempt(attempt, "completed")
    assert not store.heartbeat(attempt)  # ended: nothing to refresh
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE attempts SET heartbeat_at = 'later'")
    conn.close()


def test_the_heartbeat_thread_refreshes_the_attempt_until_stopped(store):
    identity = register(store)
    attempt = store.start_attempt(identity, environment_digest=ENV)
    stamps = {store.attempt(attempt).heartbeat_at}
    beat = Heartbeat(lambda: RunStore(store.path, create=False), attempt, interval=0.05).start()
    deadline = time.monotonic() + 30
    while len(stamps) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
        stamps.add(store.attempt(attempt).heartbeat_at)
    beat.stop()
    assert len(stamps) >= 3 and beat.stopped is None


def _claimer(path: str, identity: str, barrier, done, results) -> None:
    with RunStore(path, create=False) as s:
        barrier.wait(timeout=60)
        claim = s.claim(identity, environment_digest=ENV)
        results.put(claim.claimed)
        done.wait(timeout=60)  # the claimant stays alive while the others look


def test_six_racing_claims_open_exactly_one_attempt(tmp_path):
    path = tmp_path / "store.sqlite"
    with RunStore(path) as s:
        identity = register(s)
    ctx = multiprocessing.get_context("spawn")
    barrier, done, results = ctx.Barrier(6), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_claimer, args=(str(path), identity, barrier, done, results))
        for _ in range(6)
    ]
    try:
        for p in procs:
            p.start()
        claimed = [results.get(timeout=120) for _ in procs]
    finally:
        done.set()
        for p in procs:
            p.join(timeout=60)
    assert sorted(claimed) == [False] * 5 + [True]
    with RunStore(path, create=False) as s:
        assert [a.ordinal for a in s.attempts(identity)] == [1]


def _schema_1(path) -> None:
    """Turn a new store into what gaugelab wrote before attempts had owners (schema 1)."""
    RunStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TRIGGER attempts_heartbeat_or_end_once")
    for column in ("owner_host", "owner_pid", "owner_started", "heartbeat_at", "metrics_digest"):
        conn.execute(f"ALTER TABLE attempts DROP COLUMN {column}")
    conn.execute(
        "CREATE TRIGGER attempts_end_once BEFORE UPDATE ON attempts WHEN OLD.termination IS "
        "NOT NULL BEGIN SELECT RAISE(ABORT, 'append-only'); END"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()


def test_a_schema_1_store_is_migrated_with_its_rows_and_its_open_attempts_judged(tmp_path):
    path = tmp_path / "store.sqlite"
    _schema_1(path)
    conn = sqlite3.connect(path)
    manifest = Manifest.for_spec(ClaimSpec())
    conn.execute(
        "INSERT INTO runs VALUES (?, ?, '{}', ?, 'then')",
        (manifest.identity, manifest.kind, manifest.model_dump_json()),
    )
    conn.execute(
        "INSERT INTO attempts (run, ordinal, environment_digest, started_at) VALUES (?, 1, ?, ?)",
        (manifest.identity, ENV, "2020-01-01T00:00:00+00:00"),  # left open by a crash
    )
    conn.commit()
    conn.close()
    with RunStore(path, create=False) as s:
        with contextlib.closing(sqlite3.connect(path)) as raw:
            assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        (old,) = s.attempts(manifest.identity)
        assert (old.owner_host, old.owner_pid, old.heartbeat_at) == ("", 0, None)
        claim = s.claim(manifest.identity, environment_digest=ENV)  # no owner: judged stale
        assert claim.claimed and claim.ordinal == 2
        assert s.attempts(manifest.identity)[0].message.startswith("heartbeat stale")
    with RunStore(path, create=False) as s:  # migrated once; opens again as it is
        assert len(s.attempts(manifest.identity)) == 2


def test_a_read_only_old_store_is_refused_saying_it_needs_a_migration(tmp_path, monkeypatch):
    from gaugelab.study.store import storefile as _storefile

    path = tmp_path / "store.sqlite"
    _schema_1(path)
    monkeypatch.setattr(_storefile, "not_writable", lambda p: "the file is read-only")
    with pytest.raises(StoreError, match="schema version 1, which this gaugelab migrates"):
        RunStore(path, create=False)
