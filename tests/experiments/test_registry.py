"""The experiment record: every experiment in REGISTRY with its spec, result and functions, and
a result's versioned JSON form read back into the same result (the same tables)."""

import dataclasses
import json

import pytest

from gaugelab.experiments import registry, twins
from gaugelab.experiments.registry import REGISTRY
from gaugelab.experiments.sensing import zoo
from gaugelab.study.experiment import Experiment
from gaugelab.study.store.db import RunStore

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

KINDS = [
    "zoo", "dial", "twins", "lora-finetune", "intrinsic-dim", "lora-twins", "lora-kernel",
    "learn-forget", "atlas",
]  # fmt: skip


def test_the_registry_lists_every_study_kind_with_its_record():
    assert list(REGISTRY) == KINDS and len(REGISTRY) == len(KINDS)
    for kind in KINDS:
        record = REGISTRY[kind]
        assert isinstance(record, Experiment) and record.kind == kind == record.spec.kind
        for name in ("plan", "collect", "tables", "report", "run"):
            assert callable(getattr(record, name)), (kind, name)
    assert REGISTRY.get("lora-pretrain") is None and "toy" not in REGISTRY
    assert twins.EXPERIMENT is REGISTRY["twins"]  # the package face reads the same record


def test_registry_imports_an_experiment_only_when_it_is_read():
    import subprocess
    import sys

    code = (
        "import sys; from gaugelab.experiments.registry import REGISTRY; "
        "print('torch' in sys.modules, 'gaugelab.experiments.twins.run' in sys.modules); "
        "REGISTRY['twins']; print('gaugelab.experiments.twins.run' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"]


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    from tests.experiments.test_readback import TINY

    store = tmp_path_factory.mktemp("zoo") / "store.sqlite"
    result = zoo.run_zoo(TINY, store=store, write_report=False).result
    result.store = store  # where the study lies, for the report test
    return result


def test_a_result_round_trips_through_its_versioned_json(tiny_zoo):
    record = REGISTRY["zoo"]
    text = record.to_json(tiny_zoo)
    head = json.loads(text)
    assert (head["kind"], head["version"]) == ("zoo", 1)
    back = record.from_json(text)
    assert isinstance(back, zoo.ZooResult) and back.spec == tiny_zoo.spec
    assert record.to_json(back) == text
    assert record.tables(back) == record.tables(tiny_zoo)
    assert [r.mean_recovery for r in back.rows] == [r.mean_recovery for r in tiny_zoo.rows]


def test_from_json_and_to_json_refuse_what_is_not_theirs(tiny_zoo):
    record = REGISTRY["zoo"]
    text = record.to_json(tiny_zoo)
    with pytest.raises(ValueError, match=r"a result of \(kind, version\) \('zoo', 1\); allowed"):
        REGISTRY["dial"].from_json(text)
    bumped = json.dumps({**json.loads(text), "version": 2})
    with pytest.raises(ValueError, match=r"\('zoo', 2\); allowed: \('zoo', 1\)"):
        record.from_json(bumped)
    with pytest.raises(ValueError, match="not JSON"):
        record.from_json("{")
    broken = json.loads(text)
    broken["result"]["rows"][0]["seeds"] = "many"
    with pytest.raises(ValueError, match="seeds"):
        record.from_json(json.dumps(broken))
    with pytest.raises(TypeError, match=r"zoo\.to_json: a str; allowed: ZooResult"):
        record.to_json("not a result")


def test_report_study_finds_the_experiment_through_the_registry(tmp_path, tiny_zoo, monkeypatch):
    seen = []
    record = dataclasses.replace(REGISTRY["zoo"], report=lambda r, d: seen.append(r) or d)
    monkeypatch.setattr(registry, "REGISTRY", {"zoo": record})
    with RunStore(tiny_zoo.store, create=False) as db:
        registry.report_study(db, tiny_zoo.study, tmp_path / "out")
    assert [r.study for r in seen] == [tiny_zoo.study]
