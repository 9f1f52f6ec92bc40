"""One report builder: the self-contained HTML report, its tables and figures, and the generic
study report.

* ``builder`` — One self-contained HTML report per study (Jinja2); its figures:
  :mod:`gaugelab.study.report.figures`.
* ``figures`` — Figures for study reports: matplotlib line and scatter plots, one palette, saved as
  PNG + SVG.
* ``summary`` — A generic study report built from the run store: spec, runs, final metrics, curves,
  failures.

The public names of ``builder`` are re-exported here (imported on first use).
"""

from gaugelab._lazy import lazy_exports

_EXPORTS = {
    "PNG_DPI": "builder",
    "PNG_SIGNATURE": "builder",
    "Failure": "builder",
    "FigureArtifact": "builder",
    "RunSummary": "builder",
    "StudyReport": "builder",
    "Table": "builder",
    "format_number": "builder",
    "new_report_dir": "builder",
    "palette": "builder",
    "path_slug": "builder",
    "plot_curves": "builder",
    "plot_scatter": "builder",
    "render_report": "builder",
    "save_figure": "builder",
    "seeds_phrase": "builder",
    "step_axis": "builder",
    "write_report": "builder",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
