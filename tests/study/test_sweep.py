"""Tests for gaugelab.study.sweep and runner: expansion, skip, keep-going, retries, Ray."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import the toy spec by name

from toy import ToySpec

from gaugelab.study.spec import Manifest
from gaugelab.study.store import RunStore
from gaugelab.study.sweep import Sweep, run_sweep


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


def test_ray_executor_stores_the_same_results_as_local(tmp_path):
    try:
        import ray
    except ImportError:
        pytest.fail("Ray is not installed; `make test` installs gaugelab[ray]")
    sweep = Sweep(ToySpec(), grid={"x": [0.5, 1.5]}, seeds=[3, 4], seed_field="seed")
    local = run_sweep(sweep, store=tmp_path / "local.sqlite", max_workers=2)
    try:
        remote = run_sweep(sweep, executor="ray", store=tmp_path / "ray.sqlite", max_workers=2)
    finally:
        ray.shutdown()
    assert sorted(local.completed) == sorted(remote.completed) and len(local.completed) == 4
    with RunStore(tmp_path / "local.sqlite") as a, RunStore(tmp_path / "ray.sqlite") as b:
        for identity in local.completed:
            assert metric_values(a, identity) == metric_values(b, identity)


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
