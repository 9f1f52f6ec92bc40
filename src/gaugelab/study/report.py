"""Figures (PNG + SVG with matplotlib) and one self-contained HTML report per study (Jinja2).

The module takes plain data: a :class:`StudyReport` holds the spec (a mapping, shown as pretty
JSON), run summaries, tables, saved figures, failures with their termination classes and notes.
A page opens with the results (notes as its summary, tables, figures), then failures and runs,
and ends with the spec in a collapsed ``<details>``.
:func:`render_report` turns it into one HTML page that needs nothing else: figures are embedded
as base64 PNG data URIs, the style is inline, there are no scripts, and a Content-Security-Policy
forbids every request except ``data:`` images. Every user-supplied string (study name, labels,
table cells, messages, the spec) is HTML-escaped by Jinja2's autoescaping; the template never
marks anything ``|safe``.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot's
global state, so nothing here needs a display or changes the process-wide backend. Nothing is
ever overwritten: :func:`save_figure` and :func:`write_report` raise ``FileExistsError``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import itertools
import json
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "Failure",
    "FigureArtifact",
    "RunSummary",
    "StudyReport",
    "Table",
    "format_number",
    "new_report_dir",
    "palette",
    "path_slug",
    "plot_curves",
    "plot_scatter",
    "render_report",
    "save_figure",
    "write_report",
]

PNG_DPI = 150
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_FIGURE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
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
    """A titled table; every row has one cell per column (strings or numbers, ``None`` = —)."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    caption: str = ""

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"Table {self.title!r}: row {i} has {len(row)} cells; "
                    f"expected {len(self.columns)} (one per column)"
                )


@dataclass(frozen=True)
class FigureArtifact:
    """A figure written by :func:`save_figure`: its PNG and SVG files and their sha256 digests."""

    name: str
    png: Path
    svg: Path
    png_sha256: str
    svg_sha256: str
    caption: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "png", Path(self.png))
        object.__setattr__(self, "svg", Path(self.svg))


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
    """

    name: str
    spec: Mapping[str, Any]
    runs: Sequence[RunSummary] = ()
    tables: Sequence[Table] = ()
    figures: Sequence[FigureArtifact] = ()
    failures: Sequence[Failure] = ()
    notes: Sequence[str] = ()
    created_at: datetime | str | None = None


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


def save_figure(
    fig: Figure, directory: str | Path, name: str, *, caption: str = ""
) -> FigureArtifact:
    """Write ``fig`` as ``name.png`` (150 dpi) and ``name.svg`` into ``directory``.

    Both files are rendered in memory first and then created exclusively, so an existing file
    is never touched. The SVG carries no date and a fixed id salt, so the same figure gives the
    same bytes (and sha256) on the same machine.

    Args:
        fig: a matplotlib ``Figure`` (from :func:`plot_curves`, or ``matplotlib.figure.Figure``).
        directory: folder to write into; created if missing.
        name: file stem: letters, digits, ``.``, ``_``, ``-``; not starting with ``.``/``-``.
        caption: shown under the figure in the report.

    Returns:
        The :class:`FigureArtifact` with both paths and their sha256 hex digests.

    Raises:
        ValueError: ``name`` is not a plain file stem.
        FileExistsError: ``name.png`` or ``name.svg`` already exists (named in the message).
    """
    if not isinstance(name, str) or not _FIGURE_NAME.fullmatch(name):
        raise ValueError(
            f"save_figure: name {name!r} is not a plain file stem; allowed: letters, digits, "
            "'.', '_', '-', starting with a letter or digit"
        )
    directory = Path(directory)
    png_path, svg_path = directory / f"{name}.png", directory / f"{name}.svg"
    for path in (png_path, svg_path):
        if path.exists():
            raise FileExistsError(f"save_figure: {path} already exists; refusing to overwrite")
    png_bytes, svg_bytes = io.BytesIO(), io.BytesIO()
    fig.savefig(png_bytes, format="png", dpi=PNG_DPI)
    with rc_context({"svg.hashsalt": "gaugelab"}):
        fig.savefig(svg_bytes, format="svg", metadata={"Date": None})
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        for path, data in ((png_path, png_bytes), (svg_path, svg_bytes)):
            try:
                with open(path, "xb") as handle:
                    written.append(path)
                    handle.write(data.getvalue())
            except FileExistsError:
                raise FileExistsError(
                    f"save_figure: {path} already exists; refusing to overwrite"
                ) from None
    except BaseException:
        for path in written:  # only files this call created
            path.unlink(missing_ok=True)
        raise
    return FigureArtifact(
        name=name,
        png=png_path,
        svg=svg_path,
        png_sha256=hashlib.sha256(png_bytes.getvalue()).hexdigest(),
        svg_sha256=hashlib.sha256(svg_bytes.getvalue()).hexdigest(),
        caption=caption,
    )


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gaugelab.study", "templates"),
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
            figures=[(artifact, _png_data_uri(artifact)) for artifact in report.figures],
        )
    )


def path_slug(text: str, *, limit: int = 60) -> str:
    """A file-system-safe stem for ``text``: letters, digits, ``.``, ``_``, ``-`` only.

    Anything else becomes ``_``; the result starts with a letter or digit (so it is never
    ``.``, ``..``, absolute or hidden). When the slug differs from ``text`` (or is cut at
    ``limit`` characters), 8 hex characters of its sha256 are appended, so distinct names never
    share a slug: ``"zoo-1"`` stays ``"zoo-1"``, ``"../../x"`` becomes ``"x-<digest>"``.
    """
    slug = _UNSAFE.sub("_", text).lstrip("._-")[:limit]
    if slug != text or not slug:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
        slug = f"{slug}-{digest}" if slug else digest
    return slug


def new_report_dir(parent: str | Path, *, study: str | None = None) -> Path:
    """Create and return a new, empty folder ``parent/<UTC time>`` (e.g. ``20261130T011500Z``),
    or ``parent/<path_slug(study)>/<UTC time>`` when ``study`` is given.

    The study name (user-supplied) only ever becomes one path component through
    :func:`path_slug`, so ``study="../../x"`` or ``study="/abs/path"`` stays inside ``parent``.
    Two reports within the same second get ``…Z-2``, ``…Z-3``: a folder is never reused, so
    nothing already written is overwritten.
    """
    parent = Path(parent)
    if study is not None:
        parent = parent / path_slug(study)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in itertools.count(1):
        folder = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise AssertionError("unreachable")


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
        with open(path, "w" if overwrite else "x", encoding="utf-8") as handle:
            handle.write(html)
    except FileExistsError:
        raise FileExistsError(
            f"write_report: {path} already exists; refusing to overwrite (pass overwrite=True)"
        ) from None
    return path


def _new_figure() -> tuple[Figure, Any]:
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    FigureCanvasAgg(fig)  # attach a display-free canvas; pyplot's global state is never touched
    return fig, fig.add_subplot()


def plot_curves(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logy: bool = False,
    hlines: Mapping[str, float] | None = None,
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """One line per series against step (e.g. logit distance per twin, log scale).

    Args:
        series: label → ``(steps, values)``, two 1-D sequences/arrays of equal length ``[T]``.
        title, xlabel, ylabel: axis text.
        logy: log-scale y axis; non-positive values are masked (not plotted).
        hlines: label → y of a dashed horizontal reference line (e.g. the noise floor).
        colors: label (of a series or an hline) → a matplotlib colour, so one thing keeps its
            colour across every figure of a report (see :func:`palette`); labels not in it
            take the default colour cycle in order.

    Returns:
        A ``matplotlib.figure.Figure`` on an Agg canvas (for :func:`save_figure`).

    Raises:
        ValueError: ``series`` is empty, or a series' steps and values are not 1-D of one length.
    """
    if not series:
        raise ValueError("plot_curves: series is empty; pass at least one label → (steps, values)")
    fig, ax = _new_figure()
    colors = colors or {}
    cycle = (f"C{i % 10}" for i in itertools.count())
    for label, pair in series.items():
        steps, values = (np.asarray(a, dtype=np.float64) for a in pair)
        if steps.ndim != 1 or steps.shape != values.shape:
            raise ValueError(
                f"plot_curves: series {label!r} has steps of shape {steps.shape} and values of "
                f"shape {values.shape}; expected two 1-D arrays of one length"
            )
        if logy:
            values = np.where(values > 0, values, np.nan)
        ax.plot(
            steps, values, label=str(label), linewidth=1.4, color=colors.get(label) or next(cycle)
        )
    for label, y in (hlines or {}).items():
        ax.axhline(
            float(y),
            color=colors.get(label) or next(cycle),
            linestyle="--",
            linewidth=1.0,
            label=str(label),
        )
    if logy:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def plot_scatter(
    points: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    color_by: str | None = None,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    colors: Mapping[str, str] | None = None,
    markers: Mapping[str, str] | None = None,
    legend_outside: bool = False,
) -> Figure:
    """Scatter ``point[x]`` against ``point[y]``, one colour per distinct ``point[color_by]``.

    Args:
        points: records (e.g. one per run) mapping names to values; ``x`` and ``y`` must be real.
        x, y: the keys plotted (also the axis labels).
        color_by: key whose values (taken as categories, in order of first appearance) group
            the points by colour, with a legend; ``None`` plots one group.
        title: figure title.
        logx, logy: log-scale axes.
        colors: group → matplotlib colour (default: the colour cycle in order).
        markers: group → matplotlib marker (default ``"o"``).
        legend_outside: put the legend right of the axes, where it covers no point (for
            many groups; the legend then names every group instead of labels on the points).

    Returns:
        A ``matplotlib.figure.Figure`` on an Agg canvas.

    Raises:
        ValueError: ``points`` is empty, or a point lacks ``x``, ``y`` or ``color_by``.
    """
    if not points:
        raise ValueError("plot_scatter: points is empty")
    groups: dict[str, tuple[list[float], list[float]]] = {}
    for i, point in enumerate(points):
        keys = (x, y) if color_by is None else (x, y, color_by)
        missing = [k for k in keys if k not in point]
        if missing:
            raise ValueError(f"plot_scatter: point {i} lacks {missing}; it has {sorted(point)}")
        group = "" if color_by is None else str(point[color_by])
        xs, ys = groups.setdefault(group, ([], []))
        xs.append(float(point[x]))
        ys.append(float(point[y]))
    fig, ax = _new_figure()
    for i, (group, (xs, ys)) in enumerate(groups.items()):
        color = (colors or {}).get(group) or f"C{i % 10}"
        marker = (markers or {}).get(group, "o")
        ax.scatter(xs, ys, s=18, label=group or None, color=color, marker=marker)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=x, ylabel=y)
    ax.grid(True, alpha=0.3)
    if color_by is not None:
        where = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if legend_outside else {}
        ax.legend(title=color_by, fontsize="small", **where)
    return fig


def palette(labels: Sequence[str]) -> dict[str, str]:
    """One distinct colour per label, in order: matplotlib's ``tab10`` for the first ten, then
    ``tab20``'s light shades. Pass the same mapping to every figure of a report (``colors=``)
    so that a rule, optimizer or arm has one colour throughout.

    Returns:
        label → hex colour (``"#1f77b4"``, …); a repeated label keeps its first colour.
    """
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    shades = [to_hex(c) for c in colormaps["tab10"].colors]
    shades += [to_hex(c) for c in colormaps["tab20"].colors[1::2]]
    out: dict[str, str] = {}
    for label in labels:
        if label not in out:
            out[label] = shades[len(out) % len(shades)]
    return out
