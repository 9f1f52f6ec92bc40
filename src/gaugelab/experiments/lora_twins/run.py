"""LoRA gauge twins: the twin triplet on LoRA fine-tuning of the character model.

A LoRA update ``s·B A`` carries the GL(r) gauge ``(B G, G⁻¹ A)`` exactly as ``U Vᵀ`` does
(seed 000), so the twin protocol that exposes Adam inside attention heads applies to adapters:
from one nonzero adapter state (the LoRA protocol's pretrained model, an adapter warmed up for a
few AdamW steps — at ``B = 0`` every twin is the base), the base adapter, its GL(r) gauge twin,
its scalar twin ``(c B, A/c)``, an identity twin and a noise twin are trained as one ensemble
by each optimizer of :data:`LORA_TWIN_OPTIMIZERS` and compared at every checkpoint (logit
distance on validation text, update distance, principal angles between the updates' subspaces);
the verdicts come from the shared triplet engine (:mod:`gaugelab.equivariance.twins`).

The experiment surface (see :mod:`gaugelab.experiments`): :class:`LoraTwinSpec`, :func:`plan`
(one run per optimizer), :func:`collect`, :func:`tables`, :func:`report`, and
:func:`run_lora_twins` for all of it at once (the pretrain run first, reused when stored).

Source: singh2026lossbasis, §6 (the twin triplet); seed 003 §0x08 (LoRA and scalar gauges,
learning-rate compensation); zhang2024riemannian (scaled-gd on LoRA factors);
docs/commands/lora-twins.md (the protocol).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from gaugelab.experiments.lora.run import PretrainSpec, plan_pretrain
from gaugelab.experiments.lora_twins.results import (
    LoraTwinRow,
    LoraTwinsResult,
    angle_line,
    collect,
    distance_figure,
    notes,
    report,
    tables,
)
from gaugelab.experiments.lora_twins.spec import (
    DEFAULT_LR,
    LORA_TWIN_OPTIMIZERS,
    TWIN_NAMES,
    LoraTwinSpec,
    quick_twin_spec,
)
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.sweep import Sweep

__all__ = [
    "DEFAULT_LR",
    "EXPERIMENT",
    "LORA_TWIN_OPTIMIZERS",
    "TWIN_NAMES",
    "LoraTwinRow",
    "LoraTwinSpec",
    "LoraTwinsResult",
    "PretrainSpec",
    "angle_line",
    "collect",
    "distance_figure",
    "notes",
    "plan",
    "quick_twin_spec",
    "report",
    "run_lora_twins",
    "tables",
]


def plan(
    spec: LoraTwinSpec | None = None,
    optimizers: Sequence[str] = LORA_TWIN_OPTIMIZERS,
    *,
    study: str | None = None,
) -> Sweep:
    """One twin run per optimizer around ``spec`` (its ``optimizer`` field replaced, and its
    ``lr`` set to ``spec.lr`` or, when that is ``None``, the optimizer's :data:`DEFAULT_LR`, so
    every run's identity names its rate).

    The study is named ``lora-twins-<10 hex of a digest of the spec's identity and the
    optimizers>`` unless ``study`` is given, so the same request always lands in the same
    study. The pretrain run is not part of it (:func:`run_lora_twins` runs it first).

    Raises:
        ValueError: no optimizer, or one outside :data:`LORA_TWIN_OPTIMIZERS`.
    """
    spec = spec or LoraTwinSpec()
    optimizers = list(optimizers)
    if not optimizers:
        raise ValueError(f"plan: optimizers is empty; allowed: {', '.join(LORA_TWIN_OPTIMIZERS)}")
    unknown = [o for o in optimizers if o not in LORA_TWIN_OPTIMIZERS]
    if unknown or len(set(optimizers)) != len(optimizers):
        raise ValueError(
            f"plan: optimizers={optimizers}; allowed: distinct names of "
            f"{', '.join(LORA_TWIN_OPTIMIZERS)}"
        )
    key = json.dumps([spec.identity(), optimizers])
    name = study or f"lora-twins-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    variants = [{"optimizer": o, "lr": spec.lr or DEFAULT_LR[o]} for o in optimizers]
    return Sweep(spec, variants=variants, name=name)


def run_lora_twins(
    spec: LoraTwinSpec | None = None,
    optimizers: Sequence[str] = LORA_TWIN_OPTIMIZERS,
    *,
    study: str | None = None,
    sweep: Sweep | None = None,
    **options: Any,
) -> StudyOutcome[LoraTwinsResult]:
    """Run the pretrain (reused when stored), then one twin run per optimizer; collect, report.

    Args:
        spec: the protocol (default :class:`LoraTwinSpec()`; :func:`quick_twin_spec` for a
            look in seconds).
        optimizers: the twin phase's optimizers (default all of :data:`LORA_TWIN_OPTIMIZERS`).
        study: the study name (default ``lora-twins-<digest>``).
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: how to run it, as :func:`gaugelab.study.experiment.run_experiment`
            (``store``, ``executor``, ``max_workers`` (default 1), ``threads`` (default 1),
            ``address``, ``progress``, ``step_progress``, ``phase``, ``report_dir``,
            ``write_report``).

    Returns:
        The :class:`~gaugelab.study.experiment.StudyOutcome` of a :class:`LoraTwinsResult`;
        its ``sweep`` accounts for the pretrain run and the twin runs together.

    Raises:
        ValueError: bad optimizers or executor options, or a study name used by another spec.
        FileExistsError: ``report_dir`` already holds a report (checked before any run).

    Source: singh2026lossbasis, §6; docs/commands/lora-twins.md (the protocol).
    """
    spec = spec or LoraTwinSpec()
    sweep = sweep or plan(spec, optimizers, study=study)
    return run_experiment(sweep, collect, report, first=plan_pretrain(spec.pretrain), **options)


EXPERIMENT: Experiment[LoraTwinSpec, LoraTwinsResult] = Experiment(
    LoraTwinSpec.kind, LoraTwinSpec, LoraTwinsResult, plan, collect, tables, report, run_lora_twins
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
