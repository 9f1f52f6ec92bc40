"""Tests for gaugelab.study.sweep and runner: expansion, skip, keep-going, retries, Ray; claims
and abandoned attempts, verified reuse, checkpoints set aside, progress from workers, Ctrl-C."""

import functools
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from pydantic import Field

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import the toy spec by name

from toy import ToySpec
from toy_checkpoint import CheckpointToySpec

from gaugelab.errors import advice
from gaugelab.study import runner
from gaugelab.study.runner import execute_run, spec_reference
from gaugelab.study.spec import Manifest
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.owner import KILLED, Heartbeat, Owner, killed, this_process
from gaugelab.study.sweep import Sweep, SweepInterrupted, run_sweep


def metric_values(store, identity):
    return [(m.step, m.value) for m in store.metrics(identity, name="y")]


def test_sweep_expands_grid_times_seeds_in_order():
    sweep = Sweep(
        ToySpec(), grid={"x": [1.0, 2.0], "steps": [2, 3]}, seeds=[0, 1], seed_field="seed"
    )
    specs = sweep.specs()
    assert len(specs) == 8
    assert [(s.x, s.steps, s.seed) for s in specs[:3]] == [(1.0, 2, 0), (1.0, 2, 1), (1.0, 3, 0)]
    assert len({s.identity() for s in specs}) == 8
    with pytest.raises(ValueError, match="does not name a field"):
        Sweep(ToySpec(), grid={"nope": [1]}).specs()
    with pytest.raises(ValueError, match="seed_field"):
        Sweep(ToySpec(), seeds=[1, 2]).specs()
    with pytest.raises(ValueError):
        Sweep(ToySpec(), grid={"steps": [0]}).specs()  # the spec rejects steps = 0


def test_local_sweep_runs_skips_and_reports_failures(tmp_path):
    store_path = tmp_path / "store.sqlite"
    grid = {"fail": ["none", "nan", "stop", "bug", "admission", "flaky-os"]}
    sweep = Sweep(ToySpec(x=2.0), grid=grid, name="toys")
    seen = []
    result = run_sweep(
        sweep, store=store_path, max_workers=2, progress=lambda d, t: seen.append((d, t))
    )
    by_fail = {s.fail: s.identity() for s in sweep.specs()}
    assert sorted(result.completed) == sorted([by_fail["none"], by_fail["flaky-os"]])
    classes = {o.identity: o.termination for o in result.failed}
    assert classes == {
        by_fail["nan"]: "numerical_failure",
        by_fail["stop"]: "validation_stopped",
        by_fail["bug"]: "infrastructure_failure",
        by_fail["admission"]: "admission_failure",
    }
    assert seen[0] == (0, 6) and seen[-1] == (6, 6)
    with RunStore(store_path) as store:
        assert metric_values(store, by_fail["none"]) == [(1, 2.0), (2, 4.0), (3, 6.0)]
        flaky = store.attempts(by_fail["flaky-os"])  # the failed attempt is kept beside its retry
        assert [(a.ordinal, a.termination) for a in flaky] == [
            (1, "infrastructure_failure"),
            (2, "completed"),
        ]
        assert len(store.attempts(by_fail["bug"])) == 1  # a bug is not retried
    again = run_sweep(sweep, store=store_path, max_workers=2)
    assert sorted(again.skipped) == sorted(result.completed)
    assert len(again.completed) == 0  # only the failures ran again, and failed again


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time (tests/conftest.py)
def test_ray_executor_stores_the_same_results_as_local(tmp_path):
    try:
        import ray
    except ImportError:
        pytest.fail("Ray is not installed; `make test` installs gaugelab[ray]")
    sweep = Sweep(ToySpec(), grid={"x": [0.5, 1.5]}, seeds=[3, 4], seed_field="seed")
    local = run_sweep(sweep, store=tmp_path / "local.sqlite", max_workers=2)
    steps = Sweep(CheckpointToySpec(steps=4, pause=0.05))
    seen = []
    try:
        remote = run_sweep(sweep, executor="ray", store=tmp_path / "ray.sqlite", max_workers=2)
        assert not ray.is_initialized()  # the Ray it started is shut down
        run_sweep(
            steps,
            executor="ray",
            store=tmp_path / "ray.sqlite",
            max_workers=1,
            step_progress=lambda *report: seen.append(report),
        )
    finally:
        ray.shutdown()
    assert sorted(local.completed) == sorted(remote.completed) and len(local.completed) == 4
    with RunStore(tmp_path / "local.sqlite") as a, RunStore(tmp_path / "ray.sqlite") as b:
        for identity in local.completed:
            assert metric_values(a, identity) == metric_values(b, identity)
    assert ("toy", 4, 4) in seen  # step progress from the Ray worker


def test_bad_sweep_arguments(tmp_path):
    with pytest.raises(ValueError, match="executor"):
        run_sweep(Sweep(ToySpec()), executor="slurm", store=tmp_path / "s.sqlite")
    with pytest.raises(ValueError, match="retries"):
        run_sweep(Sweep(ToySpec()), retries=-1, store=tmp_path / "s.sqlite")


def test_the_experiments_own_errors_are_classified_by_cause_and_never_retried(tmp_path):
    from gaugelab.study.runner import execute_run, spec_reference

    store = tmp_path / "store.sqlite"
    sweep = Sweep(ToySpec(), grid={"fail": ["nan", "missing-file"]})
    result = run_sweep(sweep, store=store, max_workers=1, retries=2)
    classes = sorted(o.termination for o in result.failed)
    assert classes == ["infrastructure_failure", "numerical_failure"]
    assert len(result.outcomes) == 2  # a missing input file is not retried: no retry mends it
    # a payload the spec class rejects is an admission failure, not an infrastructure failure
    spec = ToySpec(steps=2)
    with RunStore(store) as db:
        db.register_run(Manifest.for_spec(spec))
    module, qualname, _ = spec_reference(spec)
    bad = spec.model_dump_json().replace('"steps":2', '"steps":0')
    outcome = execute_run(store, spec.identity(), module, qualname, bad)
    assert outcome.termination == "admission_failure" and not outcome.retryable
    assert "rejects the spec" in outcome.message


def test_a_full_disk_or_exhausted_memory_is_named_with_what_to_do(tmp_path):
    sweep = Sweep(ToySpec(), grid={"fail": ["disk-full", "no-memory", "torch-no-memory"]})
    result = run_sweep(sweep, store=tmp_path / "s.sqlite", max_workers=1, retries=0)
    messages = sorted(o.message for o in result.failed)
    assert messages[0].startswith("disk full while writing ") and "c.pt — free space and " \
        "rerun the same command (completed runs are kept)" in messages[0]
    # torch's allocator raises RuntimeError, not MemoryError: the same cause, the same advice
    assert messages[1].startswith("out of memory (1,048,576.0 GiB asked) — a smaller size, or "
                                  "fewer --max-workers, then rerun")  # fmt: skip
    assert messages[2].startswith("out of memory — a smaller size, or fewer --max-workers")
    assert all(advice("infrastructure_failure", m) == "" for m in messages)  # no "it resumes"


def test_one_local_worker_runs_in_this_process_like_a_pool_of_two(tmp_path):
    sweep = Sweep(ToySpec(), grid={"x": [1.0, 2.0]}, seeds=[0, 1], seed_field="seed")
    inline = run_sweep(sweep, store=tmp_path / "inline.sqlite", max_workers=1, threads=1)
    pooled = run_sweep(sweep, store=tmp_path / "pool.sqlite", max_workers=2, threads=1)
    assert len(inline.completed) == len(pooled.completed) == 4
    with RunStore(tmp_path / "inline.sqlite") as a, RunStore(tmp_path / "pool.sqlite") as b:
        for identity in inline.completed:
            assert [m.value for m in a.metrics(identity)] == [m.value for m in b.metrics(identity)]
            (attempt,) = a.attempts(identity)
            assert attempt.termination == "completed"


def test_two_stores_in_one_folder_keep_their_runs_files_apart(tmp_path):
    sweep = Sweep(ToySpec())
    for name in ("a.sqlite", "b.sqlite"):
        assert len(run_sweep(sweep, store=tmp_path / name, max_workers=1).completed) == 1
    identity = sweep.specs()[0].identity()
    folders = sorted(p.parent.parent.name for p in tmp_path.glob("*/*/attempt-1"))
    assert folders == ["a.sqlite.artifacts", "b.sqlite.artifacts"]
    assert (tmp_path / "a.sqlite.artifacts" / identity[:16]).is_dir()


# --- claims, abandoned attempts, verified reuse, progress from workers ---------------------


def _die_mid_run(store: str, spec_json: str) -> None:
    """A whole sweep in another process whose run kills that process after a checkpoint."""
    os.environ["TOY_DIE_AT"] = "5"
    run_sweep(Sweep(CheckpointToySpec.model_validate_json(spec_json)), store=store, max_workers=1)


def _kill_in_another_process(store: Path, spec: CheckpointToySpec) -> int:
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_die_mid_run, args=(str(store), spec.model_dump_json()))
    proc.start()
    proc.join(timeout=300)
    assert proc.exitcode == 3  # the toy's os._exit: its attempt was left open
    return proc.pid


def test_an_open_attempt_of_a_dead_pid_is_closed_and_the_run_resumes(tmp_path):
    spec = CheckpointToySpec(steps=8, every=2)
    dead, clean = tmp_path / "killed.sqlite", tmp_path / "clean.sqlite"
    pid = _kill_in_another_process(dead, spec)
    identity = spec.identity()
    with RunStore(dead, create=False) as db:
        assert [a.termination for a in db.attempts(identity)] == [None]
    result = run_sweep(Sweep(spec), store=dead, max_workers=1)
    assert result.completed == [identity] and result.resumed == {identity: 4}
    with RunStore(dead, create=False) as db, RunStore(clean) as fresh:
        attempts = [(a.ordinal, a.termination, a.message) for a in db.attempts(identity)]
        assert attempts == [
            (1, KILLED, killed(pid)),
            (2, "completed", ""),
        ]
        run_sweep(Sweep(spec), store=clean, max_workers=1)
        assert [(m.name, m.step, m.value) for m in db.metrics(identity)] == [
            (m.name, m.step, m.value) for m in fresh.metrics(identity)
        ]  # the resumed run reads as the uninterrupted one


def test_a_tampered_checkpoint_is_set_aside_and_the_run_starts_from_step_zero(tmp_path):
    spec = CheckpointToySpec(steps=8, every=2)
    store = tmp_path / "store.sqlite"
    _kill_in_another_process(store, spec)
    (latest,) = tmp_path.glob("store.sqlite.artifacts/*/checkpoints/step-*.json")
    text = latest.read_text()
    latest.write_text(text.replace('"data_position": 0', '"data_position": 1'))
    result = run_sweep(Sweep(spec), store=store, max_workers=1)
    identity = spec.identity()
    assert result.completed == [identity] and result.resumed == {}
    (why,) = result.restarted.values()
    assert str(latest) in why and "differs from" in why and f"run {identity[:12]}" in why
    assert latest.with_name(latest.name + ".rejected-attempt-2").is_file()  # kept, renamed


def test_a_completed_run_with_a_tampered_artifact_is_executed_again(tmp_path):
    spec = CheckpointToySpec(steps=3)
    store = tmp_path / "store.sqlite"
    assert run_sweep(Sweep(spec), store=store, max_workers=1).completed == [spec.identity()]
    (result_file,) = tmp_path.glob("store.sqlite.artifacts/*/attempt-1/result.json")
    result_file.write_text('{"sum": 1e9}')
    again = run_sweep(Sweep(spec), store=store, max_workers=1)
    identity = spec.identity()
    assert again.completed == [identity] and again.skipped == []
    assert f"{result_file}: sha256" in again.reexecuted[identity]
    with RunStore(store, create=False) as db:
        assert [a.termination for a in db.attempts(identity)] == ["completed", "completed"]
        assert db.verify_artifacts(identity) == []  # the new attempt's files
        assert db.verify_artifacts(identity, ordinal=1)[0].startswith(f"{result_file}: sha256")
    result_file.unlink()  # the old attempt's file no longer matters: reused
    assert run_sweep(Sweep(spec), store=store, max_workers=1).skipped == [identity]


def test_pool_workers_report_step_progress_to_the_driver(tmp_path):
    sweep = Sweep(CheckpointToySpec(steps=6, pause=0.05), seeds=[0, 1], seed_field="seed")
    seen = []
    result = run_sweep(
        sweep,
        store=tmp_path / "store.sqlite",
        max_workers=2,
        step_progress=lambda *report: seen.append(report),
    )
    assert len(result.completed) == 2
    labels = {label for label, _, _ in seen}
    assert "toy" in labels and len(labels) <= 2  # the second run in flight gets a suffix
    for label in labels:
        assert (label, 6, 6) in seen  # the last step always arrives
    assert all(total == 6 for _, _, total in seen)


def _hold(store: str, identity: str, seconds: float, started) -> None:
    """Another live process: holds the run for ``seconds``, then completes it."""
    with RunStore(store, create=False) as db:
        claim = db.claim(identity)
        started.set()
        time.sleep(seconds)
        db.end_attempt(claim.attempt_id, "completed", "by the holder")


def test_a_run_held_by_a_live_process_is_waited_for_and_reused(tmp_path):
    store = tmp_path / "store.sqlite"
    sweep = Sweep(CheckpointToySpec(steps=2), seeds=[0, 1], seed_field="seed")
    held, free = (s.identity() for s in sweep.specs())
    with RunStore(store) as db:
        db.add_study(sweep.study, sweep.spec)
        for spec in sweep.specs():
            db.register_run(Manifest.for_spec(spec), study=sweep.study)
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(store), held, 3.0, started))
    holder.start()
    try:
        assert started.wait(timeout=120)
        result = run_sweep(sweep, store=store, max_workers=1)
    finally:
        holder.join(timeout=60)
    assert result.completed == [free] and result.skipped == [held] and result.waited == [held]
    with RunStore(store, create=False) as db:
        assert [a.message for a in db.attempts(held)] == ["by the holder"]  # not trained twice


def test_ctrl_c_raises_sweep_interrupted_with_the_runs_complete(tmp_path, monkeypatch):
    store = tmp_path / "store.sqlite"
    sweep = Sweep(CheckpointToySpec(steps=2), seeds=[0, 1, 2], seed_field="seed")
    first, interrupted, never = (s.identity() for s in sweep.specs())
    run_sweep(Sweep(sweep.specs()[0]), store=store, max_workers=1)  # one run done before
    monkeypatch.setenv("TOY_INTERRUPT_SEED", "1")
    with pytest.raises(SweepInterrupted) as info:
        run_sweep(sweep, store=store, max_workers=1)
    assert isinstance(info.value, KeyboardInterrupt)
    assert (info.value.done, info.value.total) == (1, 3)  # the reused run counts as complete
    assert info.value.result.skipped == [first]
    with RunStore(store, create=False) as db:
        assert [(a.termination, a.message) for a in db.attempts(interrupted)] == [
            ("cancelled", "interrupted")
        ]
        assert db.attempts(never) == []  # queued runs are dropped, not started


def test_a_killed_command_records_its_run_alike_in_process_and_in_a_pool(tmp_path, monkeypatch):
    # in process: the command dies mid-run; the next command's claim ends its attempt
    in_process = CheckpointToySpec(steps=8, every=2)
    pid = _kill_in_another_process(tmp_path / "a.sqlite", in_process)
    run_sweep(Sweep(in_process), store=tmp_path / "a.sqlite", max_workers=1)
    # in a pool: a worker's run whose driver (the command, here the same dead pid) is gone
    pooled = CheckpointToySpec(steps=400, pause=0.02, seed=1)
    store = tmp_path / "b.sqlite"
    with RunStore(store) as db:
        identity = db.register_run(Manifest.for_spec(pooled)).identity
    monkeypatch.setattr(runner, "Heartbeat", functools.partial(Heartbeat, interval=0.05))
    monkeypatch.setattr(os, "_exit", lambda code: sys.exit(code))  # the worker's exit
    driver = Owner(this_process().host, pid, "")
    with pytest.raises(SystemExit):
        execute_run(store, identity, *spec_reference(pooled), driver=driver)
    with RunStore(tmp_path / "a.sqlite", create=False) as a, RunStore(store, create=False) as b:
        first = a.attempts(in_process.identity())[0]
        (worker,) = b.attempts(identity)
    assert (first.termination, first.message) == (worker.termination, worker.message)
    assert (worker.termination, worker.message) == (KILLED, killed(pid))
    assert KILLED == "infrastructure_failure"  # the release lineage retries it (§0x0CI)


def _driver(store: str) -> None:
    """A sweep on a pool of two whose runs take long (killed from outside)."""
    sweep = Sweep(CheckpointToySpec(steps=600, pause=0.1), seeds=[0, 1], seed_field="seed")
    run_sweep(sweep, store=store, max_workers=2)


@pytest.mark.slow
def test_pool_workers_stop_their_runs_when_the_driver_is_killed(tmp_path):
    store = tmp_path / "store.sqlite"
    ctx = multiprocessing.get_context("spawn")
    driver = ctx.Process(target=_driver, args=(str(store),))
    driver.start()
    deadline = time.monotonic() + 300
    opened = []
    while len(opened) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        if store.exists():
            with RunStore(store, create=False) as db:
                opened = [a for r in db.runs() for a in db.attempts(r.identity)]
    assert len(opened) == 2, "the workers did not start their runs"
    workers = {a.owner_pid for a in opened}
    os.kill(driver.pid, signal.SIGKILL)  # the driver only, not its workers
    driver.join()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with RunStore(store, create=False) as db:
            ended = [a for r in db.runs() for a in db.attempts(r.identity) if a.termination]
        if len(ended) == 2:
            break
        time.sleep(0.5)
    assert [(a.termination, a.message) for a in ended] == [(KILLED, killed(driver.pid))] * 2
    for pid in workers:  # and the orphaned workers exit
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.2)
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] == "Z"


def test_ray_missing_is_an_error_before_any_run_is_registered(tmp_path, monkeypatch):
    import gaugelab.study.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "ray_available", lambda: False)
    store = tmp_path / "store.sqlite"
    with pytest.raises(ValueError, match=r"executor='ray' needs Ray; install gaugelab\[ray\]"):
        run_sweep(Sweep(ToySpec(), grid={"x": [1.0, 2.0]}), store=store, executor="ray")
    assert not store.exists() or not RunStore(store).runs()


class _Limited(ToySpec):
    """ToySpec with a field left out of its identity (as a time limit is)."""

    limit: float = Field(1.0, description="how long a run may take (not its identity)")

    def spec_dict(self):
        data = super().spec_dict()
        data.pop("limit")
        return data


def test_a_field_left_out_of_the_identity_is_carried_into_every_run_spec():
    specs = Sweep(_Limited(limit=7.0), grid={"x": [1.0, 2.0]}).specs()
    assert [s.limit for s in specs] == [7.0, 7.0]  # not reset to its default
    assert specs[0].identity() == _Limited(x=1.0, limit=99.0).identity()
    assert Sweep(_Limited(), grid={"limit": [3.0]}).specs()[0].limit == 3.0
