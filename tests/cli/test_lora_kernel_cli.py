"""gaugelab lora kernel (registered on a small app as cli/app.py registers ``gaugelab lora``):
a quick study prints its diagnostics table and notes and is reused when run again; bad options
are one-line errors naming the option, and nothing is written."""

import pytest
import typer
from typer.testing import CliRunner

from gaugelab.cli import lora
from gaugelab.cli._console import LineProgress

pytestmark = pytest.mark.usefixtures("one_thread")

app = typer.Typer()


@app.callback()
def _root() -> None:
    """The test's root command."""


lora.register(app)
runner = CliRunner()
QUICK = ("kernel", "--quick", "--optimizers", "gd", "--steps", "2", "--probe-examples", "2")


def invoke(*args):
    return runner.invoke(app, ["lora", *map(str, args)], env={"COLUMNS": "250"})


def test_a_quick_study_prints_its_diagnostics_and_is_reused(tmp_path):
    store = tmp_path / "s.sqlite"
    first = invoke(*QUICK, "--store", store)
    assert first.exit_code == 0, first.output
    out = first.output
    assert "1 run(s) (gd) × paths nonlinear, linearized, fixed-features" in out
    assert "checkpoints [0, 2]" in out  # the default cadence cut at --steps
    assert "Kernel diagnostics under gd" in out and "prediction gap" in out
    assert "fallback mode 'plain attention'" in out and "report:" in out
    assert "do not prove" in out
    again = invoke(*QUICK, "--store", store)
    assert again.exit_code == 0, again.output
    assert "2 run(s) were already completed in the store: reused" in again.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--optimizers", "lion"), "optimizers"),
        (("--checkpoints", "1,2"), "--checkpoints"),
        (("--checkpoints", "0,x"), "--checkpoints"),
        (("--dtype", "float16"), "--dtype 'float16'"),
        (("--probes", "1"), "--probes"),
    ],
)
def test_bad_options_are_one_line_errors_and_write_nothing(tmp_path, args, needle):
    store = tmp_path / "s.sqlite"
    result = invoke("kernel", "--quick", *args, "--store", store)
    assert result.exit_code == 2, result.output
    assert needle in result.output and "error" in result.output.lower()
    assert not store.exists()


def test_help_explains_the_command():
    result = invoke("kernel", "--help")
    assert result.exit_code == 0
    assert "three matched paths" in result.output and "--optimizers" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--adam-lr", "inf"), "error: --adam-lr inf; allowed: a finite number > 0"),
        (("--gd-lr", "nan"), "error: --gd-lr nan; allowed: a finite number > 0"),
        (("--gd-lr", "-1"), "error: --gd-lr -1; allowed: a finite number > 0"),
        (("--optimizers", ""), "error: --optimizers ''; allowed: distinct names of gd, adam"),
        (("--optimizers", "gd,gd"), "error: --optimizers 'gd,gd'; allowed: distinct names"),
    ],
)
def test_rates_and_optimizers_are_checked_before_anything_trains(tmp_path, args, message):
    store = tmp_path / "s.sqlite"
    result = invoke("kernel", "--quick", *args, "--store", store)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message) and result.output.count("\n") == 1
    assert not store.exists()  # the pretrain did not run: nothing was written


def test_the_last_progress_line_is_not_repeated_when_the_last_tick_printed_it(capsys):
    progress = LineProgress("kernel runs", interval=3600)  # ticks only when told here
    with progress:
        progress.runs(2, 2)
        progress._print()  # a tick: the same state and second as the end
    with LineProgress("kernel runs", interval=3600) as moved:
        moved.runs(1, 2)
        moved._print()
        moved.runs(2, 2)  # the state changed after the last tick: the end says so
    assert capsys.readouterr().err.splitlines() == [
        "kernel runs: 2/2 runs, 00:00",
        "kernel runs: 1/2 runs, 00:00",
        "kernel runs: 2/2 runs, 00:00",
    ]
