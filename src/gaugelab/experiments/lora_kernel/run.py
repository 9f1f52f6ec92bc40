"""Kernel diagnostics of LoRA fine-tuning: the three matched paths under SGD and Adam.

The study (docs/commands/lora-kernel.md, the protocol): the LoRA protocol's pretrained
character Transformer (its stored pretrain run, :class:`gaugelab.experiments.lora.run.PretrainSpec`)
is fine-tuned on the target domain along three matched paths — nonlinear LoRA, the
initialization-linearized LoRA model trained by the same optimizer, and the fixed-random-feature
path that freezes the initially nonzero factor (optionally full fine-tuning) — with one
minibatch stream, the same steps, checkpoints and probe set. At every checkpoint every path
records ``R_lin``, ``D_J``, ``D_K``, ``A_K`` (estimated with JVPs, VJPs and seeded output probes,
never a dense Jacobian or kernel; :mod:`gaugelab.lowrank.kernels.explanation`), with their standard
errors,
and target and retention validation loss. One run per optimizer.

The experiment surface (see :mod:`gaugelab.experiments`): :class:`KernelSpec`, :func:`plan`,
:func:`collect`, :func:`tables`, :func:`report`, and :func:`run_lora_kernel` for all of it.

Source: seed 003 §0x09J–0x09L; malladi2023kernel.
"""

from __future__ import annotations

from typing import Any

from gaugelab.experiments.lora.run import plan_pretrain
from gaugelab.experiments.lora_kernel.results import (
    LIMITS,
    KernelResult,
    OptimizerRun,
    collect,
    diagnostics_figure,
    limits_table,
    notes,
    report,
    tables,
)
from gaugelab.experiments.lora_kernel.spec import LR, OPTIMIZERS, PATHS, KernelSpec, quick_spec
from gaugelab.experiments.lora_kernel.train import train_paths
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.sweep import Sweep

__all__ = [
    "EXPERIMENT",
    "LIMITS",
    "LR",
    "OPTIMIZERS",
    "PATHS",
    "KernelResult",
    "KernelSpec",
    "OptimizerRun",
    "collect",
    "diagnostics_figure",
    "limits_table",
    "notes",
    "plan",
    "quick_spec",
    "report",
    "run_lora_kernel",
    "tables",
    "train_paths",
]


def plan(spec: KernelSpec, study: str | None = None) -> Sweep:
    """One run per optimizer (all paths inside it; the other optimizer's rate at its default,
    so a change of one rate reuses the other optimizer's stored run), in the study
    ``lora-kernel-<identity[:12]>`` unless ``study`` is given. The pretrain run is not part of
    it (:func:`gaugelab.experiments.lora.run.plan_pretrain`; :func:`run_lora_kernel` runs both)."""
    defaults = KernelSpec.model_fields
    other = {"gd": "adam_lr", "adam": "gd_lr"}  # the rate a run does not read, at its default
    variants = [{"optimizers": [o], other[o]: defaults[other[o]].default} for o in spec.optimizers]
    return Sweep(spec, variants=variants, name=study or f"lora-kernel-{spec.identity()[:12]}")


def run_lora_kernel(
    spec: KernelSpec | None = None,
    *,
    study: str | None = None,
    sweep: Sweep | None = None,
    **options: Any,
) -> StudyOutcome[KernelResult]:
    """Run the pretrain (reused when stored), then one run per optimizer; collect, report.

    Args:
        spec: the study (default: the protocol, ``KernelSpec()``; ``quick_spec()`` for a look
            in seconds).
        study: the study name (default ``lora-kernel-<identity[:12]>``).
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: how to run it, as :func:`gaugelab.study.experiment.run_experiment`
            (``store``, ``executor``, ``max_workers`` (default 1), ``threads`` (default 1),
            ``address``, ``progress``, ``step_progress``, ``phase``, ``report_dir``,
            ``write_report``).

    Returns:
        The :class:`~gaugelab.study.experiment.StudyOutcome` of a :class:`KernelResult`.

    Raises:
        ValueError: a bad executor option, or a study name already used by another spec.
        FileExistsError: ``report_dir`` already holds a report (checked before any run).

    Source: seed 003 §0x09L; docs/commands/lora-kernel.md.
    """
    spec = spec or KernelSpec()
    sweep = sweep or plan(spec, study)
    return run_experiment(sweep, collect, report, first=plan_pretrain(spec.pretrain), **options)


EXPERIMENT: Experiment[KernelSpec, KernelResult] = Experiment(
    KernelSpec.kind, KernelSpec, KernelResult, plan, collect, tables, report, run_lora_kernel
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
