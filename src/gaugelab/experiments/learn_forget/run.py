"""Choosing a rank honestly: the learning–forgetting study (``gaugelab learn-forget``).

The character model pretrained on tiny-shakespeare (the retention domain) is adapted to Python
standard-library source (the target domain) by full fine-tuning and LoRA at ranks 1, 2, 4, 8, 16
(and rsLoRA at 16), every candidate on the same paired seeds; a held-out standard-library
package (``email``) is the stress domain. The design is declared before any outcome
(:class:`LearnForgetSpec`, hashed into a :class:`gaugelab.study.release.design.DesignManifest`),
and so are its objects, splits and protocol envelopes (:func:`study_manifest`, a
:class:`gaugelab.study.release.study_manifest.LowRankStudyManifest`); each candidate's
checkpoint is chosen on validation; typed records (:mod:`gaugelab.study.release.selection`) go
through the Pareto front and the declared gates of
:mod:`gaugelab.study.stats.compare`; the chosen candidate is frozen and only then the sealed test
(:class:`gaugelab.study.release.sealed.SealedTestStore`) is opened, once. The report states what the
study does not show.

The experiment surface (see :mod:`gaugelab.experiments`): :class:`LearnForgetSpec`,
:func:`plan`, :func:`collect`, :func:`tables`, :func:`report`, and :func:`run_learn_forget` for
all of it at once (:func:`release` is the decision and the one test opening).

Source: biderman2024lora; seed 003 §0x0B (rank, reconstruction, kernel and retention oracle),
§0x0C (failure closure and experimental design); docs/commands/learn-forget.md.
"""

from __future__ import annotations

from typing import Any

from gaugelab.experiments.learn_forget.decide import (
    Decision,
    Measured,
    policy,
)
from gaugelab.experiments.learn_forget.design import design_manifest
from gaugelab.experiments.learn_forget.manifest import study_manifest
from gaugelab.experiments.learn_forget.notes import not_shown, notes
from gaugelab.experiments.learn_forget.results import LearnForgetResult, collect
from gaugelab.experiments.learn_forget.spec import (
    STRESS_FILES,
    LearnForgetSpec,
    default_stress,
    quick_spec,
)
from gaugelab.experiments.learn_forget.views import report, tables
from gaugelab.experiments.lora.run import candidate_fields, plan_pretrain
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.release.design import DesignChanged
from gaugelab.study.release.sealed import SealedTestError
from gaugelab.study.store.db import RunStore
from gaugelab.study.sweep import Sweep

__all__ = [
    "EXPERIMENT",
    "STRESS_FILES",
    "Decision",
    "LearnForgetResult",
    "LearnForgetSpec",
    "Measured",
    "collect",
    "default_stress",
    "design_manifest",
    "not_shown",
    "notes",
    "plan",
    "quick_spec",
    "release",
    "report",
    "run_learn_forget",
    "study_manifest",
    "tables",
]

_GATES = ("min_target_gain", "max_forgetting", "min_stress_gain", "max_tail")


def plan(spec: LearnForgetSpec, study: str | None = None) -> Sweep:
    """The cells: one run per (block, candidate), every seed in it.

    A run sets what it does not read to the defaults — the gates, the other candidates, the
    second block (for block ``a``), full fine-tuning's LoRA options and LoRA's full-FT rate —
    so a new gate or a changed rank list reuses every stored cell. The study is named
    ``learn-forget-<identity[:12]>`` unless ``study`` is given; the pretrain run is not part of
    it (:func:`run_learn_forget` runs both).

    Raises:
        ValueError: the spec's design or gates are not admissible, or its study manifest
            (:func:`study_manifest`: objects, splits, envelopes, ledger) is invalid, e.g. a
            target domain whose chunks are the retention split's (nothing is run).
    """
    design_manifest(spec)  # the design and the gates are checked before any run
    study_manifest(spec)  # so are the study's objects, splits and protocol envelopes
    policy(spec)
    gates = {k: LearnForgetSpec.model_fields[k].get_default() for k in _GATES}
    variants: list[dict[str, Any]] = []
    for block in spec.blocks():
        for (method, rank), cid in zip(spec.methods(), spec.candidate_ids(), strict=True):
            variant = {
                "candidate": cid,
                "block": block,
                "finetune": {**spec.finetune.spec_dict(), **candidate_fields(rank)},
                "rslora_rank": rank if method == "rslora" else None,
                **gates,
            }
            if block == "a":
                variant["second_target"] = None
            variants.append(variant)
    return Sweep(spec, variants=variants, name=study or f"learn-forget-{spec.identity()[:12]}")


def release(store: RunStore, study: str) -> dict[str, Any] | None:
    """The decision and the one test opening of a study whose cells have run.

    Measures every block on validation, decides on block ``a`` (Pareto front, gates,
    tie-break), then freezes the chosen candidate and opens the sealed test once — or records
    "no release" and leaves it sealed. Called again, it opens nothing: it returns the recorded
    test report.

    Returns:
        The test report (see :func:`gaugelab.experiments.learn_forget.decide.open_test`), or
        ``None`` (no release, or nothing complete to decide on).

    Raises:
        ValueError: no such study or not a ``learn-forget`` study.
        SelectionError: a record fails closed (NaN, missing metric, mixed revision, …).
        SealedTestError, DesignChanged: the seal refuses the opening (logged in the store).
    """
    return collect(store, study, release=True).test


def _release_then_collect(store: RunStore, study: str) -> LearnForgetResult:
    """:func:`collect` with the release (measured and decided once); a refused test (its
    splits opened by another study, or a changed design) is already in the seal's access log,
    which the notes report."""
    try:
        return collect(store, study, release=True)
    except (SealedTestError, DesignChanged):
        return collect(store, study)


def run_learn_forget(
    spec: LearnForgetSpec | None = None,
    *,
    study: str | None = None,
    sweep: Sweep | None = None,
    **options: Any,
) -> StudyOutcome[LearnForgetResult]:
    """Run the pretrain, every cell, the decision and the one test opening; collect, report.

    Runs already completed are reused; a killed run resumes from its latest checkpoint. The
    test is opened at most once per study, however often this is called.

    Args:
        spec: the study (default :class:`LearnForgetSpec()`, about 15 minutes on 2 cores;
            :func:`quick_spec` for a look in seconds).
        study: the study name (default ``learn-forget-<identity[:12]>``).
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: as :func:`gaugelab.study.experiment.run_experiment` (``store``,
            ``executor``, ``max_workers`` (default 1), ``threads`` (default 1), ``address``,
            ``progress``, ``step_progress``, ``phase``, ``report_dir``, ``write_report``).

    Returns:
        The :class:`~gaugelab.study.experiment.StudyOutcome` of a :class:`LearnForgetResult`.

    Raises:
        ValueError: a bad executor option, or a study name already used by another spec.
        FileExistsError: ``report_dir`` already holds a report (checked before any run).
    """
    spec = spec or LearnForgetSpec()
    sweep = sweep or plan(spec, study)
    return run_experiment(
        sweep, _release_then_collect, report, first=plan_pretrain(spec.finetune.pretrain),
        collect_phase="measuring every cell on validation, deciding, opening the test",
        **options,
    )  # fmt: skip


EXPERIMENT: Experiment[LearnForgetSpec, LearnForgetResult] = Experiment(
    LearnForgetSpec.kind, LearnForgetSpec, LearnForgetResult, plan, collect, tables, report,
    run_learn_forget,
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""
