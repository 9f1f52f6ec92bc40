"""Tests for gaugelab.study.release.design: the §0x0CK teaching design (40 units, 120 validation
records, two baselines), the content-hashed manifest, paired contrasts and attempt lineage
(seed 003 §0x0CE–0x0CL)."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest

from gaugelab import errors
from gaugelab.study.release import attempts as _design_attempts
from gaugelab.study.release.design import (
    COMPLETE_TERMINATIONS,
    RETRYABLE_TERMINATIONS,
    Attempt,
    CandidatePipeline,
    DesignChanged,
    DesignManifest,
    IncompleteDesign,
    NuisanceTuple,
    TrainingUnit,
    check_complete,
    check_unchanged,
    is_complete,
    may_retry,
    missing_cells,
    paired_contrast,
    run_outcome,
    teaching_design,
)

DESIGN = teaching_design()
S = DESIGN.nuisance  # four tuples
ENV = "env-digest-0"


def replace(design: DesignManifest, **changes) -> DesignManifest:
    return dataclasses.replace(design, **changes)


# --- §0x0CK: the teaching design ------------------------------------------------------------


def test_teaching_design_has_40_units_and_120_validation_records():
    assert (len(DESIGN.candidates), len(DESIGN.blocks), len(DESIGN.nuisance)) == (5, 2, 4)
    units = DESIGN.units()
    assert len(units) == 40  # 5 candidates × 2 blocks × 4 tuples
    assert len({u.run_id for u in units}) == 40
    assert {(u.candidate_id, u.block, u.nuisance) for u in units} == {
        (c.candidate_id, b.name, s) for c in DESIGN.candidates for b in DESIGN.blocks for s in S
    }
    records = DESIGN.validation_records()
    assert len(records) == 120  # 40 units × 3 checkpoints
    assert len(set(records)) == 120
    assert {j for _, j in records} == {100, 200, 400}
    assert all(sum(1 for u, _ in records if u == unit) == 3 for unit in units)


def test_baselines_are_one_per_block_and_not_units():
    baselines = DESIGN.baselines()
    assert [b.block for b in baselines] == ["small-budget", "large-budget"]
    assert len({b.record_id for b in baselines}) == 2
    assert not {b.record_id for b in baselines} & {u.run_id for u in DESIGN.units()}
    assert "base" not in {c.candidate_id for c in DESIGN.candidates}
    assert len(DESIGN.units()) == 40  # the two baselines are not counted


def test_units_follow_the_execution_order_block_then_nuisance_then_candidate():
    units = DESIGN.units()
    ids = [c.candidate_id for c in DESIGN.candidates]
    assert [u.candidate_id for u in units[:5]] == ids
    assert {u.nuisance for u in units[:5]} == {S[0]} and units[5].nuisance == S[1]
    assert {u.block for u in units[:20]} == {"small-budget"}
    assert DESIGN.validation_records()[:3] == tuple((units[0], j) for j in (100, 200, 400))


def test_run_id_is_deterministic_and_depends_on_every_coordinate():
    unit = TrainingUnit("lora_r2", "small-budget", NuisanceTuple(0, 1, None))
    assert unit.run_id == TrainingUnit("lora_r2", "small-budget", NuisanceTuple(0, 1, None)).run_id
    assert len(unit.run_id) == 64 and int(unit.run_id, 16) >= 0
    others = [
        TrainingUnit("lora_r3", "small-budget", NuisanceTuple(0, 1, None)),
        TrainingUnit("lora_r2", "large-budget", NuisanceTuple(0, 1, None)),
        TrainingUnit("lora_r2", "small-budget", NuisanceTuple(1, 1, None)),
        TrainingUnit("lora_r2", "small-budget", NuisanceTuple(0, 0, None)),
        TrainingUnit("lora_r2", "small-budget", NuisanceTuple(0, 1, 0)),  # dropout 0 ≠ none
    ]
    assert len({unit.run_id, *(u.run_id for u in others)}) == 6
    assert NuisanceTuple(0, 1, None).label == "init=0,order=1,dropout=none"
    assert NuisanceTuple(2, 3, 4).label == "init=2,order=3,dropout=4"


def test_configured_rank_or_inf_is_the_rank_and_inf_for_full_fine_tuning():
    by_id = {c.candidate_id: c for c in DESIGN.candidates}
    assert by_id["lora_r3"].configured_rank_or_inf == 3.0
    assert by_id["full_ft"].configured_rank_or_inf == math.inf


# --- the content-hashed manifest -------------------------------------------------------------


def _change_candidate(design):
    first = dataclasses.replace(design.candidates[0], scale=1.0)
    return {"candidates": (first, *design.candidates[1:])}


def _change_block(design):
    block = dataclasses.replace(design.blocks[0], data_revision="stdlib-file-list@other")
    return {"blocks": (block, *design.blocks[1:])}


ONE_FIELD_CHANGES = {
    "question": lambda d: {"question": d.question + "?"},
    "estimands": lambda d: {"estimands": (*d.estimands, "retention contrast")},
    "non_claims": lambda d: {"non_claims": d.non_claims[:1]},
    "candidate-scale": _change_candidate,
    "candidate-order": lambda d: {"candidates": d.candidates[::-1]},
    "block-data-revision": _change_block,
    "nuisance-dropout": lambda d: {"nuisance": (NuisanceTuple(0, 0, None), *d.nuisance[1:])},
    "checkpoint-steps": lambda d: {"checkpoint_steps": (100, 200, 500)},
    "metric-direction": lambda d: {"metrics": {**d.metrics, "stress": "min"}},
    "missing-cell-policy": lambda d: {"missing_cell_policy": "fail-closed"},
    "gates": lambda d: {"gates": {**d.gates, "target": (73.0, None)}},
    "tie-break": lambda d: {"tie_break": ()},
    "early-stopping": lambda d: {"early_stopping": "monitor target, max, patience 2"},
    "revisions": lambda d: {"revisions": {"split": "v2"}},
    "environment": lambda d: {"environment": {"torch": "2.13.0"}},
    "planned-outputs": lambda d: {"planned_outputs": ("table 1",)},
}


@pytest.mark.parametrize("change", sorted(ONE_FIELD_CHANGES))
def test_digest_changes_on_any_one_field_change(change):
    changed = replace(DESIGN, **ONE_FIELD_CHANGES[change](DESIGN))
    assert changed.digest() != DESIGN.digest()
    assert len(changed.digest()) == 64


def test_digest_is_stable_across_the_construction_order_of_a_mapping_field():
    metrics = dict(reversed(list(DESIGN.metrics.items())))
    gates = dict(reversed(list(DESIGN.gates.items())))
    revisions_a = {"split": "v1", "code": "abc"}
    revisions_b = {"code": "abc", "split": "v1"}
    a = replace(DESIGN, metrics=metrics, gates=gates, revisions=revisions_a)
    b = replace(DESIGN, revisions=revisions_b)
    assert a.digest() == b.digest() and a == b
    assert teaching_design().digest() == DESIGN.digest()  # a fresh construction


def test_manifest_round_trips_through_to_dict_with_the_same_digest():
    again = DesignManifest.from_dict(DESIGN.to_dict())
    assert again == DESIGN and again.digest() == DESIGN.digest()
    with pytest.raises(ValueError, match="schema"):
        DesignManifest.from_dict({**DESIGN.to_dict(), "schema": "other/1"})


def test_check_unchanged_refuses_a_changed_design():
    declared = DESIGN.digest()
    check_unchanged(declared, teaching_design())  # the same design passes
    changed = replace(DESIGN, checkpoint_steps=(100, 200, 300))
    with pytest.raises(DesignChanged, match="a change after outcomes is a new study"):
        check_unchanged(declared, changed)
    assert issubclass(DesignChanged, ValueError)


def _dup_candidates(d):
    return {"candidates": (*d.candidates, d.candidates[0])}


REFUSED = {
    "duplicate-candidate": (_dup_candidates, r"candidates repeats \['lora_r1'\]"),
    "duplicate-block": (lambda d: {"blocks": (d.blocks[0], d.blocks[0])}, "blocks repeats"),
    "duplicate-nuisance": (lambda d: {"nuisance": (S[0], S[1], S[0])}, "nuisance repeats"),
    "empty-candidates": (lambda d: {"candidates": ()}, "candidates is empty"),
    "empty-nuisance": (lambda d: {"nuisance": ()}, "nuisance is empty"),
    "empty-metrics": (lambda d: {"metrics": {}, "gates": {}, "tie_break": ()}, "metrics="),
    "unknown-direction": (
        lambda d: {"metrics": {**d.metrics, "target": "higher"}},
        r"metrics\['target'\]='higher'; allowed: max, min",
    ),
    "steps-not-increasing": (lambda d: {"checkpoint_steps": (100, 100, 400)}, "strictly"),
    "steps-decreasing": (lambda d: {"checkpoint_steps": (400, 200)}, "strictly increasing"),
    "step-negative": (lambda d: {"checkpoint_steps": (-1, 100)}, "checkpoint_steps holds -1"),
    "step-zero-is-the-baseline": (lambda d: {"checkpoint_steps": (0, 100)}, "baseline record"),
    "steps-empty": (lambda d: {"checkpoint_steps": ()}, "checkpoint_steps="),
    "test-open": (lambda d: {"test_access": "open"}, "test_access='open'; allowed: closed"),
    "retry-any": (lambda d: {"retry_policy": "any"}, "retry_policy='any'"),
    "missing-policy": (lambda d: {"missing_cell_policy": "impute"}, "missing_cell_policy="),
    "gate-undeclared": (
        lambda d: {"gates": {"target_gain": (0.0, None)}},
        r"gates\['target_gain'\]: not a declared metric; declared: cost, retention, stress, target",
    ),
    "gate-lo-above-hi": (lambda d: {"gates": {"target": (2.0, 1.0)}}, "lo ≤ hi"),
    "tie-break-direction": (lambda d: {"tie_break": (("cost", "max"),)}, "declared direction"),
    "tie-break-undeclared": (
        lambda d: {"tie_break": (("latency", "min"),)},
        r"tie_break entry \('latency', 'min'\).*declared: cost, retention",
    ),
    "tie-break-rank-max": (lambda d: {"tie_break": (("configured_rank", "max"),)}, "tie_break"),
    "tie-break-repeated": (
        lambda d: {"tie_break": (("cost", "min"), ("cost", "min"))},
        "repeats a metric",
    ),
    "empty-non-claims": (lambda d: {"non_claims": ()}, "non_claims="),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_invalid_designs_are_refused_naming_the_field(case):
    change, message = REFUSED[case]
    with pytest.raises(ValueError, match=message):
        replace(DESIGN, **change(DESIGN))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "full", "rank": 4}, "method='full' with rank=4"),
        ({"rank": None}, "rank=None; allowed: >= 1"),
        ({"rank": 0}, "rank=0"),
        ({"scale": math.nan}, "scale=nan; allowed: finite"),
        ({"scale": -2.0}, "scale=-2.0; allowed: > 0"),
        ({"method": "dora"}, "method='dora'; allowed: full, lora, rslora"),
        ({"targets": ()}, r"targets=\(\)"),
        ({"targets": ("q_proj", "q_proj")}, "targets repeats"),
    ],
)
def test_candidate_pipelines_refuse_inconsistent_coordinates(kwargs, message):
    base = {"candidate_id": "c", "method": "lora", "rank": 2, "targets": ("q_proj",),
            "scale": 2.0, "optimizer": "adamw", "init": "gaussian-A/zero-B"}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        CandidatePipeline(**{**base, **kwargs})


def test_blocks_and_nuisance_tuples_refuse_bad_fields():
    with pytest.raises(ValueError, match="init_seed=-1"):
        NuisanceTuple(-1, 0, None)
    with pytest.raises(ValueError, match="order_seed=True"):
        NuisanceTuple(0, True, None)
    with pytest.raises(ValueError, match="data_budget=0"):
        dataclasses.replace(DESIGN.blocks[0], data_budget=0)
    with pytest.raises(ValueError, match="base_checkpoint=''"):
        dataclasses.replace(DESIGN.blocks[0], base_checkpoint="")


# --- §0x0CF–CG: paired contrasts ---------------------------------------------------------------

BLOCK = "small-budget"
# lora_r2 − full_ft: D = 1, 2, 6 at tuples 0–2; lora_r2 has no outcome at tuple 3
TABLE = {
    ("lora_r2", BLOCK, S[0]): 11.0,
    ("lora_r2", BLOCK, S[1]): 12.0,
    ("lora_r2", BLOCK, S[2]): 16.0,
    ("full_ft", BLOCK, S[0]): 10.0,
    ("full_ft", BLOCK, S[1]): 10.0,
    ("full_ft", BLOCK, S[2]): 10.0,
    ("full_ft", BLOCK, S[3]): 10.0,
    ("lora_r3", BLOCK, S[3]): 99.0,  # another candidate's cell: never a substitute
}


def test_paired_contrast_keeps_a_missing_cell_incomplete_and_does_not_substitute():
    c = paired_contrast(DESIGN, TABLE, "lora_r2", "full_ft", BLOCK, "target")
    assert c.pairs == ((S[0], 1.0), (S[1], 2.0), (S[2], 6.0))
    assert c.incomplete == (S[3],)
    assert c.mean == 3.0  # (1 + 2 + 6)/3
    assert c.run_variance == 7.0  # ((−2)² + (−1)² + 3²)/(3 − 1) = 14/2, n − 1
    assert c.range == (1.0, 6.0)
    assert c.direction == "max" and c.n_pairs == 3
    text = c.describe()
    assert "range [1, 6] over 3 nuisance tuples (a range, not an interval)" in text
    assert "incomplete (not substituted): init=1,order=1,dropout=3" in text
    swapped = paired_contrast(DESIGN, TABLE, "full_ft", "lora_r2", BLOCK, "target")
    assert (swapped.mean, swapped.run_variance, swapped.range) == (-3.0, 7.0, (-6.0, -1.0))


def test_paired_contrast_with_one_pair_has_no_variance_and_with_none_no_mean():
    one = {k: v for k, v in TABLE.items() if k[2] in (S[0], S[3])}
    c = paired_contrast(DESIGN, one, "lora_r2", "full_ft", BLOCK, "target")
    assert (c.mean, c.run_variance, c.range) == (1.0, None, (1.0, 1.0))
    assert "over 1 nuisance tuple (a range" in c.describe() and "undefined" in c.describe()
    empty = paired_contrast(DESIGN, {}, "lora_r2", "full_ft", BLOCK, "target")
    assert (empty.mean, empty.run_variance, empty.range, empty.incomplete) == (None, None, None, S)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "11"], ids=["nan", "inf", "text"])
def test_paired_contrast_refuses_a_non_finite_outcome(bad):
    table = {**TABLE, ("lora_r2", BLOCK, S[0]): bad}
    with pytest.raises(ValueError, match=r"outcome lora_r2/small-budget/init=0"):
        paired_contrast(DESIGN, table, "lora_r2", "full_ft", BLOCK, "target")


def test_paired_contrast_refuses_an_undeclared_nuisance_tuple():
    table = {**TABLE, ("lora_r2", BLOCK, NuisanceTuple(7, 7, 7)): 12.0}
    with pytest.raises(ValueError, match="undeclared nuisance tuple"):
        paired_contrast(DESIGN, table, "lora_r2", "full_ft", BLOCK, "target")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("lora_r9", "full_ft", BLOCK, "target"), "candidate='lora_r9'; allowed: lora_r1"),
        (("lora_r2", "base", BLOCK, "target"), "reference='base'"),
        (("lora_r2", "lora_r2", BLOCK, "target"), "is the candidate"),
        (("lora_r2", "full_ft", "huge-budget", "target"), "block='huge-budget'"),
        (("lora_r2", "full_ft", BLOCK, "loss"), "metric='loss'; allowed: cost, retention"),
    ],
)
def test_paired_contrast_refuses_unknown_names(args, message):
    with pytest.raises(ValueError, match=message):
        paired_contrast(DESIGN, TABLE, *args)


def test_fail_closed_policy_blocks_selection_on_a_missing_cell():
    full = {(u.candidate_id, u.block, u.nuisance): 1.0 for u in DESIGN.units()}
    assert check_complete(DESIGN, full) == ()
    partial = {k: v for k, v in full.items() if k != ("lora_r2", BLOCK, S[3])}
    assert missing_cells(DESIGN, partial) == (("lora_r2", BLOCK, S[3]),)
    assert check_complete(DESIGN, partial) == (("lora_r2", BLOCK, S[3]),)  # keep-incomplete
    strict = replace(DESIGN, missing_cell_policy="fail-closed")
    assert check_complete(strict, full) == ()
    with pytest.raises(IncompleteDesign, match=r"1 missing cell\(s\) .*fail-closed"):
        check_complete(strict, partial)


# --- §0x0CI: attempt lineage ---------------------------------------------------------------

RUN = DESIGN.units()[0].run_id


def attempts(*terminations, env=ENV):
    return [Attempt(RUN, i + 1, env, t) for i, t in enumerate(terminations)]


def test_infrastructure_failure_then_completed_counts_the_completed_attempt():
    first = attempts("infrastructure_failure")
    assert may_retry(first)
    chain = attempts("infrastructure_failure", "completed")
    outcome = run_outcome(chain)
    assert outcome is chain[1] and outcome.ordinal == 2 and is_complete(outcome)
    assert not may_retry(chain)
    assert len(chain) == 2  # the failed attempt is kept in the lineage


def test_numerical_failure_is_the_outcome_and_is_not_retried():
    chain = attempts("numerical_failure")
    assert not may_retry(chain)
    assert run_outcome(chain).termination == "numerical_failure"
    assert not is_complete(run_outcome(chain))
    assert is_complete(run_outcome(attempts("validation_stopped")))


@pytest.mark.parametrize("first", ["numerical_failure", "completed", "admission_failure"])
def test_run_outcome_refuses_a_retry_after_numerical_failure_or_completion(first):
    with pytest.raises(ValueError, match=f"attempt 1 ended '{first}' and was retried"):
        run_outcome(attempts(first, "completed"))
    with pytest.raises(ValueError, match="non-infrastructure"):
        may_retry(attempts(first, "infrastructure_failure"))


def test_run_outcome_refuses_a_broken_lineage():
    with pytest.raises(ValueError, match="attempts is empty"):
        run_outcome([])
    gap = [Attempt(RUN, 1, ENV, "infrastructure_failure"), Attempt(RUN, 3, ENV, "completed")]
    with pytest.raises(ValueError, match=r"ordinals=\[1, 3\]"):
        run_outcome(gap)
    other = DESIGN.units()[1].run_id
    mixed = [Attempt(RUN, 1, ENV, "infrastructure_failure"), Attempt(other, 2, ENV, "completed")]
    with pytest.raises(ValueError, match="one run_id"):
        run_outcome(mixed)


def test_run_outcome_takes_no_scores():
    assert list(inspect.signature(run_outcome).parameters) == ["attempts"]
    assert list(inspect.signature(may_retry).parameters) == ["attempts"]


def test_unknown_termination_and_bad_ordinals_are_refused():
    with pytest.raises(ValueError, match="termination='diverged'; allowed: completed"):
        Attempt(RUN, 1, ENV, "diverged")
    with pytest.raises(ValueError, match="ordinal=0"):
        Attempt(RUN, 0, ENV, "completed")
    with pytest.raises(ValueError, match="environment_digest=''"):
        Attempt(RUN, 1, "", "completed")


def test_attempt_id_differs_by_ordinal_and_environment():
    a = Attempt(RUN, 1, ENV, "infrastructure_failure")
    assert a.attempt_id == Attempt(RUN, 1, ENV, "completed").attempt_id  # termination is not id
    assert a.attempt_id != Attempt(RUN, 2, ENV, "infrastructure_failure").attempt_id
    assert a.attempt_id != Attempt(RUN, 1, "env-digest-1", "infrastructure_failure").attempt_id
    assert a.attempt_id != Attempt(DESIGN.units()[1].run_id, 1, ENV, "completed").attempt_id


def test_termination_classes_are_the_harness_classes():
    assert _design_attempts.TERMINATION_CLASSES is errors.TERMINATION_CLASSES
    assert set(RETRYABLE_TERMINATIONS) | set(COMPLETE_TERMINATIONS) < set(
        errors.TERMINATION_CLASSES
    )
    assert RETRYABLE_TERMINATIONS == ("infrastructure_failure",)

