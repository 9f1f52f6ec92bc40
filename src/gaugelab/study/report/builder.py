"""One self-contained HTML report per study (Jinja2); its figures:
:mod:`gaugelab.study.report.figures`.

The module takes plain data: a :class:`StudyReport` holds the spec (a mapping, shown as pretty
JSON), run summaries, tables, saved figures, failures with their termination classes and notes.
A page opens with the results (notes as its summary, tables, figures), then failures and runs,
and ends with the spec in a collapsed ``<details>``.
:func:`render_report` turns it into one HTML page that needs nothing else: figures are embedded
as base64 PNG data URIs, the style is inline, there are no scripts, and a Content-Security-Policy
forbids every request except ``data:`` images. Every user-supplied string (study name, labels,
table cells, messages, the spec) is HTML-escaped by Jinja2's autoescaping; the template never
marks anything ``|safe``. Nothing is ever overwritten: :func:`write_report` raises
``FileExistsError``; a report's folder is made or refused by :mod:`gaugelab.study.report.folders`.

The figure functions (:func:`~gaugelab.study.report.figures.save_figure`,
:func:`~gaugelab.study.report.figures.plot_curves`,
:func:`~gaugelab.study.report.figures.plot_scatter`,
:func:`~gaugelab.study.report.figures.palette`,
:class:`~gaugelab.study.report.figures.FigureArtifact`) are
re-exported here, so a report's builder imports one module.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2  # only a report needs it; the CLI imports this module for Table

from gaugelab.errors import naming
from gaugelab.study.report.figures import (
    PNG_DPI,
    PNG_SIGNATURE,
    FigureArtifact,
    palette,
    plot_curves,
    plot_scatter,
    save_figure,
    step_axis,
)

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "PNG_DPI",
    "PNG_SIGNATURE",
    "Failure",
    "FigureArtifact",
    "RunSummary",
    "StudyReport",
    "Table",
    "format_number",
    "palette",
    "plot_curves",
    "plot_scatter",
    "render_report",
    "save_figure",
    "seeds_phrase",
    "sort_ranks",
    "step_axis",
    "write_report",
    "write_result_report",
]

_TEMPLATE = "report.html.j2"

Cell = str | float | int | None


@dataclass(frozen=True)
class RunSummary:
    """One run of the study, as the report shows it.

    Attributes:
        identity: the run's identity (e.g. its manifest hash).
        status: its termination class (``"completed"``, ``"numerical_failure"``, …).
        label: a human-readable label (optimizer, seed, twin, …).
        metrics: key metrics by name; numbers are shown to 3 significant digits.
    """

    identity: str
    status: str
    label: str = ""
    metrics: Mapping[str, Cell] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    """A titled table; every row has one cell per column (strings or numbers, ``None`` = —).

    Attributes:
        title, columns, rows, caption: what is shown.
        sortable: in the report, every column header gets ▲ / ▼ controls that reorder the rows
            by that column (numbers by value, text alphabetically, ``None`` and NaN last either
            way) — with CSS alone, as the page runs no scripts (:func:`sort_ranks`).
    """

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    caption: str = ""
    sortable: bool = False

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"Table {self.title!r}: row {i} has {len(row)} cells; "
                    f"expected {len(self.columns)} (one per column)"
                )


@dataclass(frozen=True)
class Failure:
    """A failed run: its identity, termination class (e.g. ``numerical_failure``) and message."""

    identity: str
    termination: str
    message: str


@dataclass(frozen=True)
class StudyReport:
    """Everything one study report shows. Plain data; every string is escaped when rendered.

    Attributes:
        name: the study's name (user-supplied).
        spec: the study's spec as a JSON-able mapping, shown pretty-printed (keys sorted;
            values JSON cannot encode are shown with ``str``).
        runs, tables, figures, failures, notes: the report's sections. The page opens with
            the results — the notes (verdicts first) as its summary, the tables, the figures
            — then the failures and the runs, and ends with the spec, collapsed.
        created_at: when the report (or study) was made; omitted if ``None``.
        study: the page reports a study's runs (default). ``False`` for a report that reads
            stored results and runs nothing (inspecting, comparing or composing adapters):
            headed "Report", without the runs and failures sections or their counts.
    """

    name: str
    spec: Mapping[str, Any]
    runs: Sequence[RunSummary] = ()
    tables: Sequence[Table] = ()
    figures: Sequence[FigureArtifact] = ()
    failures: Sequence[Failure] = ()
    notes: Sequence[str] = ()
    created_at: datetime | str | None = None
    study: bool = True


def seeds_phrase(seeds: Sequence[int]) -> str:
    """``seed 0`` or ``seeds 0, 1, 2``: the seeds a table's numbers are taken over, for its
    caption."""
    return f"seed{'' if len(seeds) == 1 else 's'} {', '.join(map(str, seeds))}"


def format_number(value: Any) -> str:
    """Format a table cell: reals to 3 significant digits, scientific below 1e-3; else ``str``.

    ``None`` is shown as an em dash, NaN as ``nan`` and infinities as ``inf`` / ``-inf``;
    booleans and strings are shown as they are. The result is plain text (escaped later).
    """
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.2e}"
    return f"{x:.3g}"


def _sort_key(cell: Cell) -> tuple:
    """Numbers first by value, then text (case-folded), then ``None`` and NaN."""
    if isinstance(cell, numbers.Real) and not isinstance(cell, bool):
        x = float(cell)
        return (2,) if math.isnan(x) else (0, x)
    return (2,) if cell is None else (1, str(cell).casefold())


def sort_ranks(table: Table) -> list[str]:
    """Each row's place in every sort order of a sortable table, as its inline style.

    Row ``i`` gets ``--a<c>: r; --d<c>: s`` for every column ``c``: its 0-based rank when the
    rows are sorted by that column ascending (``r``) and descending (``s``), ties kept in table
    order, empty cells last in both. The page's CSS moves the rows (``order`` of a CSS grid)
    by the ranks of the checked header control; no script runs.

    Returns:
        ``[rows]`` style strings (digits, ``-``, ``:``, ``;`` only: nothing to escape).
    """
    ranks = [[] for _ in table.rows]
    for c in range(len(table.columns)):
        keys = [_sort_key(row[c]) for row in table.rows]
        up = sorted(range(len(keys)), key=lambda i: keys[i])
        empty = [i for i in up if keys[i][0] == 2]
        down = [i for i in reversed(up) if keys[i][0] != 2] + empty
        for order, name in ((up, "a"), (down, "d")):
            for rank, i in enumerate(order):
                ranks[i].append(f"--{name}{c}:{rank}")
    return [";".join(r) for r in ranks]


@functools.cache
def _environment() -> jinja2.Environment:

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gaugelab.study.report", "templates"),
        autoescape=True,  # every template here is HTML: escape every interpolated value
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = format_number
    return env


def _png_data_uri(artifact: FigureArtifact) -> str:
    data = Path(artifact.png).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.png_sha256:
        raise ValueError(
            f"render_report: figure {artifact.name!r}: {artifact.png} has sha256 {digest}, "
            f"but the artifact records {artifact.png_sha256}; the file changed after saving"
        )
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"render_report: figure {artifact.name!r}: {artifact.png} is not a PNG")
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def render_report(report: StudyReport) -> str:
    """Render ``report`` as one self-contained HTML page.

    Figures are read from their PNG files, checked against the recorded sha256, and embedded
    as base64 data URIs; the SVG files are referenced by name only (not loaded).

    Returns:
        The HTML document as a string (UTF-8 when written).

    Raises:
        FileNotFoundError: a figure's PNG file is missing.
        ValueError: a figure's PNG no longer matches its recorded sha256.
    """
    metric_names: dict[str, None] = {}
    for run in report.runs:
        metric_names.update(dict.fromkeys(run.metrics))
    created = report.created_at
    if isinstance(created, datetime):
        created = created.isoformat(timespec="seconds")
    return (
        _environment()
        .get_template(_TEMPLATE)
        .render(
            report=report,
            created_at=created,
            spec_json=json.dumps(
                report.spec, indent=2, sort_keys=True, ensure_ascii=False, default=str
            ),
            metric_names=list(metric_names),
            ranks=[sort_ranks(t) if t.sortable else [] for t in report.tables],
            figures=[(artifact, _png_data_uri(artifact)) for artifact in report.figures],
        )
    )


def write_report(report: StudyReport, directory: str | Path, *, overwrite: bool = False) -> Path:
    """Render ``report`` and write it to ``directory/report.html`` (UTF-8).

    Args:
        report: the study report.
        directory: folder to write into; created if missing.
        overwrite: replace an existing ``report.html`` (default: refuse).

    Returns:
        The path of the written file.

    Raises:
        FileExistsError: ``report.html`` exists and ``overwrite`` is false.
    """
    html = render_report(report)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.html"
    try:
        with naming(path), open(path, "w" if overwrite else "x", encoding="utf-8") as handle:
            handle.write(html)
    except FileExistsError:
        raise FileExistsError(
            f"write_report: {path} already exists; refusing to overwrite (pass overwrite=True)"
        ) from None
    return path


def write_result_report(
    result: Any,
    directory: str | Path,
    *,
    runs: Sequence[RunSummary],
    tables: Sequence[Table],
    figures: Sequence[FigureArtifact] = (),
    notes: Sequence[str] = (),
    failures: Sequence[Failure] | None = None,
    spec: Mapping[str, Any] | None = None,
    created_at: datetime | str | None = None,
) -> Path:
    """The report of an experiment's typed result, written to ``directory/report.html``.

    Args:
        result: the result; its ``study`` names the report, its ``spec.spec_dict()`` is the
            spec shown (unless ``spec`` is given), and each of its ``failures`` (with
            ``identity``, ``termination``, ``message``) is a failure line (unless ``failures``
            is given).
        directory, runs, tables, figures, notes, created_at: as :class:`StudyReport` and
            :func:`write_report`.
        failures, spec: what to show instead of the result's own.

    Returns:
        The path of the written file.

    Raises:
        FileExistsError: ``report.html`` exists.
    """
    if failures is None:
        failures = [Failure(f.identity, f.termination, f.message) for f in result.failures]
    report = StudyReport(
        name=result.study,
        spec=result.spec.spec_dict() if spec is None else spec,
        runs=runs,
        tables=tables,
        figures=figures,
        failures=failures,
        notes=notes,
        created_at=created_at,
    )
    return write_report(report, directory)
