"""gaugelab check on a user's own optimizer: a module in the current directory, in a fresh
process (a child of the fork server, :mod:`tests.support.forkserver`; the Ctrl-C test starts
the console script itself)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.forkserver import CLIENT
from tests.support.terminal import as_foreground_job

GAUGELAB = Path(sys.executable).with_name("gaugelab")  # the console script beside the venv's python

HEARTBEAT = re.compile(r"[:,] (\d+:)?\d\d:\d\d$")
MYOPTS = (Path(__file__).parents[1] / "equivariance" / "user_optimizers.py").read_text()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("user")
    (path / "myopts.py").write_text(MYOPTS)
    (path / "broken.py").write_text("import torch\nraise RuntimeError('no GPU here')\n")
    return path


@pytest.fixture
def gaugelab_check(workdir, forkserver):
    """``gaugelab check ARGS...`` run in ``workdir`` without ``$PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(forkserver, COLUMNS="200")

    def run(*args):
        return subprocess.run(
            [*CLIENT, "gaugelab", "check", *args], cwd=workdir, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip

    return run


def without_heartbeats(stderr: str) -> list[str]:
    """stderr's lines less the progress heartbeat (``…: 00:05``), which a check slower than
    5 s prints (a loaded machine), so the one-line rule is tested on what else it says."""
    return [line for line in stderr.strip().splitlines() if not HEARTBEAT.search(line)]


@pytest.mark.parametrize(
    ("target", "verdict"),
    [
        ("myopts:ClosureFreeSGD", "equivariant"),
        ("myopts:StepSelfSGD", "equivariant"),
        ("myopts:NoOp", "inconclusive — the optimizer did not move the parameters"),
        ("myopts:ColumnNormalisedSGD", "breaks"),
    ],
)
def test_check_finds_a_module_in_the_current_directory_and_gives_its_verdict(
    gaugelab_check, target, verdict
):
    result = gaugelab_check(target, "--steps", "3", "--draws", "1")
    assert result.returncode == 0, result.stderr
    assert f"verdict: {verdict}" in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("target", "fragments"),
    [
        ("broken:Opt", ("cannot import module 'broken'", "'broken:Opt'", "RuntimeError: no GPU")),
        ("myopts:NotAnOptimizer", ("'myopts:NotAnOptimizer'", "not a torch.optim.Optimizer")),
    ],
    ids=["raises-on-import", "not-an-optimizer"],
)
def test_check_reports_a_bad_target_in_one_line_with_exit_code_2(gaugelab_check, target, fragments):
    result = gaugelab_check(target)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = without_heartbeats(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    assert "Traceback" not in result.stdout + result.stderr


def test_ctrl_c_stops_a_long_check_with_one_line_and_exit_code_130(workdir):
    import signal

    # 5000 steps: long enough on any machine that the Ctrl-C lands mid-check (the default 10
    # steps can finish before the first periodic progress line on an idle machine)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [str(GAUGELAB), "check", "adam", "--problem", "attention", "--steps", "5000"],
        cwd=workdir, env=env, preexec_fn=as_foreground_job,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first = process.stderr.readline()  # piped: a progress line every 5 s while it works
        assert first.startswith("check: twins of adam under orthogonal on attention: 00:0"), first
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, (out, err)
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err, err
    assert out == ""


@pytest.mark.parametrize(
    ("target", "fragments"),
    [
        ("myopts:RaisesInStep", ("step 3 of the base run", "RuntimeError: The size of tensor a",
                                 "other parameter shapes")),
        ("myopts:NeedsFlags", ("step 1 of the base run", "KeyError: 'use_muon'",
                               "parameter groups flagged")),
        ("myopts:RaisesInConstructor", ("construct", "KeyError: 'betas'")),
        ("myopts:NotImplementedStep", ("step 1", "NotImplementedError", "not implemented")),
        ("myopts:Rebinds", ("step 1", "parameter 0 became (18,); it was (6, 3)", "in place")),
        ("myopts:NeedsHessian", ("step 1", "second-order gradients",)),
        ("myopts:DifferentiatesTheGradient", ("step 1", "does not require grad",
                                              "second-order gradients")),
    ],
    ids=["step-raises", "group-flags", "constructor", "not-implemented", "rebinds", "hessian",
         "hessian-vector"],
)  # fmt: skip
def test_an_optimizer_that_fails_gets_one_line_verdict_error_and_exit_code_4(
    gaugelab_check, target, fragments
):
    result = gaugelab_check(target, "--steps", "3", "--draws", "1")
    assert result.returncode == 4, result.stdout + result.stderr
    lines = without_heartbeats(result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: {target}: "), result.stderr
    assert lines[0].endswith("; verdict: error"), lines[0]
    assert all(f in lines[0] for f in fragments), lines[0]
    assert "Traceback" not in result.stdout + result.stderr


def test_json_reports_a_failed_optimizer_with_verdict_error_phase_and_reason(gaugelab_check):
    import json

    result = gaugelab_check("myopts:RaisesInStep", "--steps", "3", "--json")
    assert result.returncode == 4, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "error" and report["phase"] == "step 3 of the base run"
    assert report["reason"].startswith("RuntimeError: The size of tensor a (6)")
    assert report["optimizer"] == "myopts:RaisesInStep"


def test_json_of_a_diverged_run_carries_verdict_diverged_beside_its_one_line(gaugelab_check):
    import json

    result = gaugelab_check("gd", "--opt", "lr=1e300", "--steps", "3", "--draws", "1",
                            "--json")  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["optimizer"], report["verdict"]) == ("gd", "diverged")
    assert report["reason"].startswith("the loss is nan at step ")  # lr 1e300: step 2
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert line == f"error: the run diverged ({report['reason']}); {report['hint']}"
    assert report["hint"] == "try a smaller learning rate, --opt lr=…"
