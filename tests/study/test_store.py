"""Tests of gaugelab.study.store.db: the append-only SQLite run store."""

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from pydantic import Field

from gaugelab import NonFiniteError
from gaugelab.study.spec import ExperimentSpec, Manifest
from gaugelab.study.store.db import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    TERMINATION_CLASSES,
    RunStore,
    StoreError,
)
from gaugelab.study.store.schema import _ATTEMPTS_UPDATE
from gaugelab.study.store.storefile import refused

ENV = "e" * 64  # a fixed environment digest: keeps torch out of the writer processes


class StoreSpec(ExperimentSpec):
    """A minimal spec for store tests."""

    kind = "store-toy"
    seed: int = Field(0, description="seed")


_MANIFESTS: dict[int, Manifest] = {}


def manifest(seed: int = 0) -> Manifest:
    if seed not in _MANIFESTS:
        _MANIFESTS[seed] = Manifest.for_spec(StoreSpec(seed=seed))
    return _MANIFESTS[seed]


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs" / "store.sqlite") as s:
        yield s


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_new_store_has_schema_wal_and_our_application_id(store):
    header = store.path.read_bytes()[:100]
    assert int.from_bytes(header[68:72], "big") == APPLICATION_ID
    assert int.from_bytes(header[60:64], "big") == SCHEMA_VERSION
    conn = sqlite3.connect(store.path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"studies", "runs", "attempts", "metrics", "artifacts"} <= tables
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert not list(store.path.parent.glob(".*creating*"))  # no temporary left behind


def test_sql_refuses_updates_and_deletes(store):
    store.add_study("s")
    store.register_run(manifest(), study="s")
    attempt = store.start_attempt(manifest().identity, environment_digest=ENV)
    store.log_metrics(attempt, 0, {"loss": 1.0})
    artifact = store.path.parent / "a.txt"
    artifact.write_text("x")
    store.add_artifact(attempt, artifact, "note")
    store.end_attempt(attempt, "completed")
    conn = sqlite3.connect(store.path)  # a client that bypasses RunStore
    statements = [
        "UPDATE studies SET kind = 'x'",
        "UPDATE runs SET kind = 'x'",
        "UPDATE study_runs SET study = 's'",
        "UPDATE attempts SET message = 'rewritten'",  # ended: closed for good
        "UPDATE metrics SET value = 2.0",
        "UPDATE artifacts SET kind = 'x'",
        "INSERT OR REPLACE INTO runs SELECT * FROM runs",
        *(
            f"DELETE FROM {t}"
            for t in ("metrics", "artifacts", "attempts", "study_runs", "runs", "studies")
        ),
    ]
    for statement in statements:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    conn.close()
    assert [m.value for m in store.metrics(manifest().identity)] == [1.0]


def test_failed_attempt_is_kept_beside_its_retry(store):
    identity = store.register_run(manifest()).identity
    first = store.start_attempt(identity, environment_digest=ENV)
    store.end_attempt(first, "infrastructure_failure", "worker lost")
    assert not store.completed(identity)
    second = store.start_attempt(identity, environment_digest=ENV)
    store.end_attempt(second, "completed")
    attempts = store.attempts(identity)
    assert [(a.ordinal, a.termination) for a in attempts] == [
        (1, "infrastructure_failure"),
        (2, "completed"),
    ]
    assert attempts[0].message == "worker lost" and attempts[0].ended_at is not None
    assert store.completed(identity)


@pytest.mark.parametrize("after", ["BEGIN", "COMMIT"])
def test_an_interrupt_at_the_edge_of_a_transaction_leaves_none_open(store, after):
    """Ctrl-C, or a worker's heartbeat stopping it, can land just after SQLite has begun (or
    failed to end) a transaction: the next write (recording the attempt as cancelled or killed)
    must still start its own."""
    identity = store.register_run(manifest()).identity
    attempt = store.start_attempt(identity, environment_digest=ENV)
    real = store._connection()

    class Interrupting:
        armed = True

        def execute(self, sql, *args):
            if after == "COMMIT" and self.armed and sql == "COMMIT":
                self.armed = False
                raise KeyboardInterrupt  # before SQLite ends it
            out = real.execute(sql, *args)
            if after == "BEGIN" and self.armed and sql.startswith("BEGIN"):
                self.armed = False
                raise KeyboardInterrupt
            return out

        def __getattr__(self, name):
            return getattr(real, name)

    proxy = Interrupting()
    store._connection = lambda: proxy  # the store's next transactions go through it
    with pytest.raises(KeyboardInterrupt):
        store.log_metrics(attempt, 1, {"loss": 1.0})
    assert not real.in_transaction
    store.end_attempt(attempt, "cancelled", "interrupted")
    assert store.attempts(identity)[0].termination == "cancelled"
    assert store.metrics(identity) == []  # the interrupted write was rolled back whole


def test_end_attempt_twice_raises(store):
    identity = store.register_run(manifest()).identity
    attempt = store.start_attempt(identity, environment_digest=ENV)
    store.end_attempt(attempt, "numerical_failure")
    with pytest.raises(ValueError, match="already ended as 'numerical_failure'"):
        store.end_attempt(attempt, "completed")
    with pytest.raises(ValueError, match="already ended"):
        store.log_metrics(attempt, 1, {"loss": 1.0})
    assert store.attempts(identity)[0].termination == "numerical_failure"


def test_termination_class_is_validated(store):
    attempt = store.start_attempt(store.register_run(manifest()).identity, environment_digest=ENV)
    with pytest.raises(ValueError, match="allowed: completed, validation_stopped"):
        store.end_attempt(attempt, "crashed")
    assert len(TERMINATION_CLASSES) == 6


def test_non_finite_metric_raises_and_writes_nothing(store):
    identity = store.register_run(manifest()).identity
    attempt = store.start_attempt(identity, environment_digest=ENV)
    with pytest.raises(NonFiniteError, match="'grad_norm'"):
        store.log_metrics(attempt, 3, {"loss": 0.5, "grad_norm": float("nan")})
    with pytest.raises(NonFiniteError):
        store.log_metrics(attempt, 3, {"loss": float("inf")})
    assert store.metrics(identity) == []


def test_duplicate_metric_in_one_attempt_is_refused(store):
    attempt = store.start_attempt(store.register_run(manifest()).identity, environment_digest=ENV)
    store.log_metrics(attempt, 0, {"loss": 1.0})
    with pytest.raises(ValueError, match="already logged"):
        store.log_metrics(attempt, 0, {"acc": 0.1, "loss": 2.0})
    assert [m.name for m in store.metrics(manifest().identity)] == ["loss"]  # all or nothing


def test_metrics_default_to_the_trajectory_through_a_resume(store):
    identity = store.register_run(manifest()).identity
    first = store.start_attempt(identity, environment_digest=ENV)
    for step in range(6):  # checkpointed at step 4, killed after logging step 5
        store.log_metrics(first, step, {"loss": float(step)})
    store.end_attempt(first, "infrastructure_failure")
    second = store.start_attempt(identity, environment_digest=ENV)
    for step in range(5, 8):  # resumed from the step-4 checkpoint
        store.log_metrics(second, step, {"loss": 10.0 + step})
    store.end_attempt(second, "completed")
    rows = store.metrics(identity)
    assert [(r.step, r.ordinal, r.value) for r in rows] == [
        (0, 1, 0.0),
        (1, 1, 1.0),
        (2, 1, 2.0),
        (3, 1, 3.0),
        (4, 1, 4.0),
        (5, 2, 15.0),
        (6, 2, 16.0),
        (7, 2, 17.0),
    ]
    assert [r.step for r in store.metrics(identity, ordinal=1)] == list(range(6))
    assert store.metrics(identity, name="acc") == []


def test_studies_and_runs_are_idempotent_and_immutable(store):
    spec = StoreSpec(seed=1)
    assert store.add_study("sweep", spec) == store.add_study("sweep", spec)
    with pytest.raises(ValueError, match="different spec"):
        store.add_study("sweep", StoreSpec(seed=2))
    with pytest.raises(ValueError, match="unknown study"):
        store.register_run(manifest(), study="nope")
    row = store.register_run(manifest(), study="sweep")
    again = store.register_run(Manifest.for_spec(StoreSpec()), study="sweep")
    assert again.manifest == row.manifest  # the first manifest is kept
    store.add_study("other")
    store.register_run(manifest(), study="other")
    assert store.run(row.identity).studies == ("other", "sweep")
    assert [r.identity for r in store.runs()] == [row.identity]
    assert [r.identity for r in store.runs("sweep")] == [row.identity]
    assert [s.name for s in store.studies()] == ["sweep", "other"]
    assert store.studies()[0].spec == {"seed": 1}


def test_run_resolves_a_unique_prefix(store):
    seen: dict[str, int] = {}
    seed = 0
    while (prefix := StoreSpec(seed=seed).identity()[:4]) not in seen:  # birthday search
        seen[prefix] = seed
        seed += 1
    a = store.register_run(Manifest.for_spec(StoreSpec(seed=seen[prefix]))).identity
    b = store.register_run(Manifest.for_spec(StoreSpec(seed=seed))).identity
    differ = next(i for i in range(64) if a[i] != b[i])
    assert store.run(a[: differ + 1]).identity == a
    assert store.run(b).identity == b
    c = store.register_run(Manifest.for_spec(StoreSpec(seed=seed + 1))).identity
    if c[:4] != prefix:
        assert store.run(c[:4]).identity == c  # 4 characters are enough when unambiguous
    with pytest.raises(ValueError, match="ambiguous") as info:
        store.run(prefix)
    assert a[:12] in str(info.value) and b[:12] in str(info.value)  # the candidates are listed
    absent = next(p for p in ("0000", "ffff") if p != prefix)
    with pytest.raises(ValueError, match="no run"):
        store.run(absent)
    with pytest.raises(ValueError, match="4 to 64 lowercase hex"):
        store.run("abc")


def test_artifact_records_sha256_and_a_relative_path(store, tmp_path):
    attempt = store.start_attempt(store.register_run(manifest()).identity, environment_digest=ENV)
    inside = store.path.parent / "run" / "plot.png"
    inside.parent.mkdir()
    inside.write_bytes(b"png")
    outside = tmp_path / "elsewhere.txt"
    outside.write_bytes(b"txt")
    store.add_artifact(attempt, inside, "plot")
    row = store.add_artifact(attempt, outside, "note")
    assert row.path == outside and row.sha256 == hashlib.sha256(b"txt").hexdigest()
    conn = sqlite3.connect(store.path)
    assert [r[0] for r in conn.execute("SELECT path FROM artifacts ORDER BY id")] == [
        "run/plot.png",
        str(outside),
    ]
    conn.close()
    with pytest.raises(FileNotFoundError):
        store.add_artifact(attempt, tmp_path / "missing", "note")


def test_store_is_bound_to_its_process(store):
    store._pid = -1  # as after a fork
    with pytest.raises(RuntimeError, match="one RunStore per process"):
        store.runs()


def _writer(path: str, manifest_json: str, worker: int, barrier) -> None:
    """One worker process: open the (maybe not yet created) store and write 200 metric rows."""
    m = Manifest.model_validate_json(manifest_json)
    barrier.wait(timeout=60)  # all eight create/open the store at the same moment
    with RunStore(path) as s:
        s.add_study("concurrent", StoreSpec())
        s.register_run(m, study="concurrent")
        attempt = s.start_attempt(m.identity, environment_digest=ENV)
        for step in range(20):
            s.log_metrics(attempt, step, {f"w{worker}/m{i}": float(step * i) for i in range(10)})
        s.end_attempt(attempt, "completed", f"worker {worker}")


def test_eight_concurrent_writers_lose_no_rows(tmp_path):
    path = tmp_path / "new" / "store.sqlite"  # created by the racing workers themselves
    m = manifest()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(8)
    args = (str(path), m.model_dump_json())
    workers = [ctx.Process(target=_writer, args=(*args, w, barrier)) for w in range(8)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
    assert [w.exitcode for w in workers] == [0] * 8
    with RunStore(path, create=False) as s:
        attempts = s.attempts(m.identity)
        assert sorted(a.ordinal for a in attempts) == list(range(1, 9))
        assert all(a.termination == "completed" for a in attempts)
        rows = [r for a in attempts for r in s.metrics(m.identity, ordinal=a.ordinal)]
        assert len(rows) == 8 * 200
        assert len(s.runs("concurrent")) == 1
        s.check()


def _foreign_sqlite(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE mine (x INTEGER)")
    conn.execute("INSERT INTO mine VALUES (1)")
    conn.commit()
    conn.close()


def _newer_schema(path):
    RunStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()


def _truncated(path):
    with RunStore(path) as s:
        s.register_run(manifest())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(os.urandom(4096)), "not an SQLite database"),
        (lambda p: p.write_bytes(b""), "empty file"),
        (lambda p: p.write_text("name,value\n"), "not an SQLite database"),
        (_foreign_sqlite, "application_id 0x00000000 ≠ 0x47415547"),
        (_newer_schema, "newer gaugelab"),
        (_truncated, "truncated"),
    ],
    ids=["random-bytes", "empty", "csv", "foreign-sqlite", "newer-schema", "truncated"],
)
def test_a_foreign_or_corrupt_file_is_refused_untouched(tmp_path, make, message):
    path = tmp_path / "store.sqlite"
    make(path)
    before = digest(path)
    with pytest.raises(StoreError, match=message) as info:
        RunStore(path)
    assert str(path) in str(info.value)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.sqlite"]


def _corrupt_pages(path):
    with RunStore(path) as s:
        s.add_study("s")
        s.register_run(manifest(), study="s")
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # page 1 after the header: the schema's b-tree
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("create", [True, False], ids=["create", "no-create"])
def test_a_store_with_corrupt_pages_is_refused_untouched(tmp_path, create):
    path = tmp_path / "store.sqlite"
    _corrupt_pages(path)
    before = digest(path)
    with pytest.raises(StoreError, match="corrupt gaugelab run store") as info:
        RunStore(path, create=create)
    assert str(path) in str(info.value)
    assert "the file was left untouched" in str(info.value)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.sqlite"]  # no -wal, no -shm


def test_an_sqlite_refusal_other_than_corruption_is_not_called_corrupt(tmp_path):
    error = refused(tmp_path / "s.sqlite", sqlite3.OperationalError("database is locked"))
    assert isinstance(error, StoreError)
    assert str(error) == (
        f"{tmp_path / 's.sqlite'}: SQLite refused the run store (OperationalError: database is "
        "locked); the file was left untouched"
    )


def test_missing_store_without_create_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        RunStore(tmp_path / "absent.sqlite", create=False)
    assert not (tmp_path / "absent.sqlite").exists()


def test_a_copied_store_reopens_with_its_rows(store, tmp_path):
    store.register_run(manifest())
    store.close()
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(store.path, copy)
    with RunStore(copy, create=False) as s:
        assert [r.identity for r in s.runs()] == [manifest().identity]


def test_check_reports_a_damaged_page_and_leaves_the_file_alone(tmp_path):
    path = tmp_path / "store.sqlite"
    with RunStore(path) as s:
        attempt = s.start_attempt(s.register_run(manifest()).identity, environment_digest=ENV)
        for step in range(300):
            s.log_metrics(attempt, step, {"loss": float(step)})
    data = bytearray(path.read_bytes())
    page = 4096  # overwrite the last page (metric rows or their index) with garbage
    data[-page:] = os.urandom(page)
    path.write_bytes(bytes(data))
    before = digest(path)
    with RunStore(path, create=False) as s, pytest.raises(StoreError, match="corrupt") as info:
        s.check()
    assert str(path) in str(info.value) and "left untouched" in str(info.value)
    assert digest(path) == before


def test_a_second_connection_in_one_process_never_reads_the_file_outside_sqlite(store, monkeypatch):
    # closing any descriptor of the file would drop SQLite's POSIX locks of this process (and
    # let another process delete the WAL under the open connection): the raw header is read
    # only by a process's first connection
    from gaugelab.study.store import storefile as _storefile

    def raw_read(path):
        raise AssertionError(f"raw read of {path} while a connection is open")

    monkeypatch.setattr(_storefile, "check_header", raw_read)
    with RunStore(store.path, create=False) as second:
        assert second.runs() == []
    store.close()
    with pytest.raises(AssertionError, match="raw read"):  # none open: the header is checked
        RunStore(store.path, create=False)


# --- environment failures: one line naming the path and what to do ------------------------


def test_a_50_byte_file_with_the_sqlite_magic_is_called_truncated(tmp_path):
    path = tmp_path / "store.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + bytes(34))
    with pytest.raises(StoreError) as info:
        RunStore(path)
    assert str(info.value).startswith(f"{path}: truncated SQLite file (50 bytes")
    assert "\n" not in str(info.value) and "first bytes" not in str(info.value)
    assert path.read_bytes() == b"SQLite format 3\x00" + bytes(34)


@pytest.mark.parametrize("below", ["store.sqlite", "sub/store.sqlite"])
def test_a_store_under_a_regular_file_is_refused_naming_that_file(tmp_path, below):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a folder")
    path = blocker / below
    for create in (True, False):
        with pytest.raises(StoreError) as info:
            RunStore(path, create=create)
        assert str(info.value) == (
            f"{path}: {blocker} is a file, not a folder, so no run store can be there; choose "
            "another --store path"
        )


def _as_unprivileged(work) -> list:
    """``work()`` where file permissions apply: as user nobody in a forked child when this
    process is root (root ignores them), else here; returns its JSON-able result."""
    if os.geteuid() != 0:
        return work()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest from here on
        try:
            os.setgid(65534)
            os.setuid(65534)
            out = json.dumps(work())
        except BaseException as e:
            out = json.dumps([f"{type(e).__name__}: {e}"])
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.fixture
def shared_dir():
    """A folder user nobody can enter (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="gaugelab-perm-"))
    folder.chmod(0o755)
    yield folder
    for p in folder.rglob("*"):
        if p.is_dir():
            p.chmod(0o777)
    shutil.rmtree(folder)


def _read_then_write(path: Path) -> list:
    out = []
    with RunStore(path, create=False) as s:
        out.append(s.readonly)
        out.append([r.name for r in s.studies()])
        try:
            s.add_study("later")
        except StoreError as e:
            out.append(str(e))
    return out


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_store_is_read_and_a_write_is_one_line_naming_why(shared_dir, what):
    folder = shared_dir / "runs"
    folder.mkdir()
    path = folder / "store.sqlite"
    with RunStore(path) as s:
        s.add_study("kept")
    before = digest(path)
    if what == "file":
        folder.chmod(0o777)
        path.chmod(0o444)
        why = "the file is read-only"
    else:
        path.chmod(0o666)
        folder.chmod(0o555)
        why = f"its folder {folder} is read-only"
    readonly, studies, error = _as_unprivileged(lambda: _read_then_write(path))
    assert (readonly, studies) == (why, ["kept"])  # a read-only command works
    assert error == (
        f"{path}: the run store is read-only for this process ({why}); writing needs write "
        "access to the file and its folder: fix the permissions or choose another --store"
    )
    assert digest(path) == before


def test_no_store_can_be_created_in_a_read_only_folder(shared_dir):
    folder = shared_dir / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    path = folder / "store.sqlite"

    def create() -> list:
        try:
            RunStore(path)
        except StoreError as e:
            return [str(e)]
        return ["created"]

    (message,) = _as_unprivileged(create)
    assert message == (
        f"{path}: cannot create a run store there (Permission denied); choose a --store path "
        "in a folder you can write"
    )
    assert list(folder.iterdir()) == []


def _edit(path, statement: str, params=()) -> None:
    """Change a metric row as a hostile hand would: with the append-only triggers dropped."""
    conn = sqlite3.connect(path, isolation_level=None)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND "
                                "tbl_name = 'metrics'").fetchall():  # fmt: skip
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute(statement, params)
    conn.close()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE metrics SET value = 1.23e-07 WHERE step = 1",
        "DELETE FROM metrics WHERE step = 2",
        "INSERT INTO metrics SELECT run, attempt, 9, name, value FROM metrics WHERE step = 1",
    ],
    ids=["edited", "removed", "added"],
)
def test_an_ended_attempts_metrics_are_sealed_and_a_changed_row_is_tampering(tmp_path, statement):
    path = tmp_path / "store.sqlite"
    with RunStore(path) as s:
        s.register_run(manifest())
        attempt = s.start_attempt(manifest().identity, environment_digest=ENV)
        for step in (1, 2):
            s.log_metrics(attempt, step, {"loss": 0.5 / step, "acc": 0.1 * step})
        ended = s.end_attempt(attempt, "completed")
        assert len(ended.metrics_digest) == 64
        assert [m.value for m in s.metrics(manifest().identity, name="loss")] == [0.5, 0.25]
    _edit(path, statement)
    with RunStore(path, create=False) as s:
        with pytest.raises(StoreError, match=r"attempt 1: its metric rows have digest .*, not "
                           r"the .* the store sealed them with when the attempt ended"):
            s.metrics(manifest().identity)
        with pytest.raises(StoreError, match=r"changed afterwards \(tampered\); the run is "
                           r"unverified: rerun the command that made it"):
            s.metrics(manifest().identity, name="acc")  # any read of the attempt checks it


def test_the_digest_does_not_depend_on_row_order_and_an_open_attempt_is_unsealed(store):
    from gaugelab.study.store.seals import metrics_digest

    rows = [(2, "b", 0.1 + 0.2), (1, "a", -0.0), (1, "b", 1e308)]
    assert metrics_digest(rows) == metrics_digest(rows[::-1])
    assert metrics_digest(rows) != metrics_digest([(2, "b", 0.3), *rows[1:]])  # repr exact
    store.register_run(manifest())
    attempt = store.start_attempt(manifest().identity, environment_digest=ENV)
    store.log_metrics(attempt, 1, {"loss": 1.0})
    assert store.attempt(attempt).metrics_digest is None
    assert store.metrics(manifest().identity)[0].value == 1.0  # open: read, not checked


def test_a_schema_2_store_is_migrated_and_its_old_attempts_read_unsealed(tmp_path):
    path = tmp_path / "store.sqlite"
    with RunStore(path) as s:
        s.register_run(manifest())
        attempt = s.start_attempt(manifest().identity, environment_digest=ENV)
        s.log_metrics(attempt, 1, {"loss": 1.0})
        s.end_attempt(attempt, "completed")
    conn = sqlite3.connect(path, isolation_level=None)  # what gaugelab wrote at schema 2
    conn.execute("DROP TRIGGER attempts_heartbeat_or_end_once")
    conn.execute("ALTER TABLE attempts DROP COLUMN metrics_digest")
    conn.execute(_ATTEMPTS_UPDATE.replace(
        "\n                 OR NEW.metrics_digest IS NOT OLD.metrics_digest", ""))
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    with RunStore(path, create=False) as s:
        (old,) = s.attempts(manifest().identity)
        assert old.metrics_digest is None and s.metrics(manifest().identity)[0].value == 1.0
        second = s.start_attempt(manifest().identity, environment_digest=ENV)
        s.log_metrics(second, 1, {"loss": 2.0})
        assert s.end_attempt(second, "completed").metrics_digest is not None
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_an_sqlite_io_error_on_a_full_device_reads_as_a_full_disk(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from gaugelab.study.store import storefile

    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"
    monkeypatch.setattr(storefile.os, "statvfs", lambda p: SimpleNamespace(f_bavail=0))
    message = str(refused(tmp_path / "store.sqlite", error))
    assert message.startswith(f"{tmp_path / 'store.sqlite'}: disk full — SQLite could not ")
    assert "free space on the device and rerun" in message and "SHMSIZE" in message
    monkeypatch.setattr(storefile.os, "statvfs", lambda p: SimpleNamespace(f_bavail=10))
    assert "SQLite refused the run store" in str(refused(tmp_path / "store.sqlite", error))
