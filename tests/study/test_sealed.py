"""Tests for gaugelab.study.release.sealed: the held-out test opens once, after a freeze, and every
access — refused ones included — is logged in the run store (seed 003 §0x0BT–0x0BU)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gaugelab.study.release.sealed import (
    ACCESS_KIND,
    FrozenRelease,
    SealedTestError,
    SealedTestSpec,
    SealedTestStore,
)
from gaugelab.study.store.db import RunStore

DESIGN = "d" * 64
MANIFEST = "a" * 64
TEST_R2 = {"target": 73.0, "retention": 85.0, "stress": 88.0}  # §0x0BT, selected LoRA r2


class Loader:
    """Counts its calls; returns the held-out data."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict[str, float]:
        self.calls += 1
        return dict(TEST_R2)


def _seal(path, loader=None, **changes) -> SealedTestStore:
    kwargs = dict(
        study="learn-forget",
        design_digest=DESIGN,
        test_splits=("target-test@v1", "retention-test@v1"),
        loader=loader or Loader(),
    )
    kwargs.update(changes)
    return SealedTestStore(path, **kwargs)


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "runs" / "store.sqlite"


def test_opening_before_freezing_is_refused_logged_and_never_loads(store_path):
    loader = Loader()
    with _seal(store_path, loader) as seal:
        with pytest.raises(SealedTestError, match="opening before freezing"):
            seal.open_once()
        assert loader.calls == 0
        assert not seal.was_opened()
        [event] = seal.access_log()
        assert (event["event"], event["accepted"], event["termination"]) == (
            "open",
            False,
            "admission_failure",
        )


def test_open_once_after_freeze_then_opening_twice_is_refused_and_logged(store_path):
    loader = Loader()
    with _seal(store_path, loader) as seal:
        frozen = seal.freeze("lora_r2", "lora_r2@step200", MANIFEST)
        assert not seal.was_opened()  # §0x0BU: assert not test_store.was_opened() after freeze
        assert seal.open_once() == TEST_R2
        assert seal.was_opened()
        with pytest.raises(SealedTestError, match="opening twice"):
            seal.open_once()
        assert loader.calls == 1
        log = seal.access_log()
        assert [(e["event"], e["accepted"]) for e in log] == [
            ("freeze", True),
            ("open", True),
            ("open", False),
        ]
        assert [e["ordinal"] for e in log] == [1, 2, 3]
        assert {e["frozen_digest"] for e in log} == {frozen.digest()}
        assert [e["termination"] for e in log] == ["completed", "completed", "admission_failure"]
        assert all(e["pid"] > 0 and e["at"] and e["host"] for e in log)


def test_the_seal_persists_for_a_new_object_and_a_new_process(store_path):
    with _seal(store_path) as seal:
        seal.freeze("lora_r2", "ck", MANIFEST)
        seal.open_once()
    loader = Loader()
    with _seal(store_path, loader) as again:
        assert again.was_opened()
        with pytest.raises(SealedTestError, match="opening twice"):
            again.open_once()
        assert loader.calls == 0
    script = (
        "import sys; from gaugelab.study.release.sealed import SealedTestStore as S\n"
        f"s = S(sys.argv[1], study='learn-forget', design_digest={DESIGN!r}, "
        "test_splits=('retention-test@v1', 'target-test@v1'), loader=lambda: 1/0)\n"
        "print(s.was_opened())\n"
        "try:\n    s.open_once()\nexcept Exception as e:\n    print(type(e).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(store_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "SealedTestError"]


def test_reselection_after_a_test_failure_is_refused(store_path):
    loader = Loader()
    with _seal(store_path, loader) as seal:
        frozen = seal.freeze("lora_r2", "ck", MANIFEST)
        results = seal.open_once()
        seal.report(frozen, {**results, "target": 60.0})  # fails a predeclared release gate
        with pytest.raises(SealedTestError, match="a test result never triggers reselection"):
            seal.freeze("lora_r1", "ck1", "b" * 64)  # "pick the runner-up using test"
        assert seal.status().frozen == frozen
        assert seal.freeze("lora_r2", "ck", MANIFEST) == frozen  # the same freeze: idempotent
        with pytest.raises(SealedTestError, match="already reported"):
            seal.report(frozen, results)
        assert loader.calls == 1
        assert [(e["event"], e["accepted"]) for e in seal.access_log()] == [
            ("freeze", True),
            ("open", True),
            ("report", True),
            ("freeze", False),
            ("report", False),
        ]


def test_a_different_freeze_before_opening_is_refused_too(store_path):
    with _seal(store_path) as seal:
        seal.freeze("lora_r2", "ck", MANIFEST)
        with pytest.raises(SealedTestError, match="reselection is refused"):
            seal.freeze("lora_r2", "another-checkpoint", MANIFEST)
        assert len(seal.access_log()) == 2
        seal.freeze("lora_r2", "ck", MANIFEST)  # idempotent, not logged again
        assert len(seal.access_log()) == 2


def test_no_release_keeps_the_test_sealed_and_refuses_later_freeze_and_open(store_path):
    loader = Loader()
    with _seal(store_path, loader) as seal:
        seal.record_no_release("no release: the feasible set is empty")
        with pytest.raises(SealedTestError, match="no release was recorded"):
            seal.freeze("lora_r2", "ck", MANIFEST)
        with pytest.raises(SealedTestError, match="no release was recorded"):
            seal.open_once()
        with pytest.raises(SealedTestError, match="already recorded"):
            seal.record_no_release("again")
        assert not seal.was_opened()
        assert loader.calls == 0
        status = seal.status()
        assert (status.frozen, status.opened, status.no_release) == (
            None,
            False,
            "no release: the feasible set is empty",
        )
        assert [(e["event"], e["accepted"]) for e in seal.access_log()] == [
            ("no-release", True),
            ("freeze", False),
            ("open", False),
            ("no-release", False),
        ]


def test_report_requires_the_opened_frozen_release(store_path):
    with _seal(store_path) as seal:
        frozen = seal.freeze("lora_r2", "ck", MANIFEST)
        with pytest.raises(SealedTestError, match="not opened"):
            seal.report(frozen, TEST_R2)
        seal.open_once()
        other = FrozenRelease("lora_r4", "ck", MANIFEST, DESIGN)
        with pytest.raises(SealedTestError, match="not the frozen release"):
            seal.report(other, TEST_R2)
        with pytest.raises(ValueError, match="finite"):
            seal.report(frozen, {"target": float("nan")})
        event = seal.report(frozen, TEST_R2)
        assert event["results"] == TEST_R2
        assert dict(seal.status().report) == TEST_R2


def test_every_event_is_an_attempt_with_a_verified_json_artifact(store_path):
    with _seal(store_path) as seal:
        frozen = seal.freeze("lora_r2", "ck", MANIFEST)
        store = seal.store
        [run] = [r for r in store.runs("learn-forget") if r.kind == SealedTestSpec.kind]
        assert run.spec["test_splits"] == ["retention-test@v1", "target-test@v1"]
        [art] = store.artifacts(run.identity)
        assert art.kind == ACCESS_KIND
        body = json.loads(art.path.read_text())
        assert body["frozen_digest"] == frozen.digest()
        assert body == json.loads(store.attempts(run.identity)[0].message)
        assert store.verify_artifacts(run.identity) == []
        with pytest.raises(SealedTestError, match="never executed"):
            SealedTestSpec.model_validate(run.spec).execute(None)


def test_a_study_sealed_under_another_design_is_refused(store_path):
    _seal(store_path).close()
    with pytest.raises(SealedTestError, match="new versioned study"):
        _seal(store_path, design_digest="e" * 64)
    with pytest.raises(SealedTestError, match="seals test splits"):
        _seal(store_path, test_splits=("target-test@v1",))
    _seal(store_path, study="learn-forget-v2", design_digest="e" * 64).close()


def test_an_existing_run_store_object_is_used_and_left_open(store_path):
    with RunStore(store_path) as store:
        store.add_study("learn-forget")
        seal = _seal(store)
        seal.freeze("lora_r2", "ck", MANIFEST)
        seal.close()
        assert len(store.studies()) == 1  # still open: the caller owns it


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"design_digest": "xyz"}, "design_digest='xyz'"),
        ({"test_splits": ()}, "test_splits"),
        ({"test_splits": ("a", "a")}, "test_splits"),
        ({"study": ""}, "study=''"),
    ],
)
def test_bad_arguments_are_value_errors(store_path, changes, match):
    with pytest.raises(ValueError, match=match):
        _seal(store_path, **changes)


def test_freeze_refuses_a_malformed_manifest_digest(store_path):
    with _seal(store_path) as seal, pytest.raises(ValueError, match="manifest_digest"):
        seal.freeze("lora_r2", "ck", "not-a-digest")


def test_a_process_dying_mid_opening_still_counts_as_the_opening(store_path):
    # The child records its opening, then dies before ending the attempt (and before loading).
    script = (
        "import os, sys; from gaugelab.study.release.sealed import SealedTestStore as S\n"
        f"s = S(sys.argv[1], study='learn-forget', design_digest={DESIGN!r}, "
        "test_splits=('retention-test@v1', 'target-test@v1'), loader=lambda: 1/0)\n"
        f"s.freeze('lora_r2', 'ck', {MANIFEST!r})\n"
        "s.store.end_attempt = lambda *a, **k: os._exit(3)\n"
        "s.open_once()\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(store_path)], check=False)
    assert done.returncode == 3
    loader = Loader()
    with _seal(store_path, loader) as seal:
        assert seal.was_opened()  # fail closed: the recorded intent counts
        with pytest.raises(SealedTestError, match="opening twice"):
            seal.open_once()
        assert loader.calls == 0
        log = seal.access_log()
        assert [(e["event"], e["accepted"], e["termination"]) for e in log] == [
            ("freeze", True, "completed"),
            ("open", True, "infrastructure_failure"),  # reaped: owner pid gone
            ("open", False, "admission_failure"),
        ]


def test_a_live_holder_makes_another_access_refused_and_logged(store_path):
    loader = Loader()
    with _seal(store_path, loader) as seal:
        seal.freeze("lora_r2", "ck", MANIFEST)
        held = seal.store.start_attempt(seal.identity)  # another access in flight
        with pytest.raises(SealedTestError, match="holds the seal"):
            seal.open_once()
        seal.store.end_attempt(held, "cancelled", "test")
        assert loader.calls == 0
        assert [(e["event"], e["accepted"]) for e in seal.access_log()] == [
            ("freeze", True),
            ("interrupted", False),
            ("open", False),
        ]
        assert seal.open_once() == TEST_R2


def test_test_splits_opened_by_one_study_are_refused_to_another_and_never_load(store_path):
    # seed 003 §0x0CH: a changed policy is a new versioned study *with new held-out data*
    with _seal(store_path) as first:
        first.freeze("lora_r2", "lora_r2@step200", MANIFEST)
        first.open_once()
    loader = Loader()
    with _seal(store_path, loader, study="learn-forget-v2", design_digest="e" * 64) as second:
        second.freeze("lora_r1", "lora_r1@step200", MANIFEST)
        with pytest.raises(SealedTestError, match="opened by study 'learn-forget'"):
            second.open_once()
        assert loader.calls == 0 and not second.was_opened()
    fresh = Loader()
    with _seal(store_path, fresh, study="v3", test_splits=("target-test@v2",)) as third:
        third.freeze("lora_r1", "lora_r1@step200", MANIFEST)
        assert third.open_once() == TEST_R2  # new held-out data opens
        assert fresh.calls == 1


def test_a_study_that_recorded_no_release_leaves_the_splits_unopened_for_the_next(store_path):
    with _seal(store_path) as first:
        first.record_no_release("no release: the feasible set is empty")
    with _seal(store_path, study="learn-forget-v2", design_digest="e" * 64) as second:
        second.freeze("lora_r2", "lora_r2@step200", MANIFEST)
        assert second.open_once() == TEST_R2


def test_after_opening_a_later_no_release_does_not_hide_that_the_test_was_opened(store_path):
    with _seal(store_path) as seal:
        seal.freeze("lora_r2", "lora_r2@step200", MANIFEST)
        seal.open_once()
        seal.record_no_release("the release gate failed on test")  # §0x0BT: allowed
        with pytest.raises(SealedTestError, match="opening twice"):
            seal.open_once()
