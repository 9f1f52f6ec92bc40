"""gaugelab atlas at CI size (torch.optim plus a user's module, 3 steps, one group and problem):
the verdicts, an error row with its reason, a rerun that executes nothing, --json and --markdown
that parse, and one-line refusals."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gaugelab.cli.app import app
from gaugelab.study.store.db import RunStore

MYOPTS = (Path(__file__).parents[1] / "equivariance" / "user_optimizers.py").read_text()
SMALL = [
    "--source", "torch.optim,myopts", "--only", "Adam,SGD,NoOp,RaisesInStep",
    "--groups", "orthogonal", "--problems", "sensing", "--steps", "3", "--draws", "1",
]  # fmt: skip


def gaugelab(workdir, *args):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "gaugelab", "atlas", *args], cwd=workdir, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def atlas(tmp_path_factory):
    """The atlas run once as JSON, then again as tables and as Markdown (both reruns)."""
    workdir = tmp_path_factory.mktemp("user")
    (workdir / "myopts.py").write_text(MYOPTS)
    store = workdir / "store.sqlite"
    runs = {}
    for name, flags in (("json", ["--json"]), ("tables", []), ("markdown", ["--markdown"])):
        runs[name] = gaugelab(workdir, *SMALL, "--store", str(store), *flags)
    return workdir, store, runs


def test_the_atlas_gives_each_optimizer_its_verdict_and_an_error_row_its_reason(atlas):
    _, _, runs = atlas
    first = runs["json"]
    assert first.returncode == 0, first.stderr
    rows = {r["optimizer"]: r for r in json.loads(first.stdout)["result"]["rows"]}
    assert {name: r["verdict"] for name, r in rows.items()} == {
        "torch.optim:Adam": "breaks",  # basis-sensitive under the orthogonal gauge
        "torch.optim:SGD": "equivariant",
        "myopts:NoOp": "inconclusive",  # it never moves: not measured, never certified
        "myopts:RaisesInStep": "error",
    }
    error = rows["myopts:RaisesInStep"]
    assert (error["phase"], error["reason"]) == (
        "step 3 of the base run",
        "RuntimeError: The size of tensor a (6) must match the size of tensor b (3)",
    )
    assert rows["torch.optim:Adam"]["ratio"] > 100 and rows["torch.optim:Adam"]["seconds"] > 0
    assert "report: " in first.stderr  # stdout holds only the JSON


def test_a_rerun_executes_nothing(atlas):
    _, store, runs = atlas
    rerun = runs["tables"]
    assert rerun.returncode == 0, rerun.stderr
    assert "4 run(s) were already completed in the store: reused" in rerun.stdout
    assert "myopts:RaisesInStep" in rerun.stdout and "step 3 of the base run" in rerun.stdout
    with RunStore(store, create=False) as db:  # one attempt per check, after three atlases
        assert sorted(len(db.attempts(r.identity)) for r in db.runs()) == [1, 1, 1, 1]


def test_markdown_is_a_table_with_one_row_per_optimizer(atlas):
    _, _, runs = atlas
    md = runs["markdown"]
    assert md.returncode == 0, md.stderr
    lines = md.stdout.splitlines()
    assert lines[:2] == ["| optimizer | orthogonal / sensing |", "|---|---|"]
    table = lines[2:6]
    assert [line.split(" | ")[0] for line in table] == [
        "| torch.optim:Adam", "| myopts:NoOp", "| torch.optim:SGD", "| myopts:RaisesInStep",
    ]  # grouped by verdict: breaks, inconclusive, equivariant, error
    assert all(line.endswith(" |") for line in table)
    assert "- `myopts:RaisesInStep` orthogonal / sensing: **error** — step 3" in md.stdout


runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--source", "no_such_optimizers"),
         "--source 'no_such_optimizers' is not installed; allowed: an importable module (the "
         "extra gaugelab[atlas] installs pytorch_optimizer, heavyball)"),
        (("--source", ""), "--source is empty; allowed: comma-separated names"),
        (("--only", "Adamm"), "--only Adamm: not exported by torch.optim; allowed: "),
        (("--groups", "orthogonal,bogus"), "--groups orthogonal,bogus; allowed: general-linear"),
        (("--problems", "bogus"), "--problems bogus; allowed: sensing, quadratic, attention"),
        (("--steps", "0"), "--steps 0; allowed: an integer >= 1"),
        (("--timeout", "0"), "--timeout 0; allowed: a finite number of seconds > 0"),
        (("--dtype", "float16"), "--dtype 'float16'; allowed: float32, float64"),
        (("--max-workers", "0"), "--max-workers 0; allowed: an integer >= 1"),
        (("--json", "--markdown"), "--json and --markdown: choose one"),
    ],
)  # fmt: skip
def test_a_bad_option_is_one_line_naming_it_before_the_store_exists(tmp_path, args, expected):
    store = tmp_path / "store.sqlite"
    result = runner.invoke(app, ["atlas", *args, "--store", str(store)], env={"COLUMNS": "250"})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected}"), result.output
    assert not store.exists()
