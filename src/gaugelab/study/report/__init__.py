"""One report builder: the self-contained HTML report, its tables and figures, and the generic
study report.

* ``builder`` — One self-contained HTML report per study (Jinja2); its figures:
  :mod:`gaugelab.study.report.figures`.
* ``folders`` — Where a report is written: a new folder per report, named safely, and the refusal
  of a folder that already holds one.
* ``figures`` — Figures for study reports: matplotlib line and scatter plots, one palette, saved as
  PNG + SVG.
* ``summary`` — A generic study report built from the run store: spec, runs, final metrics, curves,
  failures.

The public names of ``builder`` and ``folders`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "builder", "folders")
