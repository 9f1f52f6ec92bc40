"""Tests for gaugelab.study.report.builder: escaping, embedding, the page's order, refusal to
overwrite
(the figures themselves: test_figures.py)."""

import base64
import html
import re
from dataclasses import replace
from datetime import UTC, datetime
from importlib import resources

import numpy as np
import pytest

from gaugelab.study.report.builder import (
    PNG_SIGNATURE,
    Failure,
    RunSummary,
    StudyReport,
    Table,
    format_number,
    plot_curves,
    render_report,
    save_figure,
    sort_ranks,
    write_report,
)
from gaugelab.study.report.folders import new_report_dir

STUDY_XSS = "<script>alert(1)</script>"
LABEL_XSS = '"><img src=x onerror=alert(1)>'


def _figure():
    return plot_curves({"gauge": ([0, 1, 2], [1e-3, 2e-3, 4e-3])}, title="logit distance",
                       xlabel="step", ylabel="relative Frobenius distance", logy=True)  # fmt: skip


@pytest.fixture(scope="module")
def twins_figure(tmp_path_factory):
    """One saved figure shared by the report tests (rendering it only reads it)."""
    return save_figure(_figure(), tmp_path_factory.mktemp("figures"), "twins", caption="per twin")


def _report(artifact, **overrides):
    fields = dict(
        name="zoo-study",
        spec={"optimizers": ["adam", "muon"], "lr": 0.03, "seed": 0},
        runs=[
            RunSummary("a1b2c3", "completed", "adam seed 0", {"loss": 0.0123, "steps": 100}),
            RunSummary("d4e5f6", "numerical_failure", "muon seed 0", {"loss": float("nan")}),
        ],
        tables=[
            Table(
                "final loss",
                ["optimizer", "loss"],
                [["adam", 0.0123], ["muon", None]],
                caption="median over seeds",
            )
        ],
        figures=[artifact],
        failures=[Failure("d4e5f6", "numerical_failure", "NonFiniteError: loss is nan at step 7")],
        notes=["the noise floor is the noise twin's distance"],
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    fields.update(overrides)
    return StudyReport(**fields)


def test_user_strings_are_escaped_in_the_html(twins_figure):
    failure = Failure(LABEL_XSS, "<b>numerical_failure</b>", "</pre><script>x()</script>")
    report = _report(
        replace(twins_figure, name=STUDY_XSS, caption=LABEL_XSS),
        name=STUDY_XSS,
        spec={"name": STUDY_XSS, "</script>": LABEL_XSS},
        runs=[RunSummary(LABEL_XSS, LABEL_XSS, LABEL_XSS, {LABEL_XSS: LABEL_XSS})],
        tables=[Table(STUDY_XSS, [LABEL_XSS], [[LABEL_XSS]], caption=STUDY_XSS)],
        failures=[failure],
        notes=[STUDY_XSS],
    )
    page = render_report(report)
    assert STUDY_XSS not in page
    assert LABEL_XSS not in page
    assert "<img src=x" not in page
    assert "<b>numerical_failure" not in page
    assert "<script" not in page.lower()  # the page has no scripts at all, user-made or not
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert f"<title>{html.escape(STUDY_XSS)} — gaugelab study report</title>" in page


def test_template_never_marks_values_safe():
    template = resources.files("gaugelab.study.report").joinpath("templates", "report.html.j2")
    assert "|safe" not in template.read_text().replace(" ", "")


def test_page_is_self_contained(twins_figure):
    page = render_report(_report(twins_figure))
    assert "default-src 'none'; img-src data:" in page  # CSP: no requests but data: images
    srcs = re.findall(r'(?:src|href)="([^"#]*)"', page)
    assert srcs and all(s.startswith("data:") for s in srcs)


def test_figures_are_embedded_as_png_data_uris(twins_figure):
    report = _report(twins_figure)
    page = render_report(report)
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(uris) == 1
    data = base64.b64decode(uris[0], validate=True)
    assert data.startswith(PNG_SIGNATURE)
    assert data == report.figures[0].png.read_bytes()
    assert report.figures[0].png_sha256 in page


def test_write_report_refuses_to_overwrite_unless_asked(tmp_path, twins_figure):
    report = _report(twins_figure)
    path = write_report(report, tmp_path / "out")
    assert path == tmp_path / "out" / "report.html"
    assert path.read_text(encoding="utf-8") == render_report(report)
    with pytest.raises(FileExistsError, match=r"report\.html"):
        write_report(report, tmp_path / "out")
    path.write_text("edited")
    assert write_report(report, tmp_path / "out", overwrite=True) == path
    assert path.read_text(encoding="utf-8") == render_report(report)


def test_render_refuses_a_figure_changed_after_saving(tmp_path):
    report = _report(save_figure(_figure(), tmp_path, "twins"))
    report.figures[0].png.write_bytes(PNG_SIGNATURE + b"tampered")
    with pytest.raises(ValueError, match="sha256"):
        render_report(report)


def test_tables_have_one_row_per_data_row(twins_figure):
    rows = [["adam", 0.5], ["muon", 0.25], ["sgd", 1.0]]
    page = render_report(_report(twins_figure, tables=[Table("t", ["optimizer", "loss"], rows)]))
    body = page.split('<table class="data">')[1].split("</table>")[0]
    assert body.count("<tr>") == 1 + len(rows)  # header + rows
    assert ">0.25</td>" in body


def test_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match="row 1 has 1 cells; expected 2"):
        Table("t", ["a", "b"], [[1, 2], [3]])


def test_runs_show_identity_status_label_and_metrics(twins_figure):
    page = render_report(_report(twins_figure))
    runs = page.split('<table class="runs">')[1].split("</table>")[0]
    for text in (
        "a1b2c3",
        "adam seed 0",
        "completed",
        "<th>loss</th>",
        "<th>steps</th>",
        ">0.0123</td>",
        ">100</td>",
        ">nan</td>",
        ">—</td>",
    ):
        assert text in runs


def test_failures_are_listed_with_their_termination_class(twins_figure):
    page = render_report(_report(twins_figure))
    failures = page.split('<table class="failures">')[1].split("</table>")[0]
    assert '<td class="termination">numerical_failure</td>' in failures
    assert "d4e5f6" in failures and "loss is nan at step 7" in failures


def test_empty_report_renders():
    page = render_report(StudyReport(name="empty", spec={}))
    assert "No runs." in page and "No failures." in page
    assert "<h1>Study: empty</h1>" in page and "0 runs ·" in page


def test_a_report_that_runs_nothing_has_no_runs_or_failures_to_count():
    page = render_report(StudyReport(name="inspect x", spec={}, study=False))
    assert "<h1>Report: inspect x</h1>" in page
    assert "0 runs" not in page and "0 failures" not in page and "0 figures" in page
    assert 'id="runs"' not in page and 'id="failures"' not in page and 'href="#runs"' not in page


def test_spec_is_pretty_json_with_sorted_keys(twins_figure):
    page = render_report(_report(twins_figure, spec={"b": 1, "a": {"c": [1, 2]}, "when": datetime}))
    assert "{\n  &#34;a&#34;: {\n    &#34;c&#34;: [\n" in page  # indent=2, keys sorted, escaped
    assert "&lt;class &#39;datetime.datetime&#39;&gt;" in page  # non-JSON values shown via str


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.012345, "0.0123"),
        (1234.5, "1.23e+03"),
        (3.0e-7, "3.00e-07"),  # scientific below 1e-3
        (0.0, "0"),
        (7, "7"),
        (True, "True"),
        (None, "—"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
        ("adam", "adam"),
        (np.float32(0.5), "0.5"),
        (np.int64(12), "12"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


def test_new_report_dirs_never_collide_within_a_second(tmp_path):
    folders = [new_report_dir(tmp_path / "reports" / "study") for _ in range(3)]
    assert len(set(folders)) == 3
    assert all(f.is_dir() and not any(f.iterdir()) for f in folders)
    assert re.fullmatch(r"\d{8}T\d{6}Z", folders[0].name)
    # the same second again gets -2, -3 (a slow machine may reach the next second instead)
    assert all(re.fullmatch(r"\d{8}T\d{6}Z(-[23])?", f.name) for f in folders)


@pytest.mark.parametrize("study", ["../../x", "/abs/path", "..", ".", "a/b", "~user", "zoo\x00"])
def test_a_study_name_is_one_safe_folder_inside_the_reports_parent(tmp_path, study):
    parent = tmp_path / "reports"
    folder = new_report_dir(parent, study=study)
    assert folder.parent.parent == parent and folder.resolve().is_relative_to(parent.resolve())
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", folder.parent.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]
    assert new_report_dir(parent, study="zoo-1").parent.name == "zoo-1"  # safe names stay


def test_the_page_opens_with_the_results_and_ends_with_the_spec_collapsed(twins_figure):
    page = render_report(_report(twins_figure))
    sections = ("summary", "tables", "figures", "failures", "runs", "spec")
    order = [page.index(f'<section id="{s}">') for s in sections]
    assert order == sorted(order)
    spec = page[order[-1] :]
    assert spec.index("<details>") < spec.index("&#34;optimizers&#34;") < spec.index("</details>")
    assert "<details open" not in page  # collapsed


def test_the_figure_functions_stay_importable_from_report():
    from gaugelab.study.report import builder as report
    from gaugelab.study.report import figures

    for name in figures.__all__:
        assert getattr(report, name) is getattr(figures, name), name
        assert name in report.__all__, name


@pytest.mark.parametrize(("seeds", "text"), [((0,), "seed 0"), ([0, 1, 2], "seeds 0, 1, 2")])
def test_seeds_phrase_takes_the_number_of_its_seeds(seeds, text):
    from gaugelab.study.report.builder import seeds_phrase

    assert seeds_phrase(seeds) == text


def test_a_sortable_table_carries_every_rows_rank_in_each_order_and_no_script(twins_figure):
    rows = [["sgd", 2.0], ["adam", None], ["Muon", 0.5], ["lion", float("nan")]]
    table = Table("checks", ["optimizer", "ratio"], rows, sortable=True)
    ranks = [dict(kv.split(":") for kv in style.split(";")) for style in sort_ranks(table)]
    # by name, case-folded: adam, lion, Muon, sgd; descending: sgd, Muon, lion, adam
    assert [r["--a0"] for r in ranks] == ["3", "0", "2", "1"]
    assert [r["--d0"] for r in ranks] == ["0", "3", "1", "2"]
    # by ratio: 0.5, 2.0, then the empty cells (None, NaN) last in both orders, in table order
    assert [r["--a1"] for r in ranks] == ["1", "2", "0", "3"]
    assert [r["--d1"] for r in ranks] == ["0", "2", "1", "3"]
    page = render_report(_report(twins_figure, tables=[table]))
    assert "<script" not in page.lower()
    assert '<table class="data sortable">' in page
    assert page.count('class="sort-key"') == 4  # ▲ and ▼ per column
    assert 'style="--a0:3;--d0:0;--a1:1;--d1:0"' in page
