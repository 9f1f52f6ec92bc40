"""A generated report opens in headless Chromium without errors, broken images or requests.

Needs Debian's ``chromium`` at /usr/bin/chromium and the ``playwright`` Python package (its
bundled driver only; no ``playwright install``). ``make test`` installs both. If either is
missing this test fails with what to install: it never skips, so CI cannot pass without it.
"""

from pathlib import Path

import numpy as np
import pytest

from gaugelab.study.report.builder import (
    PNG_SIGNATURE,
    Failure,
    RunSummary,
    StudyReport,
    Table,
    plot_curves,
    save_figure,
    write_report,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STUDY_XSS = "<script>alert(1)</script>"
LABEL_XSS = '"><img src=x onerror=alert(1)>'


def _sync_playwright():
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} not found: install Debian's chromium (`apt-get install -y chromium`); "
            "`make test` installs it"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        pytest.fail(
            f"playwright is not importable ({error}): `pip install playwright` into .venv "
            "(no `playwright install`; the browser is Debian's chromium); `make test` installs it"
        )
    return sync_playwright


def _write_report(directory: Path) -> Path:
    steps = np.arange(200)
    fig = plot_curves(
        {
            "gauge": (steps, 1e-12 * 1.15**steps),
            "identity": (steps, np.zeros(200)),
            "noise": (steps, 1e-9 * 1.08**steps),
        },
        title="logit distance per twin",
        xlabel="step",
        ylabel="relative Frobenius distance",
        logy=True,
        hlines={"noise floor": 1e-6},
    )
    report = StudyReport(
        name=STUDY_XSS,
        spec={"optimizer": "adam", "lr": 0.03, "note": STUDY_XSS},
        runs=[RunSummary("a1b2c3", "completed", LABEL_XSS, {"max distance": 3.2e-7})],
        tables=[Table("verdicts", ["optimizer", "verdict"], [["adam", LABEL_XSS]])],
        figures=[save_figure(fig, directory, "twins", caption=LABEL_XSS)],
        failures=[Failure("d4e5f6", "numerical_failure", LABEL_XSS)],
        notes=[STUDY_XSS],
    )
    return write_report(report, directory)


def test_report_opens_in_chromium_without_errors_or_broken_images(tmp_path):
    sync_playwright = _sync_playwright()
    path = _write_report(tmp_path)
    screenshot = tmp_path / "report-screenshot.png"
    errors: list[str] = []
    dialogs: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri(), wait_until="load", timeout=15_000)
            images = page.eval_on_selector_all(
                "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.src.slice(0, 22)])"
            )
            title = page.title()
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()

    assert errors == [], f"console errors: {errors}"
    assert dialogs == [], f"a script ran (escaping failed): {dialogs}"
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []
    assert images, "the report has no <img>"
    broken = [img for img in images if not (img[0] and img[1] > 0)]
    assert broken == [], f"broken images: {broken}"
    assert all(src == "data:image/png;base64," for _, _, src in images)
    assert title == f"{STUDY_XSS} — gaugelab study report"  # shown as text, not run
    assert screenshot.read_bytes().startswith(PNG_SIGNATURE)


def test_a_sortable_table_reorders_its_rows_by_the_clicked_header_without_scripts(tmp_path):
    sync_playwright = _sync_playwright()
    rows = [["sgd", 2.0], ["adam", None], ["muon", 0.5], ["lion", 1e-3]]
    report = StudyReport(name="sorting", spec={}, tables=[
        Table("checks", ["optimizer", "ratio"], rows, sortable=True)])  # fmt: skip
    path = write_report(report, tmp_path)

    def shown(page) -> list[str]:  # the first column's cells, top to bottom on the screen
        cells = page.query_selector_all("table.sortable td:first-child")
        return [c.inner_text() for c in sorted(cells, key=lambda c: c.bounding_box()["y"])]

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            page = browser.new_page()
            page.goto(path.as_uri(), wait_until="load", timeout=15_000)
            seen = {"table order": shown(page)}
            for label in ("sort1-0a", "sort1-1d", "sort1-1a"):
                page.click(f"label[for={label}]")
                seen[label] = shown(page)
        finally:
            browser.close()
    assert seen == {
        "table order": ["sgd", "adam", "muon", "lion"],
        "sort1-0a": ["adam", "lion", "muon", "sgd"],
        "sort1-1d": ["sgd", "muon", "lion", "adam"],  # the empty cell last either way
        "sort1-1a": ["lion", "muon", "sgd", "adam"],
    }
