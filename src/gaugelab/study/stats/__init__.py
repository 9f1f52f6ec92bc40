"""Statistics of matched studies: paired differences, envelopes, cost ratios, Pareto and feasible
sets.

* ``compare`` — Comparison statistics for matched studies, one module per result,
* ``envelope`` — The observed upper envelope over a finite cost grid and the iso-quality cost
  ratio.
* ``paired`` — Paired differences over the seeds two matched arms share.
* ``pareto`` — Pareto front, constraint-feasible selection, and select-then-report.

The public names of ``compare`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "compare")
