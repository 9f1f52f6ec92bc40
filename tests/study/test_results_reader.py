"""The one read path of results (gaugelab.study.store.results): a run's files from its latest
completed attempt, verified against the store's sha256, or one ArtifactError naming the run and
the file; and specs that name their trainer instead of importing it."""

import pytest
from tests.study.toy_results import FilesSpec, NoTrainerSpec

from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import UNVERIFIED, ArtifactError
from gaugelab.study.sweep import Sweep, run_sweep


@pytest.fixture
def stored(tmp_path):
    """A store with one completed FilesSpec run and one that failed; (path, ok, failed)."""
    store = tmp_path / "store.sqlite"
    run_sweep(Sweep(FilesSpec(value=7), name="files"), store=store, max_workers=1)
    run_sweep(Sweep(FilesSpec(value=8, fail=True), name="failing"), store=store, max_workers=1)
    return store, FilesSpec(value=7).identity(), FilesSpec(value=8, fail=True).identity()


def test_result_reads_the_latest_completed_attempts_file_of_a_kind(stored):
    store, ok, _ = stored
    with RunStore(store, create=False) as db:
        last = db.result(ok)  # two result files: the last recorded one
        assert last.path.name == "b.json" and last.json() == {"name": "b.json", "value": 7}
        assert db.result(ok, name="a.json").json() == {"name": "a.json", "value": 7}
        assert db.result(ok, "weights").data == bytes([0, 1, 2, 255])
        assert [a.path.name for a in db.completed_files(ok)] == ["a.json", "b.json", "w.bin"]
        assert [a.path.name for a in db.completed_files(ok, "weights")] == ["w.bin"]


def test_a_changed_file_raises_naming_the_file_and_the_run(stored):
    store, ok, _ = stored
    with RunStore(store, create=False) as db:
        path = db.result(ok, name="a.json").path
        path.write_text('{"name": "a.json", "value": 70}', encoding="utf-8")
        with pytest.raises(ArtifactError, match=rf"a\.json.*run {ok[:12]}.*changed after"):
            db.result(ok, name="a.json")
        state = next(s for s in db.run_states("files") if s.identity == ok)
        assert db.completed_result(state)[0].termination != UNVERIFIED  # b.json is intact
        path.unlink()
        with pytest.raises(ArtifactError, match=r"a\.json: result file of run"):
            db.result(ok, name="a.json")


def test_a_tampered_result_makes_the_run_unverified_not_a_result(stored):
    store, ok, _ = stored
    with RunStore(store, create=False) as db:
        db.result(ok).path.write_text("{}", encoding="utf-8")
        (state,) = db.run_states("files")
        read, data = db.completed_result(state)
        assert data is None and read.termination == UNVERIFIED and "b.json" in read.message


def test_no_completed_attempt_and_no_such_file_are_refused_by_name(stored):
    store, ok, failed = stored
    with RunStore(store, create=False) as db:
        with pytest.raises(ArtifactError, match=rf"run {failed[:12]} has no completed attempt"):
            db.result(failed)
        with pytest.raises(ArtifactError, match=r"recorded no result file 'c\.json'"):
            db.result(ok, name="c.json")
        with pytest.raises(ArtifactError, match=r"recorded no deltas file"):
            db.result(ok, "deltas")
        (state,) = db.run_states("failing")
        assert db.completed_result(state) == (state, None)


def test_study_lookups_name_what_is_known(stored):
    store, *_ = stored
    with RunStore(store, create=False) as db:
        assert db.study_row("files").kind == "toy-files"
        assert db.study_of_kind("files", FilesSpec).name == "files"
        with pytest.raises(ValueError, match=r"unknown study 'nope'.*known: 'files', 'failing'"):
            db.study_row("nope")
        with pytest.raises(ValueError, match=r"a 'toy-files' study, not a 'toy-untrained' study"):
            db.study_of_kind("files", NoTrainerSpec)


def test_a_spec_names_its_trainer_and_one_without_is_refused(tmp_path):
    assert FilesSpec.executable() and not NoTrainerSpec.executable()
    with pytest.raises(ValueError, match="NoTrainerSpec declares no trainer and no execute"):
        run_sweep(Sweep(NoTrainerSpec(), name="x"), store=tmp_path / "s.sqlite")
    with pytest.raises(TypeError, match="NoTrainerSpec declares no trainer"):
        NoTrainerSpec().execute(None)


def test_a_running_or_unattempted_run_is_pending_not_failed(tmp_path):
    from gaugelab.study.spec import Manifest
    from gaugelab.study.store.results import RunState

    states = {t: RunState("x" * 64, {}, t, "") for t in
              ("completed", "open", "not run", "numerical_failure", "cancelled", UNVERIFIED)}
    assert [t for t, s in states.items() if s.failed] == ["numerical_failure", "cancelled",
                                                          UNVERIFIED]  # fmt: skip
    with RunStore(tmp_path / "s.sqlite") as db:  # a report written while the study runs
        db.add_study("live")
        spec = FilesSpec()
        db.register_run(Manifest.for_spec(spec), study="live")
        db.start_attempt(spec.identity())
        (state,) = db.run_states("live")
    assert state.termination == "open" and not state.failed and not state.completed
