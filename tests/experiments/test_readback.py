"""What the zoo and the twins read back is verified, study names stay inside the output folder,
a missing cvxpy skips the convex row, and ``gaugelab report`` writes the experiment's own
report."""

import json
import re
import sys

import pytest

from gaugelab.experiments import registry
from gaugelab.experiments.sensing import zoo
from gaugelab.experiments.sensing.dial import DialSpec, run_dial
from gaugelab.experiments.sensing.problem import SensingBatch
from gaugelab.experiments.sensing.train import train_rule
from gaugelab.experiments.sensing.zoo import CONVEX, LearningRateGrids, ZooSpec, run_zoo
from gaugelab.experiments.twins import run as twins
from gaugelab.study import RunStore, StoreError
from gaugelab.study.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from gaugelab.study.report.folders import new_report_dir
from gaugelab.study.store.results import UNVERIFIED

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TINY = ZooSpec(
    n=6,
    rank=2,
    seeds=(42,),
    steps=200,
    check_every=100,
    rules=("gd", "adam"),
    lr_grids=LearningRateGrids(gd=(2e-2,), adam=(1e-2,)),
    convex=False,
)


def _result_file(store, rule: str):
    with RunStore(store, create=False) as db:
        for run in db.runs():
            for art in db.artifacts(run.identity):
                if art.kind == "result" and art.path.name == f"result-{rule}.json":
                    return run.identity, art.path
    raise AssertionError(f"no result-{rule}.json")


@pytest.fixture
def tiny(tmp_path):
    store = tmp_path / "store.sqlite"
    outcome = run_zoo(TINY, store=store, write_report=False)
    assert not outcome.result.failures
    return store, outcome


def _edit(path):  # a plausible hand edit: adam's recovery halved
    data = json.loads(path.read_text(encoding="utf-8"))
    data["recovery"] = [[x / 2 for x in row] for row in data["recovery"]]
    path.write_text(json.dumps(data), encoding="utf-8")


def _flip(path):  # one flipped byte that makes the file invalid UTF-8
    data = bytearray(path.read_bytes())
    data[10] ^= 0x80
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "tamper", [_edit, _flip, lambda p: p.unlink()], ids=["edited", "flipped", "deleted"]
)
def test_a_tampered_result_is_never_reported(tiny, tamper):
    store, before = tiny
    identity, path = _result_file(store, "adam")
    tamper(path)
    with RunStore(store, create=False) as db:
        result = zoo.collect(db, before.study)
    assert [r.rule for r in result.rows] == ["gd"]  # adam's row is not read from the file
    (failure,) = result.failures
    assert failure.identity == identity and failure.termination == UNVERIFIED
    assert str(path) in failure.message and identity[:12] in failure.message
    assert "rerun the same command" in failure.message
    assert result.split is None  # one class left: no verdict from half a zoo
    table = zoo.tables(result)[0]
    assert [row[0] for row in table.rows] == ["gd"]


def test_a_tampered_result_is_reexecuted_by_the_same_command(tiny):
    store, before = tiny
    identity, path = _result_file(store, "adam")
    _edit(path)
    again = run_zoo(TINY, store=store, write_report=False)
    assert not again.result.failures
    rows = {r.rule: r.recovery for r in again.result.rows}
    assert rows == {r.rule: r.recovery for r in before.result.rows}  # recomputed, not read
    with RunStore(store, create=False) as db:
        done = [a for a in db.attempts(identity) if a.termination == "completed"]
    assert len(done) == 2  # a new attempt; the first one is kept
    (line,) = again.resumed_lines()
    assert line.startswith(f"run {identity[:12]} executed again: {path}")


TINY_TWIN = twins.TwinSpec(steps=1, checkpoints=(0, 1))


@pytest.fixture
def tiny_twins(tmp_path):
    store = tmp_path / "store.sqlite"
    outcome = twins.run_twins_study(["adam"], base=TINY_TWIN, store=store, write_report=False)
    assert [r.termination for r in outcome.result.rows] == ["completed"]
    with RunStore(store, create=False) as db:
        (run,) = db.runs(outcome.study)
        (art,) = [a for a in db.artifacts(run.identity) if a.kind == "summary"]
    return store, outcome, run.identity, art.path


def _claim_equivariant(path):  # the hand edit a reader would hope for
    data = json.loads(path.read_text(encoding="utf-8"))
    data["verdict"] = "equivariant"
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize(
    "tamper",
    [_claim_equivariant, _flip, lambda p: p.unlink()],
    ids=["edited", "flipped", "deleted"],
)
def test_a_tampered_twins_summary_makes_the_run_unverified(tiny_twins, tamper):
    store, before, identity, path = tiny_twins
    assert before.result.rows[0].verdict == "basis-sensitive"
    tamper(path)
    with RunStore(store, create=False) as db:
        result = twins.collect(db, before.study)
    (row,) = result.rows
    assert row.termination == UNVERIFIED and row.verdict == UNVERIFIED  # never the edited one
    (failure,) = result.failures
    assert failure.identity == identity
    assert str(path) in failure.message and identity[:12] in failure.message
    assert "rerun the same command" in failure.message and "\n" not in failure.message
    assert row.distances == before.result.rows[0].distances  # the store's own metrics stay
    assert not result.paired


@pytest.mark.parametrize("study", ["../../escape", "/abs/escape", "..", "a/../../b"])
def test_a_study_name_never_writes_outside_the_reports_folder(tmp_path, study):
    root = tmp_path / "runs"
    store = root / "store.sqlite"
    spec = TINY.model_copy(update={"rules": ("gd",)})
    outcome = run_zoo(spec, store=store, study=study)
    assert outcome.study == study  # the store keeps the name as given
    report = outcome.report.resolve()
    assert report.is_relative_to((root / "reports").resolve())
    assert report.parent.parent.parent == (root / "reports").resolve()  # reports/<slug>/<time>
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_after_the_runs_the_phase_callback_hears_collect_then_report(tmp_path):
    spec = TINY.model_copy(update={"rules": ("gd",)})
    seen = []
    outcome = run_zoo(spec, store=tmp_path / "store.sqlite", phase=seen.append)
    assert seen == ["collecting the results", "writing the report"]
    assert outcome.report.exists()
    seen.clear()
    run_zoo(spec, store=tmp_path / "store.sqlite", write_report=False, phase=seen.append)
    assert seen == ["collecting the results"]  # no report: nothing said about one


def test_without_cvxpy_the_convex_row_is_skipped_not_failed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cvxpy", None)  # `import cvxpy` raises ImportError
    spec = TINY.model_copy(update={"rules": ("gd",), "convex": True})
    assert [s.labels() for s in zoo.plan(spec).specs()] == [["gd"]]  # no convex run planned
    outcome = run_zoo(spec, store=tmp_path / "store.sqlite")
    result = outcome.result
    assert not result.failures and not outcome.sweep.failed
    assert result.convex is None and result.convex_skipped.startswith(
        "skipped: install gaugelab[convex]"
    )
    (row,) = [r for r in zoo.tables(result)[0].rows if r[0] == CONVEX]
    assert row[4] == "skipped"
    html = outcome.report.read_text(encoding="utf-8")
    assert "skipped: install gaugelab[convex]" in html


def _without_time(html: str) -> str:
    return re.sub(r"created \S+ ·", "created … ·", html)


TINY_DIAL = DialSpec(n=6, rank=2, seeds=(42,), steps=200, check_every=100, ps=(1.0, 0.0),
                     lrs=(1e-2,), gd_lrs=(2e-2,))  # fmt: skip


@pytest.mark.parametrize("spec, run", [(TINY, run_zoo), (TINY_DIAL, run_dial)], ids=["zoo", "dial"])
def test_report_study_writes_the_experiments_own_report_in_a_new_folder(tmp_path, spec, run):
    store = tmp_path / "store.sqlite"
    outcome = run(spec, store=store)
    written = outcome.report.read_text(encoding="utf-8")
    with RunStore(store, create=False) as db:
        folders = [new_report_dir(tmp_path / "reports", study=outcome.study) for _ in range(2)]
        paths = [registry.report_study(db, outcome.study, folder).path for folder in folders]
    assert paths[0].parent != paths[1].parent  # a new timestamped folder per call
    for path in paths:
        assert _without_time(path.read_text(encoding="utf-8")) == _without_time(written)


def test_a_non_finite_initialisation_is_recorded_as_a_numerical_failure(tmp_path):
    spec = TINY.model_copy(update={"init_scale": 1e200, "dtype": "float64"})
    result = run_zoo(spec, store=tmp_path / "store.sqlite", write_report=False).result
    assert {r.termination for r in result.failures} == {"numerical_failure"}
    assert all("init_scale=1e+200" in r.message for r in result.failures)
    assert not result.rows


class _Run:
    """The part of a RunContext that train_rule uses, over one checkpoint folder."""

    identity = "ab" * 32

    def __init__(self, folder):
        self.folder = folder

    def resume(self, scope):
        path = latest_checkpoint(self.folder / scope)
        return None if path is None else load_checkpoint(path)

    def checkpoint(self, step, *, scope, **state):
        save_checkpoint(self.folder / scope, step=step, **state)

    def progress(self, *args):
        pass


def _train(spec, run):
    return train_rule(spec, SensingBatch.build(spec), "adam", [1e-2, 3e-2], decay=True, run=run,
                      checkpoint_every=100)  # fmt: skip


def _tamper_json(path, change):
    record = json.loads(path.read_text(encoding="utf-8"))
    change(record)
    path.write_text(json.dumps(record), encoding="utf-8")


def _set_step(record):
    record["step"] = 100


def _bad_status(record):
    record["extra"]["status"][0][0] = "bogus"


def _wrong_width(record):
    record["model"]["V"] = record["model"]["stopped"]


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda p: _flip(p.with_suffix(".safetensors")),
        _flip,
        lambda p: _tamper_json(p, _set_step),
        lambda p: _tamper_json(p, _bad_status),
        lambda p: _tamper_json(p, _wrong_width),
    ],
    ids=["tensors-flipped", "json-flipped", "step-edited", "status-edited", "tensor-swapped"],
)
def test_resuming_from_a_corrupt_checkpoint_names_the_file_and_the_run(tmp_path, corrupt):
    spec = TINY.model_copy(update={"steps": 300, "interpolation_loss": 1e-30})
    clean = _train(spec, None)
    run = _Run(tmp_path)
    _train(spec, run)  # leaves its checkpoints at steps 100 and 200 behind
    resumed = _train(spec, run)  # as a rerun after a kill: from step 200
    assert resumed.recovery == clean.recovery and resumed.curve_loss == clean.curve_loss
    path = latest_checkpoint(tmp_path / "adam")
    corrupt(path)
    with pytest.raises(StoreError, match=re.escape(run.identity[:12])) as info:
        _train(spec, run)
    assert path.stem in str(info.value) and "adam" in str(info.value)


def test_a_rejected_checkpoint_is_one_line_naming_the_run_and_why():
    from gaugelab.study.experiment import StudyOutcome
    from gaugelab.study.runner import Outcome
    from gaugelab.study.sweep import SweepResult

    why = "checkpoints/step-00000050.json: sha256 differs from the store's record"
    sweep = SweepResult(outcomes=[Outcome("ab" * 32, 2, "completed", checkpoint_rejected=why)])
    outcome = StudyOutcome(study="s", result=None, sweep=sweep, report=None)
    assert outcome.resumed_lines() == [f"run {'ab' * 6} started again from step 0: {why}"]
