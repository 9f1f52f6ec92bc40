"""Tests for gaugelab.study.report.summary: the generic study report read back from the run
store."""

import html
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from toy import ToySpec

from gaugelab.study.report.builder import render_report
from gaugelab.study.report.summary import metric_family, path_slug, study_report, write_study_report
from gaugelab.study.spec import Manifest
from gaugelab.study.store.db import RunStore

STUDY_XSS = "<script>alert(1)</script>"


def log_run(store, identity, values, termination, message="", start=1):
    attempt = store.start_attempt(identity)
    for step, value in enumerate(values, start):
        store.log_metrics(attempt, step, {"train/loss": value, "val/loss": 2 * value})
    store.end_attempt(attempt, termination, message)


def fill(path, study=STUDY_XSS):
    """Three toy runs, written directly (no workers): completed; failed then retried; NaN."""
    specs = [ToySpec(x=1.0), ToySpec(x=2.0, fail="flaky-os"), ToySpec(x=3.0, fail="nan")]
    with RunStore(path) as store:
        store.add_study(study, ToySpec())
        for spec in specs:
            store.register_run(Manifest.for_spec(spec), study=study)
        ok, flaky, nan = (s.identity() for s in specs)
        log_run(store, ok, [1.0, 1e-2, 1e-4], "completed")  # spans 4 decades: log axis
        log_run(store, flaky, [4.0], "infrastructure_failure", "OSError: disk <hiccup>")
        log_run(store, flaky, [3.0, 2.0], "completed", start=2)  # resumed from step 2
        log_run(store, nan, [5.0, 6.0], "numerical_failure", "NonFiniteError: loss became nan")
    return ok, flaky, nan


@pytest.fixture
def store(tmp_path):
    ids = fill(tmp_path / "store.sqlite")
    with RunStore(tmp_path / "store.sqlite", create=False) as db:
        yield db, ids


def test_runs_are_labelled_by_the_fields_that_vary_with_their_final_metrics(store, tmp_path):
    db, (ok, flaky, nan) = store
    report = study_report(db, STUDY_XSS, directory=tmp_path / "figs")
    runs = {r.identity: r for r in report.runs}
    assert set(runs) == {ok, flaky, nan}
    assert runs[ok].label == "fail=none, x=1.0"  # sorted; seed and steps are the same in every run
    assert runs[flaky].label == "fail=flaky-os, x=2.0"
    assert [runs[i].status for i in (ok, flaky, nan)] == [
        "completed",
        "completed",
        "numerical_failure",
    ]
    assert runs[ok].metrics == {"train/loss": 1e-4, "val/loss": 2e-4}
    assert runs[flaky].metrics["train/loss"] == 2.0  # step 3 of the retry
    assert report.spec["kind"] == "toy" and report.spec["spec"]["x"] == 1.0


def test_final_metrics_table_names_step_and_attempt(store, tmp_path):
    db, (_, flaky, _) = store
    report = study_report(db, STUDY_XSS, directory=tmp_path / "figs")
    final = next(t for t in report.tables if t.title == "Final metrics")
    assert list(final.columns) == ["run", "label", "metric", "step", "value", "attempt"]
    assert len(final.rows) == 3 * 2  # three runs × two metrics
    assert [flaky[:12], "fail=flaky-os, x=2.0", "train/loss", 3, 2.0, 2] in [
        list(r) for r in final.rows
    ]
    attempts = next(t for t in report.tables if t.title == "Attempts")
    assert len(attempts.rows) == 4


def test_failures_include_retried_attempts_with_their_classes(store, tmp_path):
    db, (_, flaky, nan) = store
    report = study_report(db, STUDY_XSS, directory=tmp_path / "figs")
    failures = [(f.identity, f.termination, f.message) for f in report.failures]
    assert failures == [
        (
            flaky,
            "infrastructure_failure",
            "attempt 1 (attempt 2 completed): OSError: disk <hiccup>",
        ),
        (nan, "numerical_failure", "attempt 1: NonFiniteError: loss became nan"),
    ]


def test_one_figure_per_metric_family_with_every_run(store, tmp_path):
    db, _ = store
    report = study_report(db, STUDY_XSS, directory=tmp_path / "figs")
    assert [f.name for f in report.figures] == ["01-loss"]  # train/loss and val/loss
    (figure,) = report.figures
    assert figure.png.is_file() and figure.svg.is_file()
    assert "log scale" in figure.caption
    svg = figure.svg.read_text()  # matplotlib notes each drawn text in a comment
    for label in ("fail=none, x=1.0 · train", "fail=nan, x=3.0 · val"):
        assert f"<!-- {label} -->" in svg


def test_dollar_signs_are_drawn_as_text_not_mathtext(tmp_path):
    study = "cost $b_{ $"  # as mathtext this is unbalanced, and matplotlib would raise
    fill(tmp_path / "store.sqlite", study=study)
    with RunStore(tmp_path / "store.sqlite") as db:
        assert write_study_report(db, study, tmp_path / "out").is_file()


def test_html_escapes_the_study_name_and_messages(store, tmp_path):
    db, _ = store
    page = render_report(study_report(db, STUDY_XSS, directory=tmp_path / "figs"))
    assert STUDY_XSS not in page
    assert html.escape(STUDY_XSS) in page
    assert "disk &lt;hiccup&gt;" in page
    assert "numerical_failure" in page and "infrastructure_failure" in page


def test_write_study_report_refuses_to_overwrite(store, tmp_path):
    db, _ = store
    path = write_study_report(db, STUDY_XSS, tmp_path / "out")
    assert path == tmp_path / "out" / "report.html" and path.is_file()
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="--out"):
        write_study_report(db, STUDY_XSS, tmp_path / "out")
    assert path.read_bytes() == before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "01-loss.png").write_bytes(b"mine")
    with pytest.raises(FileExistsError, match=r"01-loss\.png"):
        write_study_report(db, STUDY_XSS, tmp_path / "other")
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == ["01-loss.png"]


def test_unknown_study_lists_the_known_ones(store, tmp_path):
    db, _ = store
    with pytest.raises(ValueError, match=r"unknown study 'nope'.*alert"):
        study_report(db, "nope", directory=tmp_path)


def test_experiments_can_add_their_own_sections(store, tmp_path):
    from gaugelab.study.report.builder import Table

    db, _ = store
    extra = Table("Verdicts", ["twin", "verdict"], [["gauge", "breaks"]])
    report = study_report(db, STUDY_XSS, directory=tmp_path, tables=[extra], notes=["hello"])
    assert report.tables[-1] is extra and report.notes[-1] == "hello"


def test_metric_family_and_path_slug():
    assert metric_family("gauge/logit_distance") == ("logit_distance", "gauge")
    assert metric_family("gauge/qk_drift/L0H1") == ("qk_drift/L0H1", "gauge")
    assert metric_family("loss") == ("loss", "")
    assert path_slug("zoo-1") == "zoo-1"
    slug = path_slug("../<script>")
    assert "/" not in slug and "<" not in slug and not slug.startswith(".")
    assert path_slug("a/b") != path_slug("a_b")  # altered slugs carry a digest
