"""Intrinsic dimension (d90) on the digits: DID and SAID as a measured protocol.

The study (docs/commands/intrinsic-dim.md): for one problem — ``scratch`` (an MLP on all ten
of scikit-learn's bundled digits from its initialization, the Li et al. setting) or
``finetune`` (the MLP pretrained on digits 0–4 — a stored run of its own,
:class:`DigitsPretrainSpec` — adapted to 5–9 with a new head counted inside ``d``, the
Aghajanyan setting) — one method (DID or SAID) and one projection family, every full
fine-tuning reference (one per learning rate) and every ``(d, seed, lr)`` subspace trial is a
stored run of the harness (:func:`gaugelab.study.run_sweep`; ``executor="ray"`` scales it out).
:func:`collect` turns the stored records into the estimate of seed 003 §0x02J with every field
of §0x02K.

Surface: :class:`IntrinsicSpec`, :func:`plan` (:func:`plan_pretrain`), :func:`collect`,
:func:`tables`, :func:`report`, :func:`run_intrinsic_dim` for all of it, and
:func:`estimate_intrinsic_dimension`, the seed's pseudocode by name.

Source: seed 003 §0x02; li2018intrinsic; aghajanyan2021intrinsic.
"""

from __future__ import annotations

from typing import Any

from gaugelab.experiments.intrinsic.budget import check_budgets
from gaugelab.experiments.intrinsic.results import IntrinsicResult, collect, figure, report, tables
from gaugelab.experiments.intrinsic.spec import (
    PROBLEM_LABELS,
    STUDY_ONLY,
    DigitsPretrainSpec,
    IntrinsicSpec,
    quick_spec,
)
from gaugelab.lowrank.intrinsic.protocol import IntrinsicDimensionEstimate
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.sweep import Sweep

__all__ = [
    "EXPERIMENT",
    "PROBLEM_LABELS",
    "DigitsPretrainSpec",
    "IntrinsicResult",
    "IntrinsicSpec",
    "collect",
    "estimate_intrinsic_dimension",
    "figure",
    "plan",
    "plan_pretrain",
    "quick_spec",
    "report",
    "run_intrinsic_dim",
    "tables",
]


def _default(name: str) -> Any:
    value = IntrinsicSpec.model_fields[name].get_default(call_default_factory=True)
    return list(value) if isinstance(value, tuple) else value


def plan_pretrain(spec: DigitsPretrainSpec) -> Sweep:
    """The digits pretrain run alone, in the study ``intrinsic-pretrain-<identity[:12]>``."""
    return Sweep(spec, name=f"intrinsic-pretrain-{spec.identity()[:12]}")


def plan(spec: IntrinsicSpec, study: str | None = None) -> Sweep:
    """The study's runs: one full reference per ``full_lrs`` value, then one subspace trial per
    ``(d, seed, lr)`` (row-major in that order).

    Each run's spec resets what it does not read to the defaults (the threshold and aggregator,
    the other role's grid; ``pretrain`` unless ``finetune``), so a trial is the same stored run in
    every study that asks for it. The study is ``intrinsic-dim-<identity[:12]>`` unless given.

    Raises:
        ValueError: a ``d`` of the grid the problem cannot train (DID ``d > D``, SAID ``d < m``
            or ``d − m > D``; :func:`~gaugelab.experiments.intrinsic.budget.check_budgets`),
            before any run is planned.
    """
    check_budgets(spec)
    reset = {k: _default(k) for k in STUDY_ONLY}
    if spec.problem != "finetune":
        reset["pretrain"] = DigitsPretrainSpec().spec_dict()
    else:  # the body and its width come from the pretrain run
        reset.update(hidden=_default("hidden"), layers=_default("layers"))
    grid_defaults = {k: _default(k) for k in ("dims", "seeds", "lrs")}
    variants: list[dict[str, Any]] = []
    for lr in spec.full_lrs:  # the full reference does not depend on method or family
        variants.append(
            {
                **reset,
                **grid_defaults,
                "role": "full",
                "full_lrs": [lr],
                "method": _default("method"),
                "family": _default("family"),
                "normalization": _default("normalization"),
            }
        )
    for d in spec.dims:
        for seed in spec.seeds:
            for lr in spec.lrs:
                variants.append(
                    {
                        **reset,
                        "role": "subspace",
                        "dims": [d],
                        "seeds": [seed],
                        "lrs": [lr],
                        "full_lrs": _default("full_lrs"),
                    }
                )
    return Sweep(spec, variants=variants, name=study or f"intrinsic-dim-{spec.identity()[:12]}")


def run_intrinsic_dim(
    spec: IntrinsicSpec | None = None,
    *,
    study: str | None = None,
    sweep: Sweep | None = None,
    **options: Any,
) -> StudyOutcome[IntrinsicResult]:
    """Run the pretrain (``finetune`` only), then every reference and trial; collect, report.

    Args:
        spec: the study (default :class:`IntrinsicSpec()`; ``quick_spec()`` for seconds).
        study: the study name (default ``intrinsic-dim-<identity[:12]>``).
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: as :func:`gaugelab.study.experiment.run_experiment` (``store``,
            ``executor`` (``local`` or ``ray``), ``max_workers`` (default 1), ``threads``
            (default 1), ``address``, ``progress``, ``step_progress``, ``phase``, ``report_dir``,
            ``write_report``).

    Returns:
        The :class:`StudyOutcome`; ``outcome.result.estimate`` is the d90 estimate.

    Raises:
        ValueError: a bad executor option, a study name already used by another spec, or a
            ``d`` the problem cannot train (see :func:`plan`; nothing is run or stored).
        FileExistsError: ``report_dir`` already holds a report (checked before any run).

    Source: seed 003 §0x02J.
    """
    spec = spec or IntrinsicSpec()
    sweep = sweep or plan(spec, study)  # refuses an inadmissible grid before the pretrain runs
    first = plan_pretrain(spec.pretrain) if spec.problem == "finetune" else None
    return run_experiment(sweep, collect, report, first=first, **options)


def estimate_intrinsic_dimension(
    spec: IntrinsicSpec | None = None, **options: Any
) -> IntrinsicDimensionEstimate | None:
    """The seed's ``estimate_intrinsic_dimension`` (§0x02J) on the harness: the full reference,
    every ``(d, seed, hyperparameter)`` trial a stored run, the best evaluation score of trials,
    the declared aggregator and threshold, :func:`~gaugelab.lowrank.intrinsic.protocol.
    classify_grid_crossing` with censoring preserved.

    Args:
        spec, **options: as :func:`run_intrinsic_dim` (no report unless ``write_report=True``).

    Returns:
        The estimate, or ``None`` when no full reference completed.
    """
    options.setdefault("write_report", False)
    return run_intrinsic_dim(spec, **options).result.estimate


EXPERIMENT: Experiment[IntrinsicSpec, IntrinsicResult] = Experiment(
    IntrinsicSpec.kind, IntrinsicSpec, IntrinsicResult, plan, collect, tables, report,
    run_intrinsic_dim,
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
