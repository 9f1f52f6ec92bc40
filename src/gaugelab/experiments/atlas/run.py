"""The atlas: every optimizer a module exports, checked under each group on each problem.

For each source module (``torch.optim``, ``pytorch_optimizer``, ``heavyball`` or your own) the
atlas finds its optimizer classes (:func:`~gaugelab.experiments.atlas.sources.discover_optimizers`)
and runs :func:`gaugelab.equivariance.check_equivariance` on each, for each group × problem —
every check one run in the run store, executed by :func:`gaugelab.study.run_sweep` (this
process, worker processes, or Ray), each under a time limit, every way it ends recorded
(:mod:`~gaugelab.experiments.atlas.checks`). A rerun checks only what is missing, whose code's
version changed, or what timed out.

The experiment surface (see :mod:`gaugelab.experiments`): :class:`AtlasSpec`, :func:`plan`,
:func:`collect`, :func:`tables`, :func:`report`, and :func:`run_atlas` for all of it;
:func:`atlas_spec` builds the spec from sources, :func:`markdown` writes docs/atlas.md's table.

Source: singh2026lossbasis, Def. 3.1 and §6; docs/commands/atlas.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gaugelab.experiments.atlas.checks import check_row, run_check, time_limit
from gaugelab.experiments.atlas.figures import distance_figure
from gaugelab.experiments.atlas.results import VERDICT_ORDER, AtlasResult, AtlasRow, collect
from gaugelab.experiments.atlas.sources import (
    EXTRA,
    KNOWN_SOURCES,
    discover_optimizers,
    module_version,
)
from gaugelab.experiments.atlas.spec import (
    DEFAULT_GROUPS,
    DEFAULT_PROBLEMS,
    DEFAULT_TIMEOUT,
    AtlasSpec,
    Candidate,
)
from gaugelab.experiments.atlas.views import (
    checks_table,
    markdown,
    matrix_table,
    notes,
    reasons_table,
    report,
    tables,
)
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.sweep import Sweep

__all__ = [
    "DEFAULT_GROUPS",
    "DEFAULT_PROBLEMS",
    "DEFAULT_TIMEOUT",
    "EXPERIMENT",
    "EXTRA",
    "KNOWN_SOURCES",
    "VERDICT_ORDER",
    "AtlasResult",
    "AtlasRow",
    "AtlasSpec",
    "Candidate",
    "atlas_spec",
    "check_row",
    "checks_table",
    "collect",
    "discover_optimizers",
    "distance_figure",
    "markdown",
    "matrix_table",
    "module_version",
    "notes",
    "plan",
    "reasons_table",
    "report",
    "run_atlas",
    "run_check",
    "tables",
    "time_limit",
]


def atlas_spec(
    sources: Sequence[str] = ("torch.optim",), *, only: Sequence[str] = (), **fields: Any
) -> AtlasSpec:
    """The atlas of ``sources``' optimizers.

    Args:
        sources: module names, each searched by :func:`discover_optimizers`.
        only: keep only these optimizers: exported names (``Adam``: every source's) or
            targets (``torch.optim:Adam``); empty: all of them.
        **fields: further :class:`AtlasSpec` fields (``groups``, ``problems``, ``steps``,
            ``draws``, ``seed``, ``dtype``, ``timeout``).

    Raises:
        ValueError: no source, a repeated one, a source that is not installed (naming the
            extra ``gaugelab[atlas]``) or fails to import; a name of ``only`` that no source
            exports (the message lists what they do); no optimizer left; a field the spec
            refuses.
    """
    if not sources or len(set(sources)) != len(sources):
        raise ValueError(
            f"atlas_spec: source={','.join(sources)!r}; allowed: distinct module names"
        )
    found = [c for source in sources for c in discover_optimizers(source)]
    if only:
        chosen = [c for c in found if c.name in only or c.target in only]
        picked = {c.name for c in chosen} | {c.target for c in chosen}
        unknown = [n for n in only if n not in picked]
        if unknown:
            names = ", ".join(c.name for c in found) or "none"
            raise ValueError(
                f"atlas_spec: only={','.join(unknown)}: not exported by "
                f"{', '.join(sources)}; allowed: {names}"
            )
        found = chosen
    if not found:
        raise ValueError(
            f"atlas_spec: source={','.join(sources)!r} exports no torch.optim.Optimizer "
            "subclass; allowed: a module that does"
        )
    return AtlasSpec(optimizers=tuple(found), **fields)


def plan(spec: AtlasSpec, study: str | None = None) -> Sweep:
    """One run per candidate × group × problem, in the study ``atlas-<identity[:12]>``
    unless ``study`` is given (the time limit is not part of the name: a rerun with another
    ``--timeout`` is the same study)."""
    variants = [
        {"optimizers": [c.model_dump()], "groups": [g], "problems": [p]}
        for c in spec.optimizers
        for g in spec.groups
        for p in spec.problems
    ]
    return Sweep(spec, variants=variants, name=study or f"atlas-{spec.identity()[:12]}")


def run_atlas(
    spec: AtlasSpec | None = None,
    *,
    study: str | None = None,
    sweep: Sweep | None = None,
    **options: Any,
) -> StudyOutcome[AtlasResult]:
    """Check every candidate × group × problem not checked yet; collect and report.

    Args:
        spec: the atlas (default: ``atlas_spec()``, torch.optim's optimizers).
        study: the study name (default ``atlas-<identity[:12]>``).
        sweep: the plan, when the caller built it already; default: :func:`plan`.
        **options: how to run it, as :func:`gaugelab.study.experiment.run_experiment`
            (``store``, ``executor``, ``max_workers`` (default 1: in this process),
            ``threads`` (default 1), ``address``, ``progress``, ``step_progress``, ``phase``,
            ``report_dir``, ``write_report``).

    Returns:
        The :class:`~gaugelab.study.experiment.StudyOutcome` of an :class:`AtlasResult`.

    Raises:
        ValueError: a bad executor option, or a study name already used by another spec.
        FileExistsError: ``report_dir`` already holds a report (checked before any run).

    Source: docs/commands/atlas.md.
    """
    spec = spec or atlas_spec()
    sweep = sweep or plan(spec, study)
    return run_experiment(sweep, collect, report, **options)


EXPERIMENT: Experiment[AtlasSpec, AtlasResult] = Experiment(
    AtlasSpec.kind, AtlasSpec, AtlasResult, plan, collect, tables, report, run_atlas
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
