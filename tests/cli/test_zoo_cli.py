"""gaugelab zoo / gaugelab dial: they run a small study, print the table and write a report;
bad options are one-line errors."""

import pytest
import typer
from typer.testing import CliRunner

from gaugelab.cli.zoo import register

runner = CliRunner()

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def app() -> typer.Typer:
    cli = typer.Typer()
    register(cli)
    return cli


def invoke(*args):
    return runner.invoke(app(), list(args), env={"COLUMNS": "250"})


SMALL = ("--size", "8", "--rank", "2", "--steps", "200", "--seeds", "42")


def test_zoo_runs_prints_the_table_and_the_split_and_writes_a_report(tmp_path):
    store = tmp_path / "store.sqlite"
    result = invoke(
        "zoo",
        *SMALL,
        "--rules",
        "gd,adam,muon",
        "--no-convex",
        "--lr",
        "gd=2e-2",
        "--lr",
        "adam=1e-2",
        "--lr",
        "muon=1e-1",
        "--store",
        str(store),
        "--out",
        str(tmp_path / "report"),
    )
    assert result.exit_code == 0, result.output
    for word in ("gd", "adam", "muon", "split", "report:"):
        assert word in result.output
    assert (tmp_path / "report" / "report.html").is_file()
    again = invoke(
        "zoo",
        *SMALL,
        "--rules",
        "gd,adam,muon",
        "--no-convex",
        "--lr",
        "gd=2e-2",
        "--lr",
        "adam=1e-2",
        "--lr",
        "muon=1e-1",
        "--store",
        str(store),
    )
    assert again.exit_code == 0, again.output  # cached runs; a new report folder


def test_zoo_tail_grid_makes_one_study_per_tail(tmp_path):
    result = invoke(
        "zoo",
        *SMALL,
        "--rules",
        "gd",
        "--lr",
        "gd=2e-2",
        "--no-convex",
        "--tail",
        "0",
        "--tail",
        "0.3",
        "--store",
        str(tmp_path / "s.sqlite"),
    )
    assert result.exit_code == 0, result.output
    assert "τ = 0.3" in result.output and result.output.count("report:") == 2


def test_dial_runs_and_prints_both_arms(tmp_path):
    result = invoke(
        "dial",
        *SMALL,
        "--ps",
        "1,0",
        "--lrs",
        "1e-2,3e-2",
        "--no-gd",
        "--store",
        str(tmp_path / "s.sqlite"),
    )
    assert result.exit_code == 0, result.output
    assert "Adam-p dial" in result.output and "fixed-rate arm" in result.output


def test_bad_options_are_one_line_errors(tmp_path):
    store = str(tmp_path / "s.sqlite")
    for args in (
        ("zoo", "--schedule", "warmup", "--store", store),
        ("zoo", "--rules", "adamm", "--store", store),
        ("zoo", "--lr", "adam", "--store", store),
        ("dial", "--mean", "harmonic", "--store", store),
        ("dial", "--ps", "2", "--store", store),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), result.output
