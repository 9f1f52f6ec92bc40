"""The experimental design of a rank study, declared before outcomes (seed 003 §0x0CB–0x0CL).

A rank comparison can be algebraically valid while its runs differ in initialization, data
order, checkpoint opportunity, target modules, failed-run handling or test exposure; those
differences can dominate the rank coordinate the table claims to study. This module freezes the
design first:

* the **objects** (§0x0CE): :class:`CandidatePipeline` (the whole treatment
  ``c = (r, T, s(r), O, I, Q)``, not a rank), :class:`Block`, :class:`NuisanceTuple`
  ``(s_init, s_order, s_dropout)``, :class:`TrainingUnit` ``(c, b, s)`` with its immutable
  ``run_id``, and the block's :class:`BaselineRecord` (a deterministic record, not a unit);
* the **manifest** (§0x0CJ): :class:`DesignManifest`, content-hashed by :meth:`digest`; a change
  after outcomes is a new study (:func:`check_unchanged` raises :class:`DesignChanged`);
* **paired contrasts** (§0x0CF–CG): :func:`paired_contrast` keeps an incomplete pair
  incomplete, never substitutes another tuple, and reports a seed range as a range, not a
  confidence interval; :func:`check_complete` applies the frozen missing-cell policy;
* **attempt lineage** (§0x0CI): :class:`Attempt`, :func:`may_retry` (infrastructure failures
  only), :func:`run_outcome` (the attempt that counts, chosen without scores), over the
  harness's termination classes :data:`gaugelab.errors.TERMINATION_CLASSES`;
* the **failure catalog** (§0x0CB–CC): :data:`FAILURE_CATALOG`, the seed's 36 typed failures
  (four per loop, Loops 2–10, in the six :data:`ALARM_FAMILIES`), each a :class:`FailureRecord`
  with its detector and test; :data:`FAILURE_CATALOG_EXTENSIONS`, what gaugelab detects beyond
  them.

Why nuisance is declared: fine-tuning outcomes vary materially with weight initialization and
data order (dodge2020finetuning, 2,100 BERT fine-tuning trials), and one selected seed can change
an apparent method ranking (reimers2017reporting); bouthillier2021accounting models the
benchmark as a pipeline with several variation sources. These are source-reported results on
their tasks, not variance estimates for a LoRA rank study. The manifest is this library's
synthesis of pineau2021improving's reproducibility practice for a rank study, not the NeurIPS
checklist. Nothing here trains, evaluates or computes an empirical rank effect.

Source: seed 003 §0x0CB–0x0CL.
"""

from __future__ import annotations

from gaugelab.study.release.attempts import (
    COMPLETE_TERMINATIONS,
    RETRYABLE_TERMINATIONS,
    Attempt,
    is_complete,
    may_retry,
    run_outcome,
)
from gaugelab.study.release.catalog import FAILURE_CATALOG, FAILURE_CATALOG_EXTENSIONS
from gaugelab.study.release.contrast import (
    IncompleteDesign,
    PairedContrast,
    check_complete,
    missing_cells,
    paired_contrast,
)
from gaugelab.study.release.failures import (
    ALARM_FAMILIES,
    ALARM_FAMILY_TABLE,
    MECHANISM_LOOPS,
    AlarmFamily,
    FailureRecord,
    origin_loop,
)
from gaugelab.study.release.manifest import (
    CONFIGURED_RANK,
    DESIGN_SCHEMA,
    MISSING_CELL_POLICIES,
    DesignManifest,
)
from gaugelab.study.release.units import (
    METHODS,
    BaselineRecord,
    Block,
    CandidatePipeline,
    NuisanceTuple,
    TrainingUnit,
)

__all__ = [
    "ALARM_FAMILIES",
    "ALARM_FAMILY_TABLE",
    "COMPLETE_TERMINATIONS",
    "CONFIGURED_RANK",
    "DESIGN_SCHEMA",
    "FAILURE_CATALOG",
    "FAILURE_CATALOG_EXTENSIONS",
    "MECHANISM_LOOPS",
    "METHODS",
    "MISSING_CELL_POLICIES",
    "RETRYABLE_TERMINATIONS",
    "AlarmFamily",
    "Attempt",
    "BaselineRecord",
    "Block",
    "CandidatePipeline",
    "DesignChanged",
    "DesignManifest",
    "FailureRecord",
    "IncompleteDesign",
    "NuisanceTuple",
    "PairedContrast",
    "TrainingUnit",
    "check_complete",
    "check_unchanged",
    "is_complete",
    "may_retry",
    "missing_cells",
    "origin_loop",
    "paired_contrast",
    "run_outcome",
    "teaching_design",
]


class DesignChanged(ValueError):
    """The design's digest differs from the one declared before outcomes: a new study."""


def check_unchanged(declared_digest: str, manifest: DesignManifest) -> None:
    """Refuse a design that changed after its digest was declared.

    Args:
        declared_digest: the :meth:`DesignManifest.digest` recorded before outcomes.
        manifest: the design about to be used.

    Raises:
        DesignChanged: the digests differ ("a change after outcomes is a new study").

    Source: seed 003 §0x0CH (changing the candidate family, gates, test interpretation or retry
    policy creates a new versioned study), §0x0CJ.
    """
    now = manifest.digest()
    if now != declared_digest:
        raise DesignChanged(
            f"check_unchanged: declared_digest={declared_digest!r} but the design's digest is "
            f"{now!r}; a change after outcomes is a new study"
        )


def teaching_design() -> DesignManifest:
    """The synthetic teaching design of §0x0CK: five trainable candidates (LoRA r = 1…4 with
    ``α = 2r`` and full fine-tuning, the Loop-10 family without its base) × two blocks × four
    paired nuisance tuples = 40 units; three checkpoints = 120 validation records; two
    base-baseline records. It fixes identities only: it trains nothing and proves no rank.

    Source: seed 003 §0x0CK (fixture 2.57), §0x0BR (the candidate family and gates).
    """
    surface = ("q_proj", "k_proj", "v_proj", "o_proj", "fc_in", "fc_out")
    lora = [
        CandidatePipeline(
            f"lora_r{r}",
            "lora",
            r,
            ("q_proj", "v_proj"),
            2.0,
            "adamw(lr=2e-4, constant)",
            "gaussian-A/zero-B",
        )
        for r in (1, 2, 3, 4)
    ]
    full = CandidatePipeline(
        "full_ft", "full", None, ("all",), None, "adamw(lr=2e-5, constant)", "base checkpoint"
    )
    blocks = [
        Block(
            name,
            "python-stdlib-source",
            "continued-pretraining",
            budget,
            surface,
            "stdlib-file-list@teaching",
            "byte-tokenizer@teaching",
            "base@teaching",
            "evaluator@teaching",
        )
        for name, budget in (("small-budget", 65_536), ("large-budget", 262_144))
    ]
    return DesignManifest(
        question="Which candidate pipeline gives the best target gain at bounded forgetting?",
        estimands=("paired target-score contrast per block against lora_r2",),
        non_claims=(
            "no pure rank effect: every candidate is a whole pipeline",
            "a teaching fixture: no empirical rank effect is computed",
        ),
        candidates=(*lora, full),
        blocks=tuple(blocks),
        nuisance=tuple(
            NuisanceTuple(i, o, d) for d, (i, o) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1)))
        ),
        checkpoint_steps=(100, 200, 400),
        metrics={"target": "max", "retention": "max", "stress": "max", "cost": "min"},
        gates={"target": (72.0, None), "retention": (84.0, None), "stress": (88.0, None)},
        tie_break=(("cost", "min"), (CONFIGURED_RANK, "min")),
    )
