"""The fast start (issue 12 §4): what `gaugelab --help`, `runs` and `report --help` import.

Each command runs in a fresh interpreter that records, on its way out, which heavy modules it
had imported; these commands must not import torch (nor matplotlib or scipy for the help).
Timings are `gaugelab bench start`'s business, never asserted here. The values the help shows
without importing their sources (cli/_defaults.py) and the run labels `runs list` reads from a
stored spec are checked against the library's own.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gaugelab.cli import _defaults
from gaugelab.cli.runs import trains

HEAVY = ("torch", "matplotlib", "scipy")

_PROBE = """
import json, os, sys
sys.argv = ["gaugelab", *json.loads(os.environ["PROBE_ARGS"])]
try:
    from gaugelab.cli import main
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump({"code": code, "modules": sorted(m for m in sys.modules if "." not in m)}, out)
"""


def loaded(tmp_path: Path, *args: str) -> set[str]:
    """The top-level modules a `gaugelab ARGS` process had imported when it exited (exit 0)."""
    out = tmp_path / "probe.json"
    env = {**os.environ, "PROBE_ARGS": json.dumps(list(args)), "PROBE_OUT": str(out),
           "COLUMNS": "120"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    probe = json.loads(out.read_text())
    assert probe["code"] in (0, None), (args, done.stderr)
    return set(probe["modules"])


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store holding one zoo and one dial run (registered, not trained)."""
    from gaugelab.experiments.sensing.dial import DialSpec
    from gaugelab.experiments.sensing.zoo import ZooSpec
    from gaugelab.study.spec import Manifest
    from gaugelab.study.store.db import RunStore

    path = tmp_path_factory.mktemp("startup") / "store.sqlite"
    with RunStore(path) as db:
        db.add_study("mixed")
        for spec in (ZooSpec(rules=("gd", "muon"), steps=10, seeds=(1,)), DialSpec(steps=10)):
            run = db.register_run(Manifest.for_spec(spec), study="mixed")
            db.log_metrics(db.start_attempt(run.identity), 1, {"loss": 1.0})
    return path


def test_help_imports_no_torch_matplotlib_or_scipy(tmp_path):
    modules = loaded(tmp_path, "--help")
    assert not modules & set(HEAVY), modules & set(HEAVY)


@pytest.mark.parametrize("args", [("runs", "list"), ("runs", "export", "--format", "json")])
def test_browsing_the_store_imports_no_torch(tmp_path, store, args):
    modules = loaded(tmp_path, *args, "--store", str(store))
    assert "torch" not in modules


def test_showing_a_zoo_run_imports_no_torch(tmp_path, store):
    from gaugelab.study.store.db import RunStore

    with RunStore(store, create=False) as db:
        zoo = next(r.identity for r in db.runs() if r.kind == "zoo")
    assert "torch" not in loaded(tmp_path, "runs", "show", zoo[:8], "--store", str(store))


def test_report_help_imports_no_torch(tmp_path):
    assert "torch" not in loaded(tmp_path, "report", "--help")


def test_the_help_defaults_are_the_librarys():
    from gaugelab.equivariance.problems import PROBLEMS
    from gaugelab.experiments.lora import run as lora
    from gaugelab.experiments.twins import run as twins
    from gaugelab.gauge import GROUPS
    from gaugelab.study.store.db import DEFAULT_STORE_PATH
    from gaugelab.study.sweep import EXECUTORS

    assert _defaults.DEFAULT_STORE_PATH == DEFAULT_STORE_PATH
    assert _defaults.EXECUTORS == EXECUTORS
    assert _defaults.GROUP_NAMES == tuple(sorted(GROUPS))
    assert _defaults.PROBLEM_NAMES == tuple(PROBLEMS)
    assert _defaults.TWIN_OPTIMIZERS == tuple(twins.DEFAULT_OPTIMIZERS)
    assert _defaults.TWIN_QUICK_STEPS == twins.QUICK_STEPS
    assert (_defaults.LORA_LR, _defaults.FULL_LR) == (lora.LORA_LR, lora.FULL_LR)


@pytest.mark.parametrize(
    "fields",
    [{}, {"rules": ("gd", "muon")}, {"convex": False}, {"rules": ("adam",), "convex": False}],
)
def test_runs_list_names_a_zoo_run_as_the_spec_does(fields):
    from gaugelab.experiments.sensing.zoo import ZooSpec

    spec = ZooSpec(**fields)
    stored = json.loads(spec.model_dump_json())
    assert trains("zoo", stored) == ", ".join(spec.labels())


@pytest.mark.parametrize(
    "fields", [{}, {"ps": (1.0, 0.5, 0.0)}, {"gd_reference": False}, {"ps": (0.25,)}]
)
def test_runs_list_names_a_dial_run_as_the_spec_does(fields):
    from gaugelab.experiments.sensing.dial import DialSpec

    spec = DialSpec(**fields)
    stored = json.loads(spec.model_dump_json())
    assert trains("dial", stored) == ", ".join(spec.labels())


@pytest.mark.parametrize("fields", [{"ranks": (4,), "full": False}, {"ranks": (), "full": True},
                                    {"ranks": (1, 16)}])  # fmt: skip
def test_runs_list_names_a_lora_finetune_run_as_the_spec_does(fields):
    from gaugelab.experiments.lora.spec import FinetuneSpec

    spec = FinetuneSpec(**fields)
    stored = json.loads(spec.model_dump_json())
    assert trains("lora-finetune", stored) == ", ".join(spec.candidates())


def test_runs_list_names_lora_twin_and_kernel_runs_by_their_optimizers():
    from gaugelab.experiments.lora_kernel.spec import KernelSpec
    from gaugelab.experiments.lora_twins.spec import LoraTwinSpec

    twin = json.loads(LoraTwinSpec(optimizer="scaled-gd").model_dump_json())
    assert trains("lora-twins", twin) == "scaled-gd"
    kernel = json.loads(KernelSpec(optimizers=("gd", "adam")).model_dump_json())
    assert trains("lora-kernel", kernel) == "gd, adam"


def test_runs_list_names_an_intrinsic_run_as_its_training_and_report_do():
    from gaugelab.experiments.intrinsic import run as intrinsic

    runs = intrinsic.plan(intrinsic.quick_spec()).specs()
    assert runs, "the quick study plans runs"
    for run in runs:
        stored = json.loads(run.model_dump_json())
        assert trains("intrinsic-dim", stored) == run.run_label()
    assert {trains("intrinsic-dim", json.loads(r.model_dump_json())).split()[0]
            for r in runs} == {"full", "did"}  # fmt: skip
    study = json.loads(intrinsic.quick_spec().model_dump_json())
    assert trains("intrinsic-dim", study) is None  # the study spec trains nothing itself


def test_runs_list_names_an_atlas_run_by_its_check_as_the_report_does():
    from gaugelab.experiments.atlas.run import AtlasSpec, Candidate, plan

    spec = AtlasSpec(optimizers=(Candidate(target="torch.optim:Adam", version="torch 2"),))
    labels = [trains("atlas", json.loads(r.model_dump_json())) for r in plan(spec).specs()]
    assert labels == [r.run_label() for r in plan(spec).specs()]
    assert labels[0] == "torch.optim:Adam orthogonal / sensing"
    assert trains("atlas", json.loads(spec.model_dump_json())) is None  # 4 checks: a study


@pytest.mark.parametrize(
    ("kind", "spec"),
    [("zoo", {"rules": "gd"}), ("zoo", {"rules": ["gd"], "convex": "yes"}),
     ("dial", {"ps": ["a"]}), ("dial", {"ps": [True]}), ("toy", {"rules": ["gd"]}),
     ("lora-finetune", {"full": "yes", "ranks": []}), ("lora-finetune", {"ranks": [True]}),
     ("lora-twins", {"optimizer": 3}), ("lora-kernel", {"optimizers": "gd"}),
     ("intrinsic-dim", {"role": "full", "full_lrs": ["x"]}),
     ("intrinsic-dim", {"role": "subspace", "dims": [1, 2], "seeds": [0], "lrs": [0.1]}),
     ("atlas", {"optimizers": [{"target": 3}], "groups": ["orthogonal"], "problems": ["sensing"]}),
     ("atlas", {"optimizers": ["torch.optim:Adam"], "groups": ["x"], "problems": ["sensing"]})],
)  # fmt: skip
def test_runs_list_leaves_a_spec_it_cannot_read_unnamed(kind, spec):
    assert trains(kind, spec) is None
