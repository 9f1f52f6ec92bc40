"""LoRA on real text: pretrain, fine-tune (full and LoRA at several ranks), inspect adapters.

The fine-tuning study (docs/commands/lora.md, the protocol): a small causal character
Transformer is pretrained on the *retention* domain (tiny-shakespeare) — a stored run of its
own, :class:`PretrainSpec` — and then fine-tuned on the *target* domain (the pinned
standard-library source of the running interpreter) by every candidate of a
:class:`FinetuneSpec`: full fine-tuning, and LoRA at each rank. Each candidate is a stored,
resumable run that starts from the pretrain run's verified weights, logs both domains'
validation loss over training, and records its adapters (PEFT format, via
:class:`gaugelab.adapters.Adapter`) or, for full fine-tuning, its dense deltas.

The experiment surface (see :mod:`gaugelab.experiments`): :class:`FinetuneSpec`,
:func:`plan` (one run per candidate; :func:`plan_pretrain` for the pretrain run),
:func:`collect`, :func:`tables`, :func:`report`, and :func:`run_lora_finetune` for all of it at
once. :func:`inspect_lora` (:func:`run_lora_inspect` with its report) reads an adapter (a stored
run, or a PEFT folder) and reports every rank policy, the truncation table and — when gaugelab
knows the base model and the data — the evidence ladder of seed 003 §0x04M.

Source: biderman2024lora; hu2021lora; seed 003 §0x04 (reconstruction), §0x04M (the evidence
ladder), §0x0BE–0x0BF (full-update rank by layer and module).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gaugelab.experiments.lora.hf_ladder import HFEvidence
from gaugelab.experiments.lora.inspect import InspectResult, ModuleReport, inspect_lora
from gaugelab.experiments.lora.results import (
    Candidate,
    LoraResult,
    collect,
    curve_figure,
    report,
    tables,
)
from gaugelab.experiments.lora.spec import (
    ALL_TARGETS,
    ATTENTION,
    FULL_LR,
    LORA_LR,
    MLP,
    FinetuneSpec,
    PretrainSpec,
    quick_spec,
    resolve_targets,
)
from gaugelab.experiments.lora.train import Curves, train_pretrain
from gaugelab.experiments.lora.views import INSPECT_FILES, inspect_report, inspect_tables
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.report.folders import new_report_dir, refuse_overwrite
from gaugelab.study.store.db import DEFAULT_STORE_PATH
from gaugelab.study.sweep import Sweep

__all__ = [
    "ALL_TARGETS",
    "ATTENTION",
    "EXPERIMENT",
    "FULL_LR",
    "LORA_LR",
    "MLP",
    "Candidate",
    "Curves",
    "FinetuneSpec",
    "HFEvidence",
    "InspectResult",
    "LoraResult",
    "ModuleReport",
    "PretrainSpec",
    "candidate_fields",
    "collect",
    "curve_figure",
    "inspect_lora",
    "inspect_report",
    "inspect_tables",
    "plan",
    "plan_pretrain",
    "quick_spec",
    "report",
    "resolve_targets",
    "run_lora_finetune",
    "run_lora_inspect",
    "tables",
    "train_pretrain",
]

_LORA_ONLY = ("alpha_ratio", "rslora", "targets", "init", "lr")
_FULL_ONLY = ("full_lr",)


def plan_pretrain(spec: PretrainSpec) -> Sweep:
    """The pretrain run alone, in the study ``lora-pretrain-<identity[:12]>`` (one study per
    pretrain spec, shared by every fine-tuning study that starts from it)."""
    return Sweep(spec, name=f"lora-pretrain-{spec.identity()[:12]}")


def plan(spec: FinetuneSpec, study: str | None = None) -> Sweep:
    """The fine-tuning runs: one per candidate (``full`` alone, or one rank).

    A candidate's run sets the options it does not read to their defaults (full fine-tuning:
    the LoRA options; LoRA: ``full_lr``), so the same candidate is the same run in every study
    that asks for it. The study is named ``lora-finetune-<identity[:12]>`` unless ``study`` is
    given. The pretrain run is not part of it (:func:`plan_pretrain`; :func:`run_lora_finetune`
    runs both).

    Raises:
        ValueError: (from :meth:`Sweep.specs`) a candidate the spec rejects.
    """
    variants = ([candidate_fields(None)] if spec.full else []) + [
        candidate_fields(r) for r in spec.ranks
    ]
    return Sweep(spec, variants=variants, name=study or f"lora-finetune-{spec.identity()[:12]}")


def candidate_fields(rank: int | None) -> dict[str, Any]:
    """The :class:`FinetuneSpec` fields of one candidate's run: ``full`` alone (``rank``
    ``None``) or one LoRA rank, with the options that candidate does not read set to their
    defaults (full fine-tuning: the LoRA options; LoRA: ``full_lr``), so the same candidate is
    the same run in every study that asks for it."""
    reset = _LORA_ONLY if rank is None else _FULL_ONLY
    defaults = {k: _default(FinetuneSpec.model_fields[k]) for k in reset}
    return {"full": rank is None, "ranks": [] if rank is None else [rank], **defaults}


def _default(info: Any) -> Any:
    value = info.get_default(call_default_factory=True)
    return list(value) if isinstance(value, tuple) else value


def run_lora_finetune(
    spec: FinetuneSpec | None = None,
    *,
    study: str | None = None,
    sweep: Sweep | None = None,
    **options: Any,
) -> StudyOutcome[LoraResult]:
    """Run the pretrain, then every fine-tuning candidate; collect and report.

    Runs already completed in the store are reused (the pretrain run too, by every study
    that starts from it); a run killed mid-way resumes from its latest checkpoint. A failed
    pretrain run fails every candidate at admission (``admission_failure``), and all of them
    are listed in ``outcome.result.failures``.

    Args:
        spec: the study (default: the protocol, :class:`FinetuneSpec()`; ``quick_spec()`` for a
            look in seconds).
        study: the study name (default ``lora-finetune-<identity[:12]>``).
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: how to run it, as :func:`gaugelab.study.experiment.run_experiment`
            (``store``, ``executor``, ``max_workers`` (default 1: in this process),
            ``threads`` (default 1), ``address``, ``progress``, ``step_progress``, ``phase``,
            ``report_dir``, ``write_report``); the pretrain run is executed the same way.

    Returns:
        The :class:`~gaugelab.study.experiment.StudyOutcome` of a :class:`LoraResult`; its
        ``sweep`` accounts for the pretrain run and the candidates together.

    Raises:
        ValueError: a bad executor option, or a study name already used by another spec.
        FileExistsError: ``report_dir`` already holds a report.

    Source: biderman2024lora; docs/commands/lora.md (the protocol).
    """
    spec = spec or FinetuneSpec()
    sweep = sweep or plan(spec, study)
    return run_experiment(sweep, collect, report, first=plan_pretrain(spec.pretrain), **options)


def run_lora_inspect(
    source: str | os.PathLike[str],
    *,
    store: str | os.PathLike[str] = DEFAULT_STORE_PATH,
    ranks: Sequence[int] = (1, 4, 16),
    seed: int | None = None,
    study: str | None = None,
    evidence: bool = True,
    report_dir: str | os.PathLike[str] | None = None,
    write_report: bool = True,
    base: str | os.PathLike[str] | None = None,
    hf: HFEvidence | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[InspectResult, Path | None]:
    """:func:`inspect_lora`, then its report (figures, ``inspect.json``, ``report.html``).

    Args:
        source, store, ranks, seed, study, evidence, base, hf, progress: as
            :func:`inspect_lora`.
        report_dir: the report folder (must not hold one); default a new timestamped folder
            in ``<store folder>/reports/inspect-<source>/``.
        write_report: write it (False: only inspect).

    Returns:
        ``(result, report.html or None)``.

    Raises:
        ValueError, ArtifactError: as :func:`inspect_lora`.
        FileExistsError: ``report_dir`` already holds a report or an inspection (checked
            first).
    """
    if report_dir is not None and write_report:
        refuse_overwrite(report_dir, INSPECT_FILES)
    result = inspect_lora(source, store=store, ranks=ranks, seed=seed, study=study,
                          evidence=evidence, base=base, hf=hf, progress=progress)  # fmt: skip
    if not write_report:
        return result, None
    folder = (
        Path(report_dir)
        if report_dir is not None
        else new_report_dir(
            Path(store).parent / "reports", study=f"inspect-{result.label}-{_short(result.source)}"
        )
    )
    return result, inspect_report(result, folder)


def _short(source: str) -> str:
    """An inspected source in a folder name: an adapter folder by its own name, a run as is."""
    return Path(source).name if "/" in source or os.sep in source else source


EXPERIMENT: Experiment[FinetuneSpec, LoraResult] = Experiment(
    FinetuneSpec.kind, FinetuneSpec, LoraResult, plan, collect, tables, report, run_lora_finetune
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
