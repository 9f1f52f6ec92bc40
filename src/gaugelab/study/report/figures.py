"""Figures for study reports: matplotlib line and scatter plots, one palette, saved as PNG + SVG.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot's
global state, so nothing here needs a display or changes the process-wide backend.
:func:`save_figure` writes a figure as ``name.png`` (150 dpi) and ``name.svg`` and returns a
:class:`FigureArtifact` with both files' sha256, which :mod:`gaugelab.study.report.builder` checks
when
it embeds the PNG in a page. Nothing is ever overwritten: :func:`save_figure` raises
``FileExistsError``.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gaugelab.errors import naming
from gaugelab.lazy import LazyModule

np = LazyModule("numpy")
_mpl = LazyModule("matplotlib")
_agg = LazyModule("matplotlib.backends.backend_agg")
_mpl_colors = LazyModule("matplotlib.colors")
_mpl_figure = LazyModule("matplotlib.figure")
_mpl_ticker = LazyModule("matplotlib.ticker")

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# numpy and matplotlib are imported by the functions that draw (a third of a second), so a
# module that only names FigureArtifact or PNG_DPI (the store, the CLI) does not pay for them.

__all__ = [
    "PNG_DPI",
    "PNG_SIGNATURE",
    "FigureArtifact",
    "palette",
    "plot_curves",
    "plot_scatter",
    "save_figure",
    "step_axis",
]

PNG_DPI = 150
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
"""The first eight bytes of every PNG file."""
_FIGURE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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
    engine = fig.get_layout_engine()
    if engine is not None:  # the SVG keeps the PNG's layout instead of computing it again
        fig.set_layout_engine("none")
    try:
        with _mpl.rc_context({"svg.hashsalt": "gaugelab"}):
            fig.savefig(svg_bytes, format="svg", metadata={"Date": None})
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        for path, data in ((png_path, png_bytes), (svg_path, svg_bytes)):
            try:
                with naming(path), open(path, "xb") as handle:
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


def _new_figure() -> tuple[Figure, Any]:

    fig = _mpl_figure.Figure(figsize=(6.4, 4.0), layout="constrained")
    # attach a display-free canvas; pyplot's global state is never touched
    _agg.FigureCanvasAgg(fig)
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
    shades = [_mpl_colors.to_hex(c) for c in _mpl.colormaps["tab10"].colors]
    shades += [_mpl_colors.to_hex(c) for c in _mpl.colormaps["tab20"].colors[1::2]]
    out: dict[str, str] = {}
    for label in labels:
        if label not in out:
            out[label] = shades[len(out) % len(shades)]
    return out


def step_axis(ax: Any, steps: list[int] | tuple[int, ...], *, log: bool = False) -> list[int]:
    """A step axis that reads as plain integers: symlog with a linear part up to 1 (step 0
    shown), or log (``log=True``, steps ≥ 1); major ticks at the given steps as integers,
    thinned so that neighbours stay apart (the last step always labelled), no minor ticks.
    Returns the labelled steps."""
    marks = sorted({int(s) for s in steps if s >= (1 if log else 0)})
    if log:
        ax.set_xscale("log")
    else:
        ax.set_xscale("symlog", linthresh=1, linscale=1)

    def where(step: int) -> float:  # the axis coordinate, up to an affine map
        return math.log10(step) if log else (step if step <= 1 else 1 + math.log10(step))

    ticks: list[int] = []
    if marks:
        gap = max(where(marks[-1]) - where(marks[0]), 1e-12) / 7
        for step in marks:
            if not ticks or where(step) - where(ticks[-1]) >= gap:
                ticks.append(step)
        if ticks[-1] != marks[-1]:  # the last step replaces the last tick too close to it
            if len(ticks) > 1:
                ticks[-1] = marks[-1]
            else:
                ticks.append(marks[-1])
    ax.xaxis.set_major_locator(_mpl_ticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(_mpl_ticker.FuncFormatter(lambda x, _: f"{x:.0f}"))
    ax.xaxis.set_minor_locator(_mpl_ticker.NullLocator())
    return ticks
