"""gaugelab lora twins (registered on a small app as cli/lora.py registers it): a quick study
prints the triplet's table and verdicts, is reused when run again and reported by `gaugelab
report`; bad options are one-line errors naming the option; the help imports no torch."""

import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from gaugelab.cli import app as gaugelab_app
from gaugelab.cli import lora_twins
from gaugelab.errors import NonFiniteError

pytestmark = pytest.mark.usefixtures("one_thread")

app = typer.Typer()


@app.callback()
def _root() -> None:
    """The test's root command."""


group = typer.Typer()
lora_twins.register(group)
app.add_typer(group, name="lora")
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["lora", "twins", *map(str, args)], env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def quick(tmp_path_factory, one_thread):
    store = tmp_path_factory.mktemp("cli") / "s.sqlite"
    args = ("--quick", "--optimizers", "sgd-compensated", "--store", store)
    return store, args, invoke(*args)


def test_a_quick_study_prints_the_table_and_verdicts_and_is_reused(quick, tmp_path):
    store, args, first = quick
    assert first.exit_code == 0, first.output
    out = first.output
    assert "pretrain (2 layers, d_model 32, 30 steps) + 1 twin run(s) (sgd-compensated)" in out
    assert "LoRA gauge twins: the triplet's reading per optimizer" in out
    assert "sgd-compensated, scalar twin (c = 2): equivariant" in out
    assert "sgd-compensated, GL(r) twin: basis-sensitive" in out
    assert "report:" in out
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert "2 run(s) were already completed in the store: reused" in again.output
    study = next(line for line in out.splitlines() if "report:" in line).split("/")[-3]
    written = runner.invoke(gaugelab_app, ["report", study, "--store", str(store),
                                           "--out", str(tmp_path / "r")])  # fmt: skip
    assert written.exit_code == 0, written.output
    assert "basis-sensitive" in (tmp_path / "r" / "report.html").read_text()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--optimizers", "lion"), "--optimizers"),
        (("--damping", "big"), "--damping"),
        (("--dtype", "float16"), "--dtype"),
        (("--threads", "0"), "--threads"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(args, option, tmp_path):
    result = invoke("--quick", *args, "--store", tmp_path / "s.sqlite")
    assert result.exit_code == 2
    assert "error:" in result.output and option in result.output
    assert not (tmp_path / "s.sqlite").exists()  # nothing was written


def test_the_help_lists_the_protocol_and_the_module_imports_no_torch():
    from gaugelab.experiments.lora_twins.run import LORA_TWIN_OPTIMIZERS

    assert lora_twins.LORA_TWIN_OPTIMIZERS == LORA_TWIN_OPTIMIZERS
    result = invoke("--help")
    assert result.exit_code == 0 and "GL(r) gauge twin" in result.output
    code = "import sys, gaugelab.cli.lora_twins; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--lr", "inf"), "error: --lr inf; allowed: a finite number > 0"),
        (("--lr", "0"), "error: --lr 0; allowed: a finite number > 0"),
        (("--scalar", "inf"), "error: --scalar inf; allowed: a finite number > 0"),
        (("--noise-scale", "nan"), "error: --noise-scale nan; allowed: a finite number > 0"),
        (("--optimizers", ""), "error: --optimizers ''; allowed: distinct names of adam,"),
    ],
)
def test_rates_are_checked_before_anything_runs(args, message, tmp_path):
    result = invoke("--quick", *args, "--store", tmp_path / "s.sqlite")
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message) and result.output.count("\n") == 1
    assert not (tmp_path / "s.sqlite").exists()  # nothing trained, nothing written


def test_the_quick_study_prints_the_update_angles_against_the_noise_floor(quick):
    out = quick[2].output
    assert "noise angle (rad)" in out
    assert "sgd-compensated: largest principal angle between the updates at step 6" in out
    assert "(the floor)" in out


def test_a_failed_run_is_no_row_and_its_failure_says_what_to_do(tmp_path, monkeypatch):
    import gaugelab.experiments.lora_twins.train as twin_train

    real = twin_train.train_lora_twins

    def diverges(spec, run):  # sgd logs a step, then its loss is nan
        if spec.optimizer != "sgd":
            return real(spec, run)
        run.log(1, {"gauge/logit_distance": 1.23e-07})
        raise NonFiniteError("sgd: training loss at step 2 is not finite: [nan]")

    monkeypatch.setattr(twin_train, "train_lora_twins", diverges)
    store = tmp_path / "s.sqlite"
    result = invoke("--quick", "--steps", "2", "--warmup-steps", "1", "--optimizers",
                    "sgd-compensated,sgd", "--store", store)  # fmt: skip
    assert result.exit_code == 3, result.output
    lines = result.output.splitlines()
    cells = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert cells == ["sgd-compensated"] and "1.23e-07" not in result.output
    assert not any(line.startswith("sgd,") for line in lines)  # no verdict of the failure
    assert any(line.startswith("sgd-compensated, GL(r) twin:") for line in lines)
    flat = " ".join(result.output.split())
    assert "numerical_failure — NonFiniteError: sgd: training loss at step 2" in flat
    assert "what to do: a smaller learning rate, or another rule" in flat
