"""Failure modes gaugelab detects beyond the seed's closure manifest of 36 (seed 003 §0x0CC):
further failures of Loops 3, 7 and 10 than the four per loop the seed counts, and Loop 11's
own (the manifest counts Loops 2–10 only). Same records and checks as
:data:`gaugelab.study.release.catalog.FAILURE_CATALOG`, never counted in it; re-exported there
and by :mod:`gaugelab.study.release.design`.
"""

from __future__ import annotations

from gaugelab.study.release.failures import FailureRecord as R

__all__ = ["FAILURE_CATALOG_EXTENSIONS"]

_ADAPT = "tests/adapters/test_adapter_files.py::"
_LR = "tests/lowrank/"
_RELEASE = "tests/study/release/"
_ID, _OPT = "identity-protocol", "optimization-numerics"
_DES, _EVI = "experimental-design-statistics", "evidence-publication-release"

FAILURE_CATALOG_EXTENSIONS: tuple[R, ...] = (
    # --- Loop 3: intrinsic dimension (§0x02) -----------------------------------------------------
    R("said-degenerate-budget", _OPT, "§0x02E",
      "SAID's d counts the m per-group scales, leaving d − m shared coordinates",
      "d = m: no shared coordinate",
      "gaugelab.lowrank.intrinsic.protocol.SAIDReparameterization",
      "a run that cannot update, scored as a measurement at d",
      "the d grid: report d = m as no-update",
      "d > m does not prove the run trains",
      _LR + "intrinsic/test_intrinsic_oracles.py::"
      "test_said_ledger_counts_the_scales_inside_d_and_d_equal_"
      "m_is_degenerate",
      seed_text="A search implementation must report that outcome rather than silently "
      "reinterpret $d$ as the shared width."),
    # --- Loop 7: initialization and factor dynamics (§0x07–08) -----------------------------------
    R("adapter-factor-layout", _ID, "§0x07I",
      "down factor [r, d_in] and up factor [d_out, r] pair by module with one rank",
      "a 1-D factor, halves of different rank, a missing half, a DoRA magnitude vector",
      "gaugelab.adapters.files.read_factors",
      "ΔW = s·B A is not defined, or defined for another operator",
      "the adapter's producer (the factor ABI owner)",
      "a well-formed layout does not prove the factors were trained on this base",
      _ADAPT + "test_bad_tensors_are_refused_naming_the_key",
      seed_text="down factor: [r, d_in]"),
    R("mixed-scale-rule-export", _OPT, "§0x08F",
      "one adapter file carries one scale rule, α/r or α/√r, for every module",
      "a model mixing LoRA and rsLoRA layers exported as one PEFT adapter",
      "gaugelab.adapters.adapter.Adapter.from_model",
      "on load some modules would be rescaled by √r",
      "the export: one adapter per scale rule",
      "a consistent rule does not prove the rule suits the rank",
      _ADAPT + "test_from_model_keeps_the_merge_history_and_refuses_mixed_scales",
      seed_text="$1/r$ and $1/\\sqrt{r}$ scaling treated as cosmetic"),
    R("adam-state-under-general-linear-gauge", _OPT, "§0x08L",
      "optimizer moments move with the factors only where the rule is equivariant",
      "a GL(r) rebalance with Adam's per-coordinate moments transformed",
      "gaugelab.lowrank.dynamics.diagnostics.rebalance_factors",
      "a resumed trajectory that is neither the original nor a fresh start",
      "the resume path: reset the moments and record why",
      "a recorded reset does not make the two trajectories equal",
      _LR + "dynamics/test_factor_diagnostics.py::test_adam_state_is_reset_under_a_general_linear_"
      "rebalance_and_the_record_says_why",
      seed_text="merged checkpoint cannot resume equivalently"),
    # --- Loop 10: rank and retention decision (§0x0B) --------------------------------------------
    R("adapter-pickle-checkpoint", _ID, "§0x0BV",
      "adapter tensors are read as data, never executed",
      "an adapter folder holding a pickled adapter_model.bin",
      "gaugelab.adapters.files.adapter_directory",
      "loading would run arbitrary code; no tensor read after it can be trusted",
      "the adapter's producer: re-export it as adapter_model.safetensors",
      "refusing pickle says nothing about the tensors' content or provenance",
      _ADAPT + "test_pickle_checkpoints_are_refused_and_never_unpickled"),
    R("adapter-overwritten", _EVI, "§0x0BV",
      "a written adapter artifact is never overwritten silently",
      "saving into a folder that already holds an adapter",
      "gaugelab.adapters.adapter.Adapter.save",
      "the artifact a digest or report pointed to is gone",
      "the caller: a new folder, or overwrite=True stated",
      "a preserved file does not prove which run wrote it",
      _ADAPT + "test_save_never_overwrites_an_adapter_unless_asked"),
    # --- Loop 11: failure closure and experimental design (§0x0C) --------------------------------
    R("incomplete-pair-substituted", _DES, "§0x0CF",
      "a paired contrast uses identical nuisance tuples; a missing side stays incomplete",
      "one candidate's run missing at one tuple",
      "gaugelab.study.release.design.paired_contrast",
      "a mean over unpaired runs presented as paired",
      "the missing-cell policy frozen in the design",
      "a complete pairing does not remove candidate × seed interaction",
      _RELEASE + "test_design.py::"
      "test_paired_contrast_keeps_a_missing_cell_incomplete_and_does_not_"
      "substitute",
      seed_text="If one side is missing, that pair is incomplete; substituting another seed "
      "breaks the pairing."),
    R("reselection-after-a-test-failure", _DES, "§0x0CH",
      "a test result is reported, never used to select again",
      "freezing the validation runner-up after the selected candidate failed a release gate",
      "gaugelab.study.release.sealed.SealedTestStore.freeze",
      "the held-out test becomes a validation split",
      "test close: release or no release; a new versioned study with new held-out data",
      "a refused reselection does not validate the first choice",
      "tests/study/test_sealed.py::test_reselection_after_a_test_failure_is_refused",
      seed_text="Test failure does not authorize selecting the validation runner-up."),
    R("design-changed-after-outcomes", _DES, "§0x0CH",
      "the design digest declared before outcomes is the design used",
      "any one field of the manifest changed after outcomes",
      "gaugelab.study.release.design.check_unchanged",
      "every contrast and selection of the study",
      "design admission: version a new study",
      "an unchanged digest does not prove the runs followed the design",
      _RELEASE + "test_design.py::test_check_unchanged_refuses_a_changed_design",
      seed_text="Changing the candidate family, gates, test interpretation, or retry policy "
      "creates a new versioned study with new held-out data."),
    R("retry-after-an-outcome", _DES, "§0x0CI",
      "only infrastructure failures are retried; the attempt that counts is chosen without "
      "scores",
      "a retry after numerical_failure or after completed",
      "gaugelab.study.release.design.run_outcome",
      "a divergence hidden by a luckier retry",
      "run admission: reject the attempt lineage",
      "a valid lineage does not prove the infrastructure failure was not caused by the run",
      _RELEASE + "test_design.py::test_run_outcome_refuses_a_retry_after_numerical_failure_or_"
      "completion",
      seed_text="A numerical divergence is an outcome of the pipeline, not an infrastructure "
      "retry."),
    R("test-opened-before-freeze", _DES, "§0x0CL",
      "the held-out test opens once, after the candidate and its checkpoint are frozen",
      "open_once called before any freeze",
      "gaugelab.study.release.sealed.SealedTestStore.open_once",
      "the whole study: opening test before the freeze invalidates it",
      "decision close: no test access; refused and logged",
      "a sealed test does not prove the split is uncontaminated",
      "tests/study/test_sealed.py::test_opening_before_freezing_is_refused_logged_and_never_"
      "loads",
      seed_text="Opening test before freeze_candidate invalidates the study."),
)  # fmt: skip
"""Failure modes gaugelab detects beyond the seed's 36: not part of :data:`FAILURE_CATALOG`
and not counted by it. ``seed_text`` is ``None`` where the seed does not state the failure."""
