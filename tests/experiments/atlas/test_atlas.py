"""gaugelab.experiments.atlas: which classes a source exports, one run per check in the store
(reused while the code is the same), every way a check ends kept as a row: a verdict, error,
diverged, timeout."""

import json
import sys
import time
from pathlib import Path

import pytest
import torch

from gaugelab.experiments.atlas import (
    EXPERIMENT,
    AtlasSpec,
    Candidate,
    atlas_spec,
    discover_optimizers,
    markdown,
    matrix_table,
    module_version,
    plan,
    run_atlas,
    tables,
    time_limit,
)
from gaugelab.experiments.atlas.checks import TimeLimitReached
from gaugelab.study.store.db import RunStore

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

USER = (Path(__file__).parents[2] / "equivariance" / "user_optimizers.py").read_text()
MODULE = "atlas_user_opts"  # a name no other test imports


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """user_optimizers.py as atlas_user_opts.py in the current folder (imported from there)."""
    (tmp_path / f"{MODULE}.py").write_text(USER)
    monkeypatch.chdir(tmp_path)
    yield tmp_path / f"{MODULE}.py"
    sys.modules.pop(MODULE, None)


def test_torch_optim_exports_its_optimizers_and_not_the_base_class():
    found = {c.name: c for c in discover_optimizers("torch.optim")}
    assert {"Adam", "SGD", "LBFGS", "Muon", "SparseAdam"} <= set(found)
    assert "Optimizer" not in found
    assert found["Adam"].target == "torch.optim:Adam"
    assert found["Adam"].version.startswith("torch ") and torch.__version__ in found["Adam"].version
    assert list(found) == sorted(found)


def test_a_module_of_ones_own_is_found_in_the_current_folder_and_versioned_by_its_file(user_module):
    found = {c.name: c for c in discover_optimizers(MODULE)}
    assert {"ClosureFreeSGD", "NoOp", "RaisesInStep", "SlowStep"} <= set(found)
    assert "NotAnOptimizer" not in found
    assert all(c.version == found["NoOp"].version for c in found.values())
    assert found["NoOp"].version.startswith("sha256:")
    user_module.write_text(USER + "\n# changed\n")
    assert module_version(sys.modules[MODULE]) != found["NoOp"].version


def test_a_re_exported_class_belongs_to_its_own_package(tmp_path, monkeypatch):
    (tmp_path / "reexports.py").write_text("from torch.optim import Adam\n")
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(ValueError, match=r"exports no torch\.optim\.Optimizer subclass"):
            atlas_spec(["reexports"])
    finally:
        sys.modules.pop("reexports", None)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("no_such_optimizers", "source='no_such_optimizers' is not installed; allowed: an "
                               "importable module (the extra gaugelab[atlas] installs"),
        ("not a module", "source='not a module'; allowed: a module name"),
    ],
)  # fmt: skip
def test_a_source_that_is_not_there_is_refused_in_one_line_naming_the_extra(source, fragment):
    with pytest.raises(ValueError) as caught:
        discover_optimizers(source)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_only_names_classes_and_refuses_one_no_source_exports():
    spec = atlas_spec(["torch.optim"], only=["SGD", "torch.optim:Adam"])
    assert [c.target for c in spec.optimizers] == ["torch.optim:Adam", "torch.optim:SGD"]
    with pytest.raises(ValueError, match=r"only=Adamm: not exported by torch.optim; allowed: .*"):
        atlas_spec(["torch.optim"], only=["Adamm"])


def test_the_time_limit_is_not_part_of_a_checks_identity():
    one = Candidate(target="torch.optim:SGD", version="torch 2.13.0")
    fast, slow = AtlasSpec(optimizers=(one,), timeout=1.0), AtlasSpec(optimizers=(one,))
    assert fast.identity() == slow.identity() and plan(fast).study == plan(slow).study
    assert [s.timeout for s in plan(fast).specs()] == [1.0] * 4  # 2 groups × 2 problems
    other = Candidate(target="torch.optim:SGD", version="torch 2.14.0")
    assert AtlasSpec(optimizers=(other,)).identity() != slow.identity()


def test_time_limit_stops_a_block_in_the_main_thread_and_restores_the_alarm():
    start = time.monotonic()
    with pytest.raises(TimeLimitReached), time_limit(0.2):
        time.sleep(30)
    assert time.monotonic() - start < 5
    with time_limit(5):  # a block within its limit: nothing raised, the timer cleared after
        pass
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.fixture
def atlas(user_module, tmp_path):
    spec = atlas_spec(
        [MODULE],
        only=["ClosureFreeSGD", "Diverges", "NeedsMuonGroups", "RaisesInConstructor",
              "RefusesParameters"],
        groups=["orthogonal"], problems=["sensing"], steps=2, draws=1,
    )  # fmt: skip
    store = tmp_path / "store.sqlite"
    return spec, store, run_atlas(spec, store=store, write_report=False)


def test_every_way_a_check_ends_is_a_row(atlas):
    _, _, outcome = atlas
    rows = {r.optimizer.partition(":")[2]: r for r in outcome.result.rows}
    assert {n: r.verdict for n, r in rows.items()} == {
        "ClosureFreeSGD": "equivariant", "Diverges": "diverged", "NeedsMuonGroups": "error",
        "RaisesInConstructor": "error", "RefusesParameters": "error",
    }  # fmt: skip
    assert outcome.result.failures == []
    assert rows["ClosureFreeSGD"].gauge < 1e-12 < rows["ClosureFreeSGD"].noise
    assert rows["ClosureFreeSGD"].seconds > 0
    assert rows["Diverges"].why.startswith("run: step 1 made a parameter non-finite")
    assert rows["RaisesInConstructor"].why == "construct: KeyError: 'betas'"
    # a Muon-style rule without an entry in the adapter table: what it needed, in one line
    assert (rows["NeedsMuonGroups"].phase, rows["NeedsMuonGroups"].hint) == (
        "construct", "it needs parameter groups that declare use_muon, and "
        "gaugelab.equivariance.param_groups.ADAPTERS has no entry for it",
    )  # fmt: skip
    assert rows["RefusesParameters"].why == (
        f"construct: {MODULE}:RefusesParameters on the 'sensing' problem: the optimizer refuses "
        "the problem's 2 parameters ((6, 3), (6, 3)): only 1-D parameters are supported"
    )


def test_a_rerun_checks_only_what_is_missing_or_whose_code_changed(atlas, user_module):
    spec, store, _ = atlas
    again = run_atlas(spec, store=store, write_report=False)
    assert again.sweep.completed == [] and len(again.sweep.skipped) == 5
    user_module.write_text(USER + "\n# a new version of the module\n")
    changed = atlas_spec([MODULE], only=["ClosureFreeSGD", "NoOp"], groups=["orthogonal"],
                         problems=["sensing"], steps=2, draws=1)  # fmt: skip
    assert changed.optimizers[0].version != spec.optimizers[0].version
    rerun = run_atlas(changed, store=store, write_report=False)
    assert len(rerun.sweep.completed) == 2 and rerun.sweep.skipped == []


def test_a_check_over_its_time_limit_is_a_timeout_row_and_is_tried_again(user_module, tmp_path):
    spec = atlas_spec([MODULE], only=["SlowStep"], groups=["orthogonal"], problems=["sensing"],
                      steps=1, draws=1, timeout=0.5)  # fmt: skip
    store = tmp_path / "store.sqlite"
    start = time.monotonic()
    (row,) = run_atlas(spec, store=store, write_report=False).result.rows
    assert time.monotonic() - start < 30  # the step sleeps an hour
    assert (row.verdict, row.why) == (
        "timeout", "time limit: the check ran past its time limit of 0.5 s (--timeout)"
    )
    again = run_atlas(spec, store=store, write_report=False)  # a timeout is no finding
    assert [r.verdict for r in again.result.rows] == ["timeout"] and again.sweep.skipped == []
    with RunStore(store, create=False) as db:  # each an attempt stopped by its declared rule
        terminations = [a.termination for a in db.attempts(row.identity)]
    assert terminations == ["validation_stopped"] * 2


def test_the_result_round_trips_through_json_and_prints_as_markdown(atlas):
    result = atlas[2].result
    text = EXPERIMENT.to_json(result)
    assert json.loads(text)["kind"] == "atlas"
    assert EXPERIMENT.tables(EXPERIMENT.from_json(text)) == EXPERIMENT.tables(result)
    md = markdown(result)
    header, rule = md.splitlines()[:2]
    assert header == "| optimizer | orthogonal / sensing |" and rule == "|---|---|"
    assert f"| {MODULE}:ClosureFreeSGD | equivariant · " in md
    assert f"- `{MODULE}:Diverges` orthogonal / sensing: **diverged** — run: step 1" in md


@pytest.mark.slow  # two spawned workers start torch: about 13 s on 2 cores
def test_worker_processes_import_the_users_module_and_keep_each_checks_time_limit(
    user_module, tmp_path
):
    # two spawned workers: each imports the module from the current folder, pays torch's
    # one-time start outside the limit (else NoOp, the first check of its worker, would time out)
    spec = atlas_spec([MODULE], only=["NoOp", "SlowStep"], groups=["orthogonal"],
                      problems=["sensing"], steps=2, draws=1, timeout=1.5)  # fmt: skip
    outcome = run_atlas(spec, store=tmp_path / "store.sqlite", max_workers=2, write_report=False)
    verdicts = {r.optimizer.partition(":")[2]: r.verdict for r in outcome.result.rows}
    assert verdicts == {"NoOp": "inconclusive", "SlowStep": "timeout"}
    assert outcome.result.failures == []


@pytest.mark.slow  # Ray's start: about 15 s on 2 cores
def test_the_atlas_runs_on_ray_as_the_sweeps_do(tmp_path):
    pytest.importorskip("ray")
    spec = atlas_spec(["torch.optim"], only=["Adam", "SGD"], groups=["orthogonal"],
                      problems=["sensing"], steps=2, draws=1)  # fmt: skip
    store = tmp_path / "store.sqlite"
    outcome = run_atlas(spec, store=store, executor="ray", max_workers=1, write_report=False)
    verdicts = {r.optimizer: r.verdict for r in outcome.result.rows}
    assert verdicts == {"torch.optim:Adam": "breaks", "torch.optim:SGD": "equivariant"}
    local = run_atlas(spec, store=tmp_path / "local.sqlite", write_report=False)
    assert {r.optimizer: (r.gauge, r.noise) for r in outcome.result.rows} == {
        r.optimizer: (r.gauge, r.noise) for r in local.result.rows
    }  # the same numbers from Ray's workers as from this process
    assert outcome.result.failures == []


@pytest.mark.parametrize("source", ["pytorch_optimizer", "heavyball"])
def test_a_published_source_that_is_not_installed_names_the_extra(source, monkeypatch):
    from gaugelab.experiments.atlas import sources

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(sources, "import_from_cwd", missing)  # as where it is not installed
    with pytest.raises(ValueError) as caught:
        discover_optimizers(source)
    assert str(caught.value) == (
        f"discover_optimizers: source={source!r} is not installed; allowed: pip install "
        "'gaugelab[atlas]' installs it"
    )


def test_with_every_check_a_verdict_no_empty_table_of_reasons_is_printed(tmp_path):
    spec = atlas_spec(["torch.optim"], only=["SGD"], groups=["orthogonal"],
                      problems=["sensing"], steps=2, draws=1)  # fmt: skip
    result = run_atlas(spec, store=tmp_path / "store.sqlite", write_report=False).result
    assert [r.verdict for r in result.rows] == ["equivariant"]
    assert [t.title for t in tables(result)] == [matrix_table(result).title]
    assert "without a verdict" not in matrix_table(result).caption
    assert "without a verdict" not in markdown(result)
