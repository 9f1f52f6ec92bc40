"""Tests for `gaugelab runs list/show/export` and `gaugelab report` (gaugelab.cli.runs)."""

import csv
import errno
import io
import json
import os
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1] / "study"))  # the toy spec of the study tests

from rich.cells import cell_len
from toy import ToySpec

from gaugelab.cli.runs import register
from gaugelab.study.spec import Manifest
from gaugelab.study.store.db import RunStore

STUDY = "[red]zoo[/red] <b>"  # rich markup and HTML: must be printed literally, escaped in HTML
app = typer.Typer()
register(app)
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "250"})


def log_run(store, identity, values, termination, message=""):
    attempt = store.start_attempt(identity)
    for step, value in enumerate(values, 1):
        store.log_metrics(attempt, step, {"y": value})
    store.end_attempt(attempt, termination, message)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    """Three toy runs (completed; failed then retried; numerical failure), written directly."""
    path = tmp_path_factory.mktemp("runs") / "store.sqlite"
    specs = [ToySpec(x=1.0), ToySpec(x=2.0, fail="flaky-os"), ToySpec(x=3.0, fail="nan")]
    with RunStore(path) as store:
        store.add_study(STUDY, ToySpec())
        store.add_study("other")
        for spec in specs:
            store.register_run(Manifest.for_spec(spec), study=STUDY)
        ok, flaky, nan = (s.identity() for s in specs)
        log_run(store, ok, [1.0, 2.0, 3.0], "completed")
        log_run(store, flaky, [2.0], "infrastructure_failure", "OSError: [bold]disk hiccup")
        log_run(store, flaky, [2.0, 4.0, 6.0], "completed")
        log_run(store, nan, [3.0, 6.0], "numerical_failure", "NonFiniteError: loss became nan")
    return path


def ids():
    return [s.identity() for s in (ToySpec(x=1.0), ToySpec(x=2.0, fail="flaky-os"))] + [
        ToySpec(x=3.0, fail="nan").identity()
    ]


def test_every_command_has_help():
    for args in (["runs", "--help"], ["runs", "list", "--help"], ["runs", "show", "--help"],
                 ["runs", "export", "--help"], ["report", "--help"]):  # fmt: skip
        result = invoke(*args)
        assert result.exit_code == 0 and "Usage" in result.output, args
    assert "--store" in invoke("runs", "list", "--help").output


def test_list_shows_every_run_with_its_latest_termination(store_path):
    result = invoke("runs", "list", "--store", store_path)
    assert result.exit_code == 0, result.output
    ok, flaky, nan = ids()
    for identity in (ok, flaky, nan):
        assert identity[:12] in result.output and identity[:13] not in result.output
    assert "numerical_failure" in result.output and "completed" in result.output
    assert STUDY in result.output  # printed literally, not read as markup
    only_other = invoke("runs", "list", "--store", store_path, "--study", "other")
    assert only_other.exit_code == 0 and ok[:12] not in only_other.output
    assert "no runs in study other" in only_other.output


def test_show_prints_manifest_spec_attempts_and_last_metrics(store_path):
    _, flaky, _ = ids()
    result = invoke("runs", "show", flaky[:8], "--store", store_path)
    assert result.exit_code == 0, result.output
    assert flaky in result.output
    assert '"fail": "flaky-os"' in result.output  # the spec as JSON
    assert "infrastructure_failure" in result.output
    assert "OSError: [bold]disk hiccup" in result.output  # the message, literally
    assert "6" in result.output.split("last metrics")[1]  # y at step 3 of attempt 2


def test_export_csv_and_json_hold_every_attempts_rows(store_path):
    csv_out = invoke("runs", "export", "--store", store_path, "--format", "csv")
    assert csv_out.exit_code == 0, csv_out.output
    rows = list(csv.DictReader(io.StringIO(csv_out.stdout)))
    assert list(rows[0]) == ["run", "attempt", "step", "name", "value"]
    assert len(rows) == 3 + (1 + 3) + 2  # every attempt's rows, the failed one included
    json_out = invoke("runs", "export", "--store", store_path, "--format", "json")
    records = json.loads(json_out.stdout)
    assert [(r["run"], r["attempt"], r["step"], r["name"], r["value"]) for r in records] == [
        (r["run"], int(r["attempt"]), int(r["step"]), r["name"], float(r["value"])) for r in rows
    ]
    trajectory = invoke("runs", "export", "--store", store_path, "--format", "json",
                        "--trajectory", "--study", STUDY)  # fmt: skip
    assert len(json.loads(trajectory.stdout)) == 3 + 3 + 2


def test_export_to_a_file_never_overwrites(store_path, tmp_path):
    out = tmp_path / "metrics.csv"
    first = invoke("runs", "export", "--store", store_path, "--out", out)
    assert first.exit_code == 0 and out.is_file()
    content = out.read_bytes()
    second = invoke("runs", "export", "--store", store_path, "--out", out, "--format", "json")
    assert second.exit_code == 2 and "already exists" in second.stderr
    assert out.read_bytes() == content


def test_report_writes_html_in_a_new_folder_each_time_and_never_overwrites(store_path):
    result = invoke("report", STUDY, "--store", store_path)
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path.name == "report.html" and path.is_file()
    assert path.parent.parent.parent == store_path.parent / "reports"
    page = path.read_text()
    assert STUDY not in page and "[red]zoo[/red] &lt;b&gt;" in page
    assert "numerical_failure" in page and "infrastructure_failure" in page
    again = invoke("report", STUDY, "--store", store_path)
    second = Path(again.stdout.strip().splitlines()[-1])
    assert again.exit_code == 0 and second.parent != path.parent and second.is_file()
    into = invoke("report", STUDY, "--store", store_path, "--out", path.parent)
    assert into.exit_code == 2 and "--out" in into.stderr and "Traceback" not in into.output


def test_report_of_a_study_still_running_counts_its_open_attempt_as_running(tmp_path):
    path = tmp_path / "store.sqlite"
    specs = [ToySpec(x=1.0), ToySpec(x=2.0), ToySpec(x=3.0)]
    with RunStore(path) as store:
        store.add_study("live", ToySpec())
        done, nan, running = (store.register_run(Manifest.for_spec(s), study="live").identity
                              for s in specs)  # fmt: skip
        log_run(store, done, [1.0], "completed")
        log_run(store, nan, [2.0], "numerical_failure", "NonFiniteError: loss became nan")
        store.start_attempt(running)  # open, held by this (live) process
        result = invoke("report", "live", "--store", path, "--out", tmp_path / "r")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "report.html" in line)
    cells = [c.strip() for c in row.split("│")[2:-1]]
    assert cells == ["3", "1", "1", "0", "1"]  # runs, completed, running, unverified, failed
    page = " ".join((tmp_path / "r" / "report.html").read_text().split())
    assert "3 runs · 1 failure ·" in page  # the running run is no failure
    assert "still running" not in page and "numerical_failure</td>" in page


def test_report_to_another_folder(store_path, tmp_path):
    result = invoke("report", STUDY, "--store", store_path, "--out", tmp_path / "r")
    assert result.exit_code == 0 and (tmp_path / "r" / "report.html").is_file()


def colliding_specs():
    """Two toy specs whose identities share their first 6 hex characters (a birthday search)."""
    seen = {}
    for seed in range(500_000):
        spec = ToySpec(seed=seed)
        prefix = spec.identity()[:6]
        if prefix in seen:
            return seen[prefix], spec
        seen[prefix] = spec
    raise AssertionError("no 6-character collision found")


def test_errors_are_one_line_with_exit_code_2(store_path, tmp_path):
    missing = tmp_path / "nowhere" / "store.sqlite"
    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("hello")
    cases = [
        (("runs", "show", "abcdef", "--store", store_path), "no run"),
        (("runs", "show", "xyz", "--store", store_path), "RUN 'xyz'; allowed: 4 to 64"),
        (("runs", "show", "abc", "--store", store_path), "RUN 'abc'; allowed: 4 to 64"),
        (("runs", "show", "abcd", "--store", store_path), "RUN abcd: no run in"),
        (("runs", "list", "--study", "nope", "--store", store_path), "--study 'nope': no such"),
        (("runs", "export", "--study", "nope", "--store", store_path), "--study 'nope': no such"),
        (("report", "nope", "--store", store_path), "STUDY 'nope': no such study"),
        (("runs", "export", "--format", "xml", "--store", store_path), "--format 'xml'"),
        (("runs", "list", "--store", missing), "no run store"),
        (("report", STUDY, "--store", missing), "no run store"),
        (("runs", "list", "--store", not_a_store), "not an SQLite database"),
    ]
    for args, fragment in cases:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: ") and fragment in result.stderr, args
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not missing.parent.exists()  # reading never creates a store
    assert not_a_store.read_text() == "hello"


def test_an_ambiguous_prefix_lists_the_candidates(tmp_path):
    a, b = colliding_specs()
    path = tmp_path / "store.sqlite"
    with RunStore(path) as store:
        for spec in (a, b):
            store.register_run(Manifest.for_spec(spec))
    result = invoke("runs", "show", a.identity()[:6], "--store", path)
    assert result.exit_code == 2 and "ambiguous" in result.stderr
    assert a.identity()[:12] in result.stderr and b.identity()[:12] in result.stderr
    assert invoke("runs", "show", a.identity()[:12], "--store", path).exit_code == 0


@pytest.fixture(scope="module")
def experiments_store(tmp_path_factory):
    """A store holding (registered, not trained) runs of a zoo, a dial and a twin study."""
    from gaugelab.experiments.sensing import dial, zoo
    from gaugelab.experiments.twins import run as twins

    path = tmp_path_factory.mktemp("experiments") / "store.sqlite"
    sweeps = [
        zoo.plan(zoo.ZooSpec(n=8, rank=2, steps=10, seeds=(1,), rules=("gd", "scalar-adam"))),
        dial.plan(dial.DialSpec(n=8, rank=2, steps=10, seeds=(1,), ps=(1.0, 0.5))),
        twins.plan(["muon-hybrid"], base=twins.TwinSpec(steps=2, checkpoints=())),
    ]
    with RunStore(path) as store:
        for sweep in sweeps:
            store.add_study(sweep.study, sweep.spec)
            for spec in sweep.specs():
                store.register_run(Manifest.for_spec(spec), study=sweep.study)
    return path


TRAINS = ("gd", "scalar-adam", "nuclear-norm", "adam-p@1", "adam-p@0.5", "muon-hybrid")


def test_list_shows_each_runs_experiment_and_what_it_trains(experiments_store):
    result = invoke("runs", "list", "--store", experiments_store)
    assert result.exit_code == 0, result.output
    rows = sorted((line.split("│")[2].strip(), line.split("│")[3].strip())
                  for line in result.output.splitlines() if line.startswith("│"))  # fmt: skip
    assert rows == [("dial", "adam-p@0.5"), ("dial", "adam-p@1"), ("dial", "gd"),
                    ("twins", "muon-hybrid"), ("zoo", "gd"), ("zoo", "nuclear-norm"),
                    ("zoo", "scalar-adam")]  # fmt: skip


def test_list_fits_80_columns_without_breaking_a_rule_name(experiments_store):
    result = runner.invoke(app, ["runs", "list", "--store", str(experiments_store)],
                           env={"COLUMNS": "80"})  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(cell_len(line) for line in lines) <= 80, result.output
    cells = {cell.strip() for line in lines for cell in line.split("│")}
    assert set(TRAINS) <= cells, result.output  # each whole, in one cell
    with RunStore(experiments_store, create=False) as db:
        for run in db.runs():
            assert sum(run.identity[:12] in line for line in lines) >= 1


def test_show_accepts_an_unambiguous_prefix_of_4_characters(experiments_store):
    with RunStore(experiments_store, create=False) as db:
        identities = [run.identity for run in db.runs()]
    unique = next(i for i in identities if sum(j.startswith(i[:4]) for j in identities) == 1)
    result = invoke("runs", "show", unique[:4], "--store", experiments_store)
    assert result.exit_code == 0, result.output
    assert f"run {unique}" in result.output


def test_report_out_under_a_regular_file_is_one_line_naming_the_option(store_path, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    exports = [("runs", "export", "--out", blocker / "m.csv")]
    reports = [("report", STUDY, "--out", out) for out in (blocker, blocker / "report")]
    for args in reports + exports:
        out = args[-1]
        result = invoke(*args, "--store", store_path)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: --out {out}"), result.stderr
        assert "is a regular file, not a folder" in result.stderr
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output


def test_report_counts_a_run_with_a_tampered_file_as_unverified_not_completed(tmp_path):
    from gaugelab.experiments.sensing.zoo import LearningRateGrids, ZooSpec, run_zoo

    spec = ZooSpec(n=6, rank=2, seeds=(42,), steps=200, check_every=100, rules=("gd", "adam"),
                   lr_grids=LearningRateGrids(gd=(2e-2,), adam=(1e-2,)), convex=False)  # fmt: skip
    store = tmp_path / "runs" / "store.sqlite"
    study = "../zoo"  # not path-safe: the report folder is still reports/<slug>/<time>
    run_zoo(spec, store=store, study=study, write_report=False)
    with RunStore(store, create=False) as db:
        (art,) = [a for r in db.runs() for a in db.artifacts(r.identity)
                  if a.path.name == "result-adam.json"]  # fmt: skip
    art.path.write_text(art.path.read_text(encoding="utf-8").replace("0", "1"), encoding="utf-8")
    result = invoke("report", study, "--store", store)
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path.parent.parent.parent == store.parent / "reports" and path.is_file()
    (row,) = [line.split("│")[2:6] for line in result.stdout.splitlines()
              if line.startswith("│") and "report.html" in line]  # fmt: skip
    assert [cell.strip() for cell in row] == ["2", "1", "0", "1"]  # runs, done, running, unverified
    (line,) = [line for line in result.stdout.splitlines() if "unverified" in line and "—" in line]
    assert line.startswith(f"failed {art.run[:12]}: unverified — {art.path}")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (errno.ENOSPC, "no space left on the device; free space (or choose another --out)"),
        (errno.EACCES, "permission denied; make it writable or choose another --out"),
        (errno.EROFS, "read-only file system; make it writable or choose another --out"),
    ],
    ids=["disk-full", "permission", "read-only"],
)
def test_a_failure_of_the_machine_while_writing_a_report_is_one_line(
    store_path, tmp_path, monkeypatch, error, message
):
    import gaugelab.cli.runs

    def refuse(store, study, folder):
        raise OSError(error, os.strerror(error), str(Path(folder) / "figure.png"))

    monkeypatch.setattr(gaugelab.cli.runs, "report_study", refuse)
    out = tmp_path / "r"
    result = invoke("report", STUDY, "--store", store_path, "--out", out)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {out / 'figure.png'}: {message}"), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.output


def test_ctrl_c_while_listing_prints_interrupted_and_exits_130(store_path, monkeypatch):
    def interrupt(self, study=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "runs", interrupt)
    result = invoke("runs", "list", "--store", store_path)
    assert result.exit_code == 130 and result.stderr == "interrupted\n", result.output


def test_show_lists_the_runs_files_and_whether_each_is_still_what_the_store_recorded(tmp_path):
    from gaugelab.experiments.sensing.zoo import LearningRateGrids, ZooSpec, run_zoo

    spec = ZooSpec(n=6, rank=2, seeds=(42,), steps=200, check_every=100, rules=("gd",),
                   lr_grids=LearningRateGrids(gd=(2e-2,)), convex=False)  # fmt: skip
    store = tmp_path / "store.sqlite"
    run_zoo(spec, store=store, write_report=False)
    with RunStore(store, create=False) as db:
        (run,) = db.runs()
        (result,) = [a for a in db.artifacts(run.identity) if a.path.name == "result-gd.json"]

    def state_of(name):
        out = invoke("runs", "show", run.identity[:8], "--store", store)
        assert out.exit_code == 0, out.output
        files = out.output.split("files (paths relative to the store's folder)")[1]
        (line,) = [line for line in files.splitlines() if name in line]
        return [cell.strip() for cell in line.split("│")[1:-1]]

    relative = str(result.path.relative_to(tmp_path))
    assert state_of("result-gd.json") == ["1", result.kind, relative, result.sha256[:12],
                                          "intact"]  # fmt: skip
    result.path.write_text(result.path.read_text(encoding="utf-8") + " ", encoding="utf-8")
    assert state_of("result-gd.json")[-1] == "changed"
    result.path.unlink()
    assert state_of("result-gd.json")[-1] == "missing"


def test_show_of_a_run_without_files_or_metrics_prints_no_empty_tables(tmp_path):
    path = tmp_path / "store.sqlite"
    spec = ToySpec(x=9.0)
    with RunStore(path) as store:
        store.register_run(Manifest.for_spec(spec))
        log_run(store, spec.identity(), [], "completed")
    out = invoke("runs", "show", spec.identity()[:8], "--store", path)
    assert out.exit_code == 0, out.output
    assert out.output.rstrip().endswith("no metrics logged")
    assert "last metrics" not in out.output and "files (" not in out.output


def test_list_and_show_read_an_older_stores_killed_run_as_todays_class(tmp_path):
    # a pool's worker whose command was killed, as stores recorded it before one class was kept
    path = tmp_path / "store.sqlite"
    spec = ToySpec(x=8.0)
    with RunStore(path) as store:
        store.add_study("old", ToySpec())
        store.register_run(Manifest.for_spec(spec), study="old")
        log_run(store, spec.identity(), [1.0], "cancelled", "driver pid 4343 gone")
    shown = invoke("runs", "show", spec.identity()[:8], "--store", path)
    assert shown.exit_code == 0, shown.output
    attempt = next(line for line in shown.output.splitlines() if "killed" in line)
    assert "infrastructure_failure" in attempt and "killed: pid 4343 ended before its" in attempt
    assert "cancelled" not in shown.output and "driver pid" not in shown.output
    listed = invoke("runs", "list", "--study", "old", "--store", path)
    assert "infrastructure_failure" in listed.output and "cancelled" not in listed.output


class _ListSpec(ToySpec):
    """A toy spec with one long list, as a LoRA run's corpus file list is."""

    kind: ClassVar[str] = "toy-list"
    items: list[int] = Field(list(range(20)), description="a long list")


def test_show_shortens_a_specs_long_lists_unless_asked_for_the_full_spec(tmp_path):
    path = tmp_path / "store.sqlite"
    spec = _ListSpec()
    with RunStore(path) as store:
        store.register_run(Manifest.for_spec(spec))
    short = invoke("runs", "show", spec.identity()[:8], "--store", path)
    assert short.exit_code == 0, short.output
    assert '"… 17 more"' in short.output and "--full-spec` prints them whole" in short.output
    assert "  19\n" not in short.output  # the last item is left out
    full = invoke("runs", "show", spec.identity()[:8], "--store", path, "--full-spec")
    assert full.exit_code == 0, full.output
    assert "  19\n" in full.output and "more" not in full.output.split("attempts")[0]


def test_control_characters_in_a_study_name_are_printed_escaped(tmp_path):
    path, name = tmp_path / "store.sqlite", "evil\x1b]0;pwned\x07\x1b[31m\rname"
    with RunStore(path) as store:
        store.add_study(name, ToySpec())
        store.register_run(Manifest.for_spec(ToySpec(x=7.0)), study=name)
    identity = ToySpec(x=7.0).identity()
    for args in (("runs", "list"), ("runs", "show", identity[:8])):
        result = invoke(*args, "--store", path)
        assert result.exit_code == 0, result.output
        assert not any(c in result.output for c in "\x1b\x07\r"), repr(result.output)
        assert r"evil\x1b]0;pwned\x07\x1b[31m\rname" in result.output.replace("\n", "")
