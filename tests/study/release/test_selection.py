"""Tests for gaugelab.study.release.selection: the typed records, orientation, gates, checkpoint
selection, fail-closed validation, and the seed's exact validation oracle (seed 003 §0x0BR–BT)
run through gaugelab.study.stats.compare."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest

from gaugelab.study.release import selection as sel
from gaugelab.study.release.selection import (
    CandidateManifest,
    CandidateRecord,
    CheckpointScores,
    Cost,
    GatePolicy,
    KernelBundle,
    MetricDeclaration,
    OperationalScores,
    Reconstruction,
    SelectionError,
    TheoremScope,
    Trajectory,
    diagnostic_failures,
    forgetting,
    kernel_gate,
    operational_scores,
    oriented,
    reconstruction_gate,
    select_checkpoint,
    selection_points,
    target_gain,
    validate_records,
)
from gaugelab.study.stats.compare import feasible_selection, pareto_front, select_then_report

DIGEST = "a" * 64
DECLARATIONS = tuple(
    MetricDeclaration(name=m, direction="max", revision="v1", unit="points")
    for m in ("target", "retention", "stress")
)
REVISIONS = {"target": "v1", "retention": "v1", "stress": "v1"}

# §0x0BR: (id, method, rank, target, retention, stress, cost, tail E_i); lora_r3 requests the
# kernel bundle and lacks it (§0x0BR item 3).
TABLE = [
    ("base", "base", None, 50, 90, 78, 0, 30),
    ("lora_r1", "lora", 1, 62, 88, 82, 8, 14),
    ("lora_r2", "lora", 2, 74, 85, 89, 16, 5),
    ("lora_r3", "lora", 3, 73, 82, 88, 24, 1),
    ("lora_r4", "lora", 4, 82, 74, 90, 32, 0),
    ("full_ft", "full", None, 88, 65, 93, 120, 0),
]
NAMES = [row[0] for row in TABLE]
BASE_SCORES = {"target": 50.0, "retention": 90.0, "stress": 78.0}


def _record(cid, method, rank, target, retention, stress, cost, tail) -> CandidateRecord:
    scores = {"target": float(target), "retention": float(retention), "stress": float(stress)}
    return CandidateRecord(
        candidate_id=cid,
        manifest_digest=DIGEST,
        method=method,
        checkpoint_id=f"{cid}@best",
        revisions=REVISIONS,
        operational=operational_scores(scores, BASE_SCORES, DECLARATIONS),
        cost=Cost(trainable_parameters=cost, optimizer_state_numel=2 * cost, wall_seconds=1.0),
        reconstruction=Reconstruction(
            rank=0 if method == "base" else rank,
            tail_energy=float(tail),
            source_digest="b" * 64,
            convention="absolute",
        ),
        kernel=KernelBundle(requested=True, complete=False) if cid == "lora_r3" else None,
        configured_rank_or_inf=math.inf if rank is None else float(rank),
    )


RECORDS = [_record(*row) for row in TABLE]
POLICY = GatePolicy(  # τ_S = 72, τ_R = 84, τ_U = 88, τ_E = 5, D_i = 1
    declarations=DECLARATIONS,
    floors={"target": (72.0, None), "retention": (84.0, None), "stress": (88.0, None)},
    max_tail=5.0,
    tail_convention="absolute",
)


def _manifest(**changes) -> CandidateManifest:
    fields = dict(
        candidate_id="lora_r2",
        base_model_id="tiny-base@1",
        tokenizer_id="chars@1",
        method="lora",
        rank=2,
        target_modules=("v_proj", "q_proj"),
        alpha=4.0,
        dropout=0.05,
        init="kaiming-a/zero-b",
        optimizer="adamw",
        schedule="cosine",
        precision="float32",
        clipping=1.0,
        data_hash="c" * 64,
        sample_order="seeded-shuffle",
        token_budget=4096,
        seeds=(0, 1, 2),
        checkpoint_steps=(100, 200),
        checkpoint_rule="max target",
        target_validation="target-val@v1",
        target_metric_revision="v1",
        retention_validation="retention-val@v1",
        retention_metric_revision="v1",
        stress_validation="stress-val@v1",
        stress_metric_revision="v1",
        test_splits=("target-test@v1", "retention-test@v1"),
        probe_ids=("probe@v1",),
        trainable_parameters=16,
        optimizer_state_numel=32,
        peak_memory_accounting="not measured",
    )
    fields.update(changes)
    return CandidateManifest(**fields)


# --------------------------------------------------------------------------------------------
# Orientation (§0x0BB, §0x0BL)
# --------------------------------------------------------------------------------------------


def test_forgetting_is_base_minus_candidate_for_higher_is_better():
    assert forgetting(85.0, 90.0, "max") == 5.0  # §0x0BL: 90 → 85 is 5 points
    assert [r.operational.forgetting for r in RECORDS] == [0, 2, 5, 8, 16, 25]  # §0x0BR column
    assert [r.operational.target_gain for r in RECORDS] == [0, 12, 24, 23, 32, 38]


def test_lower_is_better_loss_is_oriented_before_differencing():
    assert target_gain(2.0, 2.5, "min") == 0.5  # L_0 − L_i = 2.5 − 2.0
    assert forgetting(1.75, 1.5, "min") == 0.25  # L_i − L_0 = 1.75 − 1.5
    assert oriented(2.0, "min") == -2.0
    assert oriented(2.0, "max") == 2.0
    loss = tuple(dataclasses.replace(d, direction="min") for d in DECLARATIONS)
    op = operational_scores(
        {"target": 2.0, "retention": 1.75, "stress": 3.0},
        {"target": 2.5, "retention": 1.5, "stress": 3.5},
        loss,
    )
    assert (op.target_gain, op.forgetting, op.stress_gain) == (0.5, 0.25, 0.5)
    assert (op.target, op.retention) == (2.0, 1.75)  # raw values kept


@pytest.mark.parametrize(
    "call",
    [
        lambda: oriented(1.0, "up"),
        lambda: target_gain(1.0, 0.0, "up"),
        lambda: forgetting(1.0, 0.0, "up"),
    ],
)
def test_unknown_direction_is_refused_by_every_orientation(call):
    with pytest.raises(SelectionError, match="direction='up'"):
        call()


def test_metric_declaration_refuses_an_unknown_direction_and_metric():
    with pytest.raises(SelectionError, match="direction='higher'"):
        MetricDeclaration(name="target", direction="higher", revision="v1")
    with pytest.raises(SelectionError, match="name='toxicity'"):
        MetricDeclaration(name="toxicity", direction="min", revision="v1")
    with pytest.raises(SelectionError, match="revision=''"):
        MetricDeclaration(name="target", direction="max", revision="")


# --------------------------------------------------------------------------------------------
# The manifest (§0x0BG)
# --------------------------------------------------------------------------------------------


def test_manifest_digest_is_canonical_and_changes_with_any_field():
    m = _manifest()
    assert m.target_modules == ("q_proj", "v_proj")  # a surface is a set: stored sorted
    assert m.digest() == _manifest(target_modules=("q_proj", "v_proj")).digest()
    assert len(m.digest()) == 64
    assert m.digest() != _manifest(target_modules=("q_proj", "v_proj", "o_proj")).digest()
    assert m.digest() != _manifest(sample_order="other").digest()
    assert m.configured_rank_or_inf == 2.0
    full = _manifest(method="full", rank=None, alpha=None, target_modules=())
    assert full.configured_rank_or_inf == math.inf


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"method": "full"}, "rank=2; allowed: None"),
        ({"rank": None}, "rank=None; allowed: an integer ≥ 1"),
        ({"rank": 0}, "rank=0"),
        ({"method": "dora"}, "method='dora'"),
        ({"target_modules": ()}, "target_modules"),
        ({"alpha": None}, "alpha=None"),
        ({"test_splits": ("target-val@v1",)}, "shared: target-val@v1"),
        ({"test_splits": ("probe@v1",)}, "shared: probe@v1"),
        ({"test_splits": ()}, "test_splits"),
        ({"seeds": (1, 1)}, "seeds"),
        ({"checkpoint_steps": (200, 100)}, "checkpoint_steps"),
        ({"dropout": 1.0}, "dropout"),
        ({"token_budget": -1}, "token_budget"),
    ],
)
def test_manifest_refuses_inconsistent_fields(changes, match):
    with pytest.raises(SelectionError, match=match):
        _manifest(**changes)


def test_record_from_manifest_carries_its_identity():
    m = _manifest()
    r = CandidateRecord.from_manifest(
        m,
        checkpoint_id="ck",
        revisions=REVISIONS,
        operational=RECORDS[2].operational,
        cost=Cost(16, 32, 1.0),
    )
    assert (r.candidate_id, r.manifest_digest, r.method) == ("lora_r2", m.digest(), "lora")
    assert r.configured_rank_or_inf == 2.0
    validate_records([r], DECLARATIONS, manifests=[m])
    changed = dataclasses.replace(r, manifest_digest=_manifest(seeds=(5,)).digest())
    with pytest.raises(SelectionError, match="new candidate"):
        validate_records([changed], DECLARATIONS, manifests=[m])
    with pytest.raises(SelectionError, match="optimizer_state_numel=33"):
        validate_records(
            [dataclasses.replace(r, cost=Cost(16, 33, 1.0))], DECLARATIONS, manifests=[m]
        )


def test_record_refuses_a_rank_that_does_not_fit_its_method():
    with pytest.raises(SelectionError, match="inf for method 'full'"):
        dataclasses.replace(RECORDS[5], configured_rank_or_inf=8.0)
    with pytest.raises(SelectionError, match="integer ≥ 1 for lora"):
        dataclasses.replace(RECORDS[1], configured_rank_or_inf=math.inf)
    with pytest.raises(SelectionError, match=r"reconstruction\.rank=3"):
        dataclasses.replace(RECORDS[1], reconstruction=RECORDS[3].reconstruction)


# --------------------------------------------------------------------------------------------
# Checkpoint selection (§0x0BI)
# --------------------------------------------------------------------------------------------


def _ck(step, value, split="validation"):
    return CheckpointScores(step, f"ck{step}", split, {"target": value})


def test_select_checkpoint_takes_the_best_and_breaks_ties_by_earliest_step():
    cks = [_ck(300, 0.7), _ck(100, 0.5), _ck(200, 0.7)]
    assert select_checkpoint(cks, "target", "max").step == 200
    assert select_checkpoint(cks, "target", "min").step == 100
    assert select_checkpoint([_ck(300, 2.0), _ck(200, 2.0)], "target", "min").step == 200


@pytest.mark.parametrize(
    ("checkpoints", "monitor", "match"),
    [
        ([_ck(100, 0.5), _ck(200, 0.9, split="test")], "target", "split='test'"),
        ([_ck(100, math.nan)], "target", "nan"),
        ([_ck(100, 0.5)], "retention", "retention=None"),
        ([], "target", "checkpoints=\\[\\]"),
        ([_ck(100, 0.5), _ck(100, 0.6)], "target", "steps"),
    ],
)
def test_select_checkpoint_fails_closed(checkpoints, monitor, match):
    with pytest.raises(SelectionError, match=match):
        select_checkpoint(checkpoints, monitor, "max")


# --------------------------------------------------------------------------------------------
# Gates (§0x0BM, §0x0BN)
# --------------------------------------------------------------------------------------------


def test_reconstruction_gate_passes_rank_two_exactly_and_fails_rank_one():
    # §0x0BM: tails 30, 14, 5, 1, 0 at ranks 0–4; the gate ‖ΔW − ΔW_r‖² ≤ 5
    assert [r.reconstruction.tail_energy for r in RECORDS[:5]] == [30, 14, 5, 1, 0]
    assert [reconstruction_gate(r, 5.0) for r in RECORDS] == [False, False, True, True, True, True]


def test_reconstruction_gate_missing_measurement():
    full = dataclasses.replace(RECORDS[5], reconstruction=None)
    lora = dataclasses.replace(RECORDS[2], reconstruction=None)
    assert reconstruction_gate(full, 0.0)  # the full update reconstructs itself: tail 0
    with pytest.raises(SelectionError, match="measurement is missing"):
        reconstruction_gate(lora, 5.0)
    with pytest.raises(SelectionError, match="convention='absolute'"):
        reconstruction_gate(RECORDS[2], 5.0, convention="relative")
    undeclared = GatePolicy(declarations=DECLARATIONS)
    tails = [p["tail"] for p in selection_points([RECORDS[0], lora, full], undeclared)]
    assert tails == [30.0, math.inf, 0.0]
    with pytest.raises(SelectionError, match="measurement is missing"):
        selection_points([RECORDS[0], lora], POLICY)


def test_kernel_gate_is_not_requested_or_complete():
    complete = {k: 0.0 for k in sel.KERNEL_BUNDLE_FIELDS}
    cases = [
        (None, True),
        (KernelBundle(requested=False, complete=False), True),
        (KernelBundle(requested=True, complete=False), False),
        (KernelBundle(requested=True, complete=True, fields=complete), True),
    ]
    for bundle, expected in cases:
        assert kernel_gate(dataclasses.replace(RECORDS[2], kernel=bundle)) is expected
    with pytest.raises(SelectionError, match="complete=True"):
        KernelBundle(requested=True, complete=True, fields={"kernel_drift": 0.1})


def test_declared_trajectory_and_budget_checks_enter_diagnostics():
    policy = GatePolicy(
        declarations=DECLARATIONS,
        trajectory_bounds={"max_update_norm": (None, 2.0)},
        budgets={"wall_seconds": 10.0},
    )
    ok = dataclasses.replace(RECORDS[2], trajectory=Trajectory({"max_update_norm": 2.0}))
    bad = dataclasses.replace(
        RECORDS[3],
        trajectory=Trajectory({"max_update_norm": 2.5}),
        cost=Cost(24, 48, wall_seconds=11.0),
    )
    assert diagnostic_failures(ok, policy) == ()
    assert diagnostic_failures(bad, policy) == (
        "kernel_gate",
        "trajectory:max_update_norm",
        "budget:wall_seconds",
    )
    assert [p["diagnostics"] for p in selection_points([ok, bad], policy)] == [1.0, 0.0]
    with pytest.raises(SelectionError, match="trajectory\\['max_update_norm'\\]"):
        diagnostic_failures(RECORDS[2], policy)
    with pytest.raises(SelectionError, match=r"cost\.peak_mib"):
        diagnostic_failures(ok, GatePolicy(declarations=DECLARATIONS, budgets={"peak_mib": 1.0}))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"floors": {"accuracy": (0.0, None)}}, "floors key"),
        ({"floors": {"target": (2.0, 1.0)}}, "lo ≤ hi"),
        ({"max_tail": -1.0}, "max_tail"),
        ({"cost": "rank"}, "cost='rank'"),
        ({"order": (("cost", "up"),)}, "direction='up'"),
        ({"order": (("loss", "min"),)}, "order key"),
        ({"declarations": DECLARATIONS[:2]}, "no declaration for \\['stress'\\]"),
        ({"declarations": (*DECLARATIONS, DECLARATIONS[0])}, "declared twice"),
    ],
)
def test_gate_policy_refuses_bad_fields(changes, match):
    with pytest.raises(SelectionError, match=match):
        dataclasses.replace(POLICY, **changes)


def test_gate_policy_digest_changes_with_a_floor():
    assert POLICY.digest() == dataclasses.replace(POLICY).digest()
    assert POLICY.digest() != dataclasses.replace(POLICY, floors={"target": (73.0, None)}).digest()


# --------------------------------------------------------------------------------------------
# The exact validation oracle (§0x0BR–0x0BT) through study.compare
# --------------------------------------------------------------------------------------------


def test_oracle_points_are_the_table():
    points = selection_points(RECORDS, POLICY)
    assert [(p["target"], p["retention"], p["stress"], p["cost"], p["tail"]) for p in points] == [
        row[3:] for row in TABLE
    ]
    assert [p["configured_rank"] for p in points] == [math.inf, 1, 2, 3, 4, math.inf]
    assert [p["diagnostics"] for p in points] == [1, 1, 1, 0, 1, 1]  # r3 lacks its bundle
    assert [p["id_order"] for p in points] == [0, 2, 3, 4, 5, 1]  # sorted: base, full_ft, lora…


def test_oracle_frontier_is_all_but_lora_r3():
    front = pareto_front(selection_points(RECORDS, POLICY), POLICY.objectives())
    assert [NAMES[i] for i in front] == ["base", "lora_r1", "lora_r2", "lora_r4", "full_ft"]


def test_oracle_feasible_set_is_lora_r2_with_the_audited_violations():
    points = selection_points(RECORDS, POLICY)
    out = feasible_selection(points, POLICY.constraints(), POLICY.tie_break())
    assert [NAMES[i] for i in out.feasible] == ["lora_r2"]
    assert NAMES[out.chosen] == "lora_r2"
    assert out.violations == (
        ("target", "stress", "tail"),  # base
        ("target", "stress", "tail"),  # rank 1 fails target, stress and reconstruction
        (),  # rank 2 passes every gate (E = 5 ≤ 5 exactly)
        ("retention", "diagnostics"),  # rank 3 fails retention, lacks the kernel bundle
        ("retention",),  # rank 4
        ("retention",),  # full fine-tuning
    )


def test_oracle_select_then_report_opens_the_test_record_of_lora_r2_only():
    points = selection_points(RECORDS, POLICY)
    test_r2 = {"target": 73.0, "retention": 85.0, "stress": 88.0}  # §0x0BT
    candidates = [
        {"validation": p, **({"test": test_r2} if i == 2 else {})} for i, p in enumerate(points)
    ]
    out = select_then_report(candidates, POLICY.constraints(), POLICY.tie_break())
    assert (out.chosen, dict(out.report)) == (2, test_r2)


def test_tie_break_is_cost_then_rank_then_candidate_id_whatever_the_input_order():
    loose = dataclasses.replace(POLICY, floors={}, max_tail=None, require_kernel_gate=False)
    twin = dataclasses.replace(RECORDS[2], candidate_id="lora_r2_twin")  # same cost and rank
    records = [twin, RECORDS[4], RECORDS[2], RECORDS[3]]
    points = selection_points(records, loose)
    chosen = feasible_selection(points, loose.constraints(), loose.tie_break()).chosen
    assert records[chosen].candidate_id == "lora_r2"  # cost 16 ties the twin; the id decides
    no_id = feasible_selection(points, loose.constraints(), loose.order).chosen
    assert records[no_id].candidate_id == "lora_r2_twin"  # without the id: first index


# --------------------------------------------------------------------------------------------
# One-field mutations of the fixture, each refused (§0x0BU)
# --------------------------------------------------------------------------------------------


def _mutate(i, **changes):
    records = list(RECORDS)
    records[i] = dataclasses.replace(records[i], **changes)
    return records


def _op(i, **changes) -> OperationalScores:
    return dataclasses.replace(RECORDS[i].operational, **changes)


@pytest.mark.parametrize(
    ("records", "match"),
    [
        (_mutate(2, operational=_op(2, target=math.nan)), "operational.target=nan"),
        (_mutate(1, cost=Cost(8, 16, math.nan)), "cost.wall_seconds=nan"),
        (_mutate(3, trajectory=Trajectory({"norm": math.inf})), "trajectory.summary.norm=inf"),
        (_mutate(4, revisions={"target": "v1", "retention": "v1"}), "lacks metric 'stress'"),
        (_mutate(4, revisions={**REVISIONS, "retention": "v2"}), "mixed revisions"),
        (_mutate(5, candidate_id="lora_r1"), "duplicate candidate ids \\['lora_r1'\\]"),
        (_mutate(2, theorem=TheoremScope(True)), "theorem_rank_used_as_selector=True"),
        (_mutate(2, operational=_op(2, forgetting=4.0)), "forgetting=4.0; allowed: 5.0"),
        (_mutate(2, operational=_op(2, baseline_id="other")), "baseline ids"),
        ([], "records=\\[\\]"),
    ],
)
def test_validate_records_refuses_each_one_field_mutation(records, match):
    validate_records(RECORDS, DECLARATIONS)  # the fixture itself passes
    with pytest.raises(SelectionError, match=match):
        validate_records(records, DECLARATIONS)
    with pytest.raises(SelectionError, match=match):
        selection_points(records, POLICY)


def test_validate_records_refuses_an_unknown_direction_and_mixed_tail_conventions():
    broken = copy.copy(DECLARATIONS[0])
    object.__setattr__(broken, "direction", "up")  # bypasses the constructor's own check
    with pytest.raises(SelectionError, match="direction='up'"):
        validate_records(RECORDS, (broken, *DECLARATIONS[1:]))
    with pytest.raises(SelectionError, match="no declaration"):
        validate_records(RECORDS, DECLARATIONS[1:])
    relative = Reconstruction(rank=2, tail_energy=0.25, source_digest="d", convention="relative")
    with pytest.raises(SelectionError, match="conventions"):
        validate_records(_mutate(2, reconstruction=relative), DECLARATIONS)


def test_the_selection_trace_freezes_lora_r2_then_opens_the_sealed_test_once(tmp_path):
    from gaugelab.study.release.sealed import SealedTestError, SealedTestStore

    def run_trace(policy: GatePolicy, study: str):
        seal = SealedTestStore(
            tmp_path / "store.sqlite",
            study=study,
            design_digest=policy.digest(),
            test_splits=("target-test@v1",),
            loader=lambda: {"lora_r2": {"target": 73.0, "retention": 85.0, "stress": 88.0}},
        )
        points = selection_points(RECORDS, policy)
        out = feasible_selection(points, policy.constraints(), policy.tie_break())
        if out.chosen is None:
            seal.record_no_release(out.reason)
            return seal, None
        chosen = RECORDS[out.chosen]
        seal.freeze(chosen.candidate_id, chosen.checkpoint_id, chosen.manifest_digest)
        assert not seal.was_opened()
        return seal, seal.open_once()[chosen.candidate_id]

    seal, report = run_trace(POLICY, "oracle")
    assert report == {"target": 73.0, "retention": 85.0, "stress": 88.0}  # §0x0BT
    assert seal.status().frozen.candidate_id == "lora_r2"
    strict = dataclasses.replace(POLICY, floors={**POLICY.floors, "retention": (95.0, None)})
    empty, none = run_trace(strict, "oracle-strict")
    assert none is None
    assert empty.status().no_release == "no release: the feasible set is empty"
    with pytest.raises(SealedTestError, match="no release was recorded"):
        empty.open_once()
    seal.close()
    empty.close()
