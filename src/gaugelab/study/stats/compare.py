"""Comparison statistics for matched studies, one module per result, re-exported here.

Four separate results, each a small function of its definition:

* ``paired_differences`` (:mod:`gaugelab.study.stats.paired`) — per-seed differences over the seeds
  both arms share, their mean, a paired bootstrap interval whose resampling unit is the seed,
  and the descriptive range;
* ``upper_envelope`` and ``iso_quality_cost_ratio`` (:mod:`gaugelab.study.stats.envelope`) — the
  observed upper envelope over a finite cost grid and the iso-quality cost ratio
  ``C_A(q) / C_B(q)`` on its domain;
* ``pareto_front`` and ``feasible_selection`` (:mod:`gaugelab.study.stats.pareto`) — the
  non-dominated set and the constraint-feasible lexicographic choice, kept apart (neither calls
  the other);
* ``select_then_report`` (:mod:`gaugelab.study.stats.pareto`) — select on the validation split,
  then open the held-out report for the chosen candidate only.

Source: the chapter "Optimizer geometry and representation dependence", ftip-00JJ, ftip-00JP,
ftip-00KX, ftip-00L0, ftip-00LB, ftip-00LI, ftip-00LJ; the article "Low-Rank Theory", §0x0BI,
§0x0BK, §0x0BP–0x0BT, §0x0CF–0x0CG.
"""

from gaugelab.study.stats.envelope import (
    Envelope,
    EnvelopeValue,
    RatioResult,
    iso_quality_cost_ratio,
    upper_envelope,
)
from gaugelab.study.stats.paired import (
    PairedComparison,
    paired_cells,
    paired_columns,
    paired_differences,
)
from gaugelab.study.stats.pareto import (
    Direction,
    Selection,
    SelectionReport,
    feasible_selection,
    pareto_front,
    select_then_report,
)

__all__ = [
    "Direction",
    "Envelope",
    "EnvelopeValue",
    "PairedComparison",
    "RatioResult",
    "Selection",
    "SelectionReport",
    "feasible_selection",
    "iso_quality_cost_ratio",
    "paired_cells",
    "paired_columns",
    "paired_differences",
    "pareto_front",
    "select_then_report",
    "upper_envelope",
]
