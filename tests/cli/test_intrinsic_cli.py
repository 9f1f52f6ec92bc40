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
