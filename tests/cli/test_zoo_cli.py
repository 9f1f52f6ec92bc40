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


def test_an_unknown_rule_in_a_list_is_named(tmp_path):
    result = invoke("zoo", "--rules", "gd,foo", "--store", str(tmp_path / "s.sqlite"))
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --rules gd,foo: unknown rule(s) ['foo']; allowed: gd,")


def _values(store):
    from gaugelab.study.store.db import RunStore

    with RunStore(store, create=False) as db:
        return {
            (run.identity, m.name, m.step): m.value
            for run in db.runs()
            for m in db.metrics(run.identity)
        }


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one Ray cluster at a time (tests/conftest.py)
def test_zoo_and_dial_on_a_local_ray_store_what_local_workers_store(tmp_path):
    try:
        import ray
    except ImportError:
        pytest.fail("Ray is not installed; `make test` installs gaugelab[ray]")
    zoo = ("zoo", *SMALL, "--rules", "gd,adam", "--no-convex")
    dial = ("dial", *SMALL, "--ps", "1,0", "--lrs", "0.01,0.03", "--no-gd")
    try:
        for args in (zoo, dial):
            on_ray = invoke(*args, "--executor", "ray", "--max-workers", "2",
                            "--store", str(tmp_path / f"{args[0]}-ray.sqlite"))  # fmt: skip
            assert on_ray.exit_code == 0, on_ray.output
            assert "report:" in on_ray.output
    finally:
        ray.shutdown()
    for args in (zoo, dial):
        local = invoke(*args, "--store", str(tmp_path / f"{args[0]}-local.sqlite"))
        assert local.exit_code == 0, local.output
        ray_values = _values(tmp_path / f"{args[0]}-ray.sqlite")
        assert ray_values and ray_values == _values(tmp_path / f"{args[0]}-local.sqlite")


def test_a_bad_executor_is_a_one_line_error(tmp_path):
    result = invoke("zoo", *SMALL, "--executor", "dask", "--store", str(tmp_path / "s.sqlite"))
    assert result.exit_code == 2
    assert "--executor 'dask'; allowed: local, ray" in result.output
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--lr", "bogus=1e-3"), "--lr 'bogus=1e-3': no rule 'bogus'; rules with a grid: gd,"),
        (("--tail", "0", "--tail", "0.1", "--study", "s"), "--study/--out name one study; 2"),
    ],
)
def test_zoo_options_that_cannot_apply_are_one_line_errors(tmp_path, args, message):
    store = tmp_path / "s.sqlite"
    result = invoke("zoo", *SMALL, *args, "--store", str(store))
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith(f"error: {message}"), result.output
    assert not store.exists()


def test_a_report_folder_that_holds_a_report_is_refused_before_any_run(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "report.html").write_text("mine")
    store = tmp_path / "s.sqlite"
    result = invoke("zoo", *SMALL, "--rules", "gd", "--no-convex", "--store", str(store),
                    "--out", str(out))  # fmt: skip
    assert result.exit_code == 2
    assert result.output.strip() == (  # one line, before the header
        f"error: {out} already holds report.html; reports are never overwritten (choose another "
        "folder: --out DIR)"
    )
    assert (out / "report.html").read_text() == "mine" and not store.exists()


def test_a_bad_store_is_one_line_before_any_header_or_bar(tmp_path):
    store = tmp_path / "s.sqlite"
    store.write_text("not a run store, just text " * 8)
    before = store.read_bytes()
    result = invoke("zoo", *SMALL, "--rules", "gd", "--no-convex", "--store", str(store))
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not an SQLite" in lines[0]
    assert store.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("zoo", "--size", "0"), "--size 0; allowed: an integer >= 1"),
        (("zoo", "--steps", "-1"), "--steps -1; allowed: an integer >= 1"),
        (("zoo", "--init-scale", "-1"), "--init-scale -1; allowed: a number > 0"),
        (("zoo", "--seeds", "1,1"), "--seeds 1,1; allowed: distinct integers"),
        (("zoo", "--rank", "50"), "--rank 50; allowed: 1 <= rank <= --size 40"),
        (("zoo", "--threads", "0"), "--threads 0; allowed: an integer >= 1"),
        (("zoo", "--max-workers", "0"), "--max-workers 0; allowed: an integer >= 1"),
        (("zoo", "--rules", "gd", "--lr", "gd=-1"), "--lr gd=-1; allowed: finite numbers > 0"),
        (("dial", "--steps", "0"), "--steps 0; allowed: an integer >= 1"),
        (("dial", "--lrs", "-1"), "--lrs -1; allowed: finite numbers > 0"),
        (("dial", "--mean", "harmonic"), "--mean harmonic; allowed: rms or geometric"),
        (("dial", "--threads", "0"), "--threads 0; allowed: an integer >= 1"),
    ],
)
def test_every_bad_option_is_named_with_its_value_before_any_header_or_bar(tmp_path, args, message):
    store = tmp_path / "s.sqlite"
    result = invoke(*args, "--store", str(store))
    assert result.exit_code == 2, result.output
    assert result.output == f"error: {message}\n"  # one line: no header, no bar
    assert not store.exists()


def test_a_store_under_a_regular_file_is_one_line_before_any_header(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for store in (blocker / "s.sqlite", blocker / "deeper" / "s.sqlite"):
        result = invoke("zoo", *SMALL, "--rules", "gd", "--no-convex", "--store", str(store))
        assert result.exit_code == 2, result.output
        assert result.output == (
            f"error: --store {store}: {blocker} is a regular file, not a folder; choose another "
            "--store\n"
        )


def test_a_full_disk_while_writing_the_report_keeps_the_runs_and_says_how_to_report(
    tmp_path, monkeypatch
):
    import errno

    import gaugelab.experiments.sensing.zoo

    def full(result, folder):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "recovery.png"))

    monkeypatch.setattr(gaugelab.experiments.sensing.zoo, "report", full)
    store = tmp_path / "s.sqlite"
    result = invoke("zoo", *SMALL, "--rules", "gd", "--lr", "gd=2e-2", "--no-convex",
                    "--store", str(store))  # fmt: skip
    assert result.exit_code == 2, result.output
    from gaugelab.study.store.db import RunStore

    with RunStore(store, create=False) as db:
        (study,) = [s.name for s in db.studies()]
        (run,) = db.runs()
        assert db.completed(run.identity)  # the run is kept
    error = result.stderr.strip()
    assert "no space left on the device while writing the report" in error
    assert f"`gaugelab runs list --study {study} --store {store}` shows how each ended" in error
    assert error.endswith("once there is space, rerun the same command: it reruns what failed "
                          "and writes the report")  # fmt: skip
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output



def test_a_learning_rate_for_a_rule_not_run_is_warned_about(tmp_path):
    result = invoke("zoo", *SMALL, "--rules", "gd", "--no-convex", "--lr", "adam=0.1",
                    "--store", str(tmp_path / "s.sqlite"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning: --lr adam: not among the rules run (gd); ignored" in result.output
