"""gaugelab intrinsic-dim (registered on a small app as cli/app.py registers it): a quick study
prints the per-d table, the estimate with its boundary state and the raw records, and is
reused when run again; bad options are one-line errors naming the option."""

import pytest
import typer
from typer.testing import CliRunner

from gaugelab.cli import intrinsic

pytestmark = pytest.mark.usefixtures("one_thread")

app = typer.Typer()


@app.callback()
def _root() -> None:
    """The test's root command."""


intrinsic.register(app)
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["intrinsic-dim", *map(str, args)], env={"COLUMNS": "250"})


def test_quick_study_prints_the_estimate_and_is_reused(tmp_path):
    store = tmp_path / "s.sqlite"
    args = ("--quick", "--family", "fastfood", "--seeds", "0", "--store", store)
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    for text in ("vs target", "boundary state", "append-only", "d90 ", "report: "):
        assert text in first.output
    second = invoke(*args)
    assert second.exit_code == 0 and "run(s) were already completed in the store: reused" in (
        second.output
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--family", "gaussian"), "family"),
        (("--dims", "4,x"), "--dims"),
        (("--threshold", "cummax"), "threshold"),
        (("--executor", "slurm"), "--executor"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, args, named):
    result = invoke("--quick", "--store", tmp_path / "s.sqlite", *args)
    assert result.exit_code == 2 and named in result.output
    assert not (tmp_path / "s.sqlite").exists()


def test_help_explains_the_protocol():
    result = invoke("--help")
    assert result.exit_code == 0
    for text in ("--family", "--threshold", "--quick", "cumulative"):
        assert text in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--seeds", "-1"), "--seeds -1; allowed: an integer in [0, 2**63)"),
        (("--lrs", "-1"), "--lrs -1; allowed: rates > 0"),
        (("--full-lrs", "0"), "--full-lrs 0; allowed: rates > 0"),
        (("--hidden", "1"), "--hidden 1; allowed: an integer >= 2"),
        (("--layers", "0"), "--layers 0; allowed: an integer >= 1"),
        (("--dtype", "float16"), "--dtype float16; allowed: float32 or float64"),
        (("--problem", "char", "--hidden", "33"), "--hidden 33; allowed: an even integer >= 2"),
        (("--method", "said", "--dims", "2"), "--dims 2; allowed: 3 <= d <= 1485 (SAID"),
        (("--family", "orthonormal", "--dims", "8,2000"), "--dims 2000; allowed: 1 <= d <= 1482"),
        (
            ("--problem", "finetune", "--method", "said", "--family", "fastfood", "--dims", "2,32"),
            "--dims 2; allowed: 3 <= d <= 1400",
        ),
    ],
)
def test_bad_values_name_the_option_the_value_and_what_is_allowed(tmp_path, args, message):
    result = invoke("--quick", "--store", tmp_path / "s.sqlite", *args)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"error: {message}"), line
    assert not (tmp_path / "s.sqlite").exists()  # nothing registered


def test_help_states_the_defaults_it_applies():
    from gaugelab.experiments.intrinsic.spec import QUICK, IntrinsicSpec

    result = invoke("--help")
    text = " ".join(result.output.replace("│", " ").split())
    for name, option in (("lrs", "--lrs"), ("full_lrs", "--full-lrs"), ("seeds", "--seeds")):
        default = ",".join(f"{v:g}" for v in IntrinsicSpec.model_fields[name].default)
        quick = ",".join(f"{v:g}" for v in QUICK[name])
        assert f"(default {default}; {quick} with --quick)" in text, option
    assert "unit-columns (the default of dense, sparse and fastfood)" in text
    assert "fastfood also takes 1/p" in text and "fastfood: 1/p" not in text
    assert IntrinsicSpec(family="fastfood").normalization == "unit-columns"  # as stated
