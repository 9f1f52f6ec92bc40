"""Tests for gaugelab.study.compare: exact small cases and the Low-Rank Theory oracles."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from fractions import Fraction

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from gaugelab.study import compare
from gaugelab.study.compare import (
    Envelope,
    feasible_selection,
    iso_quality_cost_ratio,
    paired_differences,
    pareto_front,
    select_then_report,
    upper_envelope,
)

# --------------------------------------------------------------------------------------------
# paired_differences
# --------------------------------------------------------------------------------------------


def test_pairing_uses_shared_seeds_only_and_reports_unpaired():
    a = {0: 1.0, 1: 2.0, 2: 4.0, 5: 9.0}
    b = {2: 1.0, 0: 0.5, 1: 2.5, 7: 3.0}
    r = paired_differences(a, b)
    assert r.seeds == (0, 1, 2)
    assert r.differences == (0.5, -0.5, 3.0)  # 1 − 0.5, 2 − 2.5, 4 − 1
    assert r.mean == 1.0  # (0.5 − 0.5 + 3) / 3
    assert r.range == (-0.5, 3.0)
    assert r.unpaired_a == (5,)
    assert r.unpaired_b == (7,)
    assert r.note is None


def test_bootstrap_interval_contains_mean_and_is_deterministic_given_rng_seed():
    a = {s: v for s, v in enumerate([3.0, 5.0, 4.0, 6.0, 2.0, 5.5])}
    b = {s: v for s, v in enumerate([2.0, 3.0, 3.5, 4.0, 2.5, 4.0])}
    r1 = paired_differences(a, b, n_boot=4000, rng_seed=7)
    r2 = paired_differences(a, b, n_boot=4000, rng_seed=7)
    assert r1 == r2
    lo, hi = r1.interval
    assert lo <= r1.mean <= hi
    assert r1.range[0] <= lo <= hi <= r1.range[1]  # resample means never leave the range


def test_bootstrap_interval_exact_for_two_seeds():
    # d = (0, 1): resample means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4.
    a, b = {1: 1.0, 2: 2.0}, {1: 1.0, 2: 1.0}
    assert paired_differences(a, b, level=0.95).interval == (0.0, 1.0)  # 2.5 %, 97.5 % quantiles
    assert paired_differences(a, b, level=0.4).interval == (0.5, 0.5)  # 30 %, 70 % quantiles


def test_constant_differences_give_a_degenerate_interval():
    r = paired_differences({0: 1.25, 1: 2.25, 2: 3.25}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert r.interval == (0.25, 0.25)
    assert r.range == (0.25, 0.25)


def test_one_shared_seed_reports_range_and_no_interval():
    r = paired_differences({3: 2.0, 4: 1.0}, {3: 0.5})
    assert r.seeds == (3,)
    assert r.differences == (1.5,)
    assert r.mean == 1.5
    assert r.range == (1.5, 1.5)
    assert r.interval is None
    assert "at least 2" in r.note
    assert r.unpaired_a == (4,)
    assert r.unpaired_b == ()


@pytest.mark.parametrize(
    ("a", "b", "kwargs", "match"),
    [
        ({0: 1.0}, {1: 1.0}, {}, "no shared seed"),
        ({0: math.nan, 1: 1.0}, {0: 1.0, 1: 1.0}, {}, "not finite"),
        ({0: 1.0, 1: 1.0}, {0: 1.0, 1: math.inf}, {}, "not finite"),
        ({0: 1.0, 9: math.nan}, {0: 1.0}, {}, "not finite"),  # even an unpaired NaN fails closed
        ({0: 1.0, 1: 2.0}, {0: 1.0, 1: 1.0}, {"n_boot": 0}, "n_boot"),
        ({0: 1.0, 1: 2.0}, {0: 1.0, 1: 1.0}, {"level": 1.0}, "level"),
    ],
)
def test_paired_differences_rejects_bad_input(a, b, kwargs, match):
    with pytest.raises(ValueError, match=match):
        paired_differences(a, b, **kwargs)


_scores = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.integers(0, 20), st.tuples(_scores, _scores), min_size=2, max_size=8))
def test_swapping_arms_negates_the_paired_summary(pairs):
    a = {s: x for s, (x, _) in pairs.items()}
    b = {s: y for s, (_, y) in pairs.items()}
    ab = paired_differences(a, b, n_boot=200)
    ba = paired_differences(b, a, n_boot=200)
    assert ba.differences == tuple(-d for d in ab.differences)
    assert ba.range == (-ab.range[1], -ab.range[0])
    assert ab.range[0] <= ab.interval[0] <= ab.interval[1] <= ab.range[1]


# --------------------------------------------------------------------------------------------
# upper_envelope
# --------------------------------------------------------------------------------------------


def test_envelope_on_five_point_grid_with_non_monotone_score():
    env = upper_envelope([1.0, 2.0, 3.0, 4.0, 5.0], [0.25, 0.75, 0.5, 1.0, 0.875])
    assert env.costs == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert env.scores == (0.25, 0.75, 0.5, 1.0, 0.875)  # raw measurements kept
    assert env.values == (0.25, 0.75, 0.75, 1.0, 1.0)  # U(C_i) = max_{j ≤ i} s(C_j)


def test_envelope_sorts_costs_and_takes_best_run_per_cost():
    env = upper_envelope([4.0, 1.0, 2.0, 2.0, 3.0], [0.5, 0.25, 0.125, 0.375, 0.25])
    assert env.costs == (1.0, 2.0, 3.0, 4.0)
    assert env.scores == (0.25, 0.375, 0.25, 0.5)
    assert env.values == (0.25, 0.375, 0.375, 0.5)


def test_value_at_is_none_with_reason_below_the_grid_and_a_step_function_above():
    env = upper_envelope([1.0, 2.0, 3.0, 4.0, 5.0], [0.25, 0.75, 0.5, 1.0, 0.875])
    below = env.value_at(0.5)
    assert below.value is None
    assert "below the smallest grid cost" in below.reason
    assert env.value_at(1.0).value == 0.25
    assert env.value_at(2.5).value == 0.75  # best measured run at cost ≤ 2.5
    assert env.value_at(3.0).value == 0.75
    assert env.value_at(100.0).value == 1.0
    assert env.value_at(3.0).reason is None


def test_cost_to_reach_is_the_smallest_grid_cost_reaching_q():
    env = upper_envelope([1.0, 2.0, 3.0, 4.0, 5.0], [0.25, 0.75, 0.5, 1.0, 0.875])
    assert env.cost_to_reach(0.75) == 2.0
    assert env.cost_to_reach(0.8) == 4.0
    assert env.cost_to_reach(-3.0) == 1.0
    assert env.cost_to_reach(1.5) == math.inf


@pytest.mark.parametrize(
    ("costs", "scores"),
    [
        ([], []),
        ([1.0, 2.0], [1.0]),
        ([-1.0, 2.0], [1.0, 2.0]),
        ([1.0, math.inf], [1.0, 2.0]),
        ([1.0, 2.0], [1.0, math.nan]),
    ],
)
def test_upper_envelope_rejects_bad_input(costs, scores):
    with pytest.raises(ValueError, match="upper_envelope"):
        upper_envelope(costs, scores)


def test_envelope_construction_checks_the_running_maximum():
    with pytest.raises(ValueError, match="running maximum"):
        Envelope(costs=(1.0, 2.0), scores=(1.0, 0.5), values=(1.0, 0.5))
    with pytest.raises(ValueError, match="strictly increasing"):
        Envelope(costs=(2.0, 1.0), scores=(1.0, 0.5), values=(1.0, 1.0))


# --------------------------------------------------------------------------------------------
# iso_quality_cost_ratio
# --------------------------------------------------------------------------------------------

ENV_A = upper_envelope([1.0, 2.0, 3.0], [0.25, 0.5, 0.75])
ENV_B = upper_envelope([2.0, 4.0, 8.0], [0.25, 0.75, 0.5])


def test_ratio_defined_case_is_the_exact_fraction():
    r = iso_quality_cost_ratio(ENV_A, ENV_B, 0.75)
    assert (r.cost_a, r.cost_b) == (3.0, 4.0)
    assert Fraction(r.value) == Fraction(3, 4)  # C_A(0.75) / C_B(0.75) = 3 / 4
    assert r.reason is None
    assert iso_quality_cost_ratio(ENV_B, ENV_A, 0.5).value == 2.0  # C_B(0.5) / C_A(0.5) = 4 / 2


@pytest.mark.parametrize(
    ("env_a", "env_b", "q", "reason"),
    [
        (upper_envelope([1.0], [0.5]), ENV_B, 0.75, "target q unreached by A"),
        (ENV_A, upper_envelope([1.0], [0.5]), 0.75, "target q unreached by B"),
        (ENV_A, ENV_B, 0.9, "target q unreached by A; target q unreached by B"),
        (ENV_A, upper_envelope([0.0, 1.0], [0.75, 0.5]), 0.75, "denominator C_B(q) is zero"),
    ],
)
def test_ratio_is_undefined_outside_its_domain(env_a, env_b, q, reason):
    r = iso_quality_cost_ratio(env_a, env_b, q)
    assert r.value is None
    assert r.reason == reason


def test_zero_over_zero_is_excluded_and_zero_numerator_is_allowed():
    # ftip-00JP: C_A(q) = C_B(q) = 0 is the excluded 0/0; 0 ≤ C_A(q) is in the domain.
    free = upper_envelope([0.0], [1.0])
    r = iso_quality_cost_ratio(free, free, 1.0)
    assert (r.value, r.reason) == (None, "denominator C_B(q) is zero")
    assert iso_quality_cost_ratio(free, ENV_A, 0.75).value == 0.0  # 0 / 3


def test_ratio_rejects_non_finite_target():
    with pytest.raises(ValueError, match="finite real target"):
        iso_quality_cost_ratio(ENV_A, ENV_B, math.inf)


# --------------------------------------------------------------------------------------------
# pareto_front and feasible_selection
# --------------------------------------------------------------------------------------------


def test_pareto_front_on_six_points_keeps_a_front_duplicate_and_drops_a_dominated_one():
    points = [
        {"acc": 0.9, "cost": 10.0},
        {"acc": 0.8, "cost": 5.0},
        {"acc": 0.8, "cost": 5.0},  # duplicate of 1: neither dominates the other
        {"acc": 0.7, "cost": 8.0},  # dominated by 1
        {"acc": 0.7, "cost": 8.0},  # its duplicate: dominated by 1 as well
        {"acc": 0.5, "cost": 1.0},
    ]
    assert pareto_front(points, {"acc": "max", "cost": "min"}) == [0, 1, 2, 5]
    assert pareto_front(points, {"acc": "max"}) == [0]
    assert pareto_front(points, {"cost": "min"}) == [5]
    assert pareto_front([], {"acc": "max"}) == []


@pytest.mark.parametrize(
    ("points", "objectives", "match"),
    [
        ([{"a": 1.0}], {}, "objectives is empty"),
        ([{"a": 1.0}], {"a": "up"}, "unknown direction"),
        ([{"a": 1.0}, {"b": 1.0}], {"a": "max"}, "lacks metric 'a'"),
        ([{"a": math.nan}], {"a": "max"}, "nan"),
    ],
)
def test_pareto_front_rejects_bad_input(points, objectives, match):
    with pytest.raises(ValueError, match=match):
        pareto_front(points, objectives)


def test_feasible_selection_breaks_ties_lexicographically_then_by_index():
    points = [
        {"q": 1.0, "cost": 10.0, "rank": 4.0},
        {"q": 1.0, "cost": 8.0, "rank": 8.0},
        {"q": 1.0, "cost": 8.0, "rank": 2.0},  # ties 1 on cost, wins on rank
        {"q": 1.0, "cost": 8.0, "rank": 2.0},  # ties 2 on cost and rank: the smaller index wins
        {"q": 0.0, "cost": 1.0, "rank": 1.0},  # cheapest, but infeasible
    ]
    sel = feasible_selection(points, {"q": (0.5, None)}, [("cost", "min"), ("rank", "min")])
    assert sel.feasible == (0, 1, 2, 3)
    assert sel.chosen == 2
    assert sel.violations == ((), (), (), (), ("q",))
    by_rank_desc = feasible_selection(points, {"q": (0.5, None)}, [("rank", "max")])
    assert by_rank_desc.chosen == 1
    assert feasible_selection(points, {}, []).chosen == 0


def test_feasible_selection_bounds_are_inclusive_and_empty_set_fails_closed():
    points = [{"e": 5.0}, {"e": 6.0}]
    assert feasible_selection(points, {"e": (None, 5.0)}, []).feasible == (0,)
    none = feasible_selection(points, {"e": (7.0, None)}, [])
    assert none.feasible == ()
    assert none.chosen is None
    assert none.reason == "no release: the feasible set is empty"


@pytest.mark.parametrize(
    ("constraints", "order", "match"),
    [
        ({"e": (2.0, 1.0)}, [], "lo ≤ hi"),
        ({"e": (math.nan, None)}, [], "lo ≤ hi"),
        ({"missing": (0.0, None)}, [], "lacks metric 'missing'"),
        ({}, [("missing", "min")], "lacks metric 'missing'"),
        ({}, [("e", "best")], "unknown direction"),
    ],
)
def test_feasible_selection_rejects_bad_input(constraints, order, match):
    with pytest.raises(ValueError, match=match):
        feasible_selection([{"e": 1.0}], constraints, order)


def test_pareto_and_feasible_selection_do_not_call_each_other(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("called")

    points = [{"a": 1.0}, {"a": 2.0}]
    monkeypatch.setattr(compare, "pareto_front", forbidden)
    assert compare.feasible_selection(points, {"a": (1.5, None)}, []).chosen == 1
    monkeypatch.undo()
    monkeypatch.setattr(compare, "feasible_selection", forbidden)
    assert compare.pareto_front(points, {"a": "max"}) == [1]


# --------------------------------------------------------------------------------------------
# The exact validation oracle of "Low-Rank Theory", §0x0BR–0x0BT
# --------------------------------------------------------------------------------------------

NAMES = ["base", "lora_r1", "lora_r2", "lora_r3", "lora_r4", "full_ft"]
# (rank, target, retention, stress, cost, tail E_i, diagnostics D_i); "n/a" rank → inf (§0x0BU).
# lora_r3 lacks the requested kernel bundle (§0x0BR item 3), so D = 0 there.
_TABLE = [
    (math.inf, 50.0, 90.0, 78.0, 0.0, 30.0, 1.0),
    (1.0, 62.0, 88.0, 82.0, 8.0, 14.0, 1.0),
    (2.0, 74.0, 85.0, 89.0, 16.0, 5.0, 1.0),
    (3.0, 73.0, 82.0, 88.0, 24.0, 1.0, 0.0),
    (4.0, 82.0, 74.0, 90.0, 32.0, 0.0, 1.0),
    (math.inf, 88.0, 65.0, 93.0, 120.0, 0.0, 1.0),
]
VALIDATION = [
    dict(zip(("rank", "target", "retention", "stress", "cost", "tail", "diag"), row, strict=True))
    for row in _TABLE
]
OBJECTIVES = {"target": "max", "retention": "max", "stress": "max", "cost": "min"}
GATES = {  # τ_S = 72, τ_R = 84, τ_U = 88, τ_E = 5, D_i = 1
    "target": (72.0, None),
    "retention": (84.0, None),
    "stress": (88.0, None),
    "tail": (None, 5.0),
    "diag": (1.0, 1.0),
}
TIE_BREAK = [("cost", "min"), ("rank", "min")]  # argmin (C_i, r_i, id_i)


def test_oracle_frontier_is_all_but_lora_r3():
    front = pareto_front(VALIDATION, OBJECTIVES)
    assert [NAMES[i] for i in front] == ["base", "lora_r1", "lora_r2", "lora_r4", "full_ft"]


def test_oracle_feasible_set_is_lora_r2_alone_with_the_audited_violations():
    sel = feasible_selection(VALIDATION, GATES, TIE_BREAK)
    assert [NAMES[i] for i in sel.feasible] == ["lora_r2"]
    assert NAMES[sel.chosen] == "lora_r2"
    assert sel.violations == (
        ("target", "stress", "tail"),  # base
        ("target", "stress", "tail"),  # rank 1 fails target, stress, and reconstruction
        (),  # rank 2 passes every gate (E = 5 ≤ 5 exactly)
        ("retention", "diag"),  # rank 3 fails retention and lacks the kernel bundle
        ("retention",),  # rank 4 violates retention
        ("retention",),  # full fine-tuning violates retention
    )


class _Sealed(Mapping):
    """A held-out record that fails the test if anything reads it."""

    def __getitem__(self, key):
        raise AssertionError("a non-selected held-out record was opened")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("a non-selected held-out record was opened")

    def __len__(self) -> int:
        raise AssertionError("a non-selected held-out record was opened")


def test_oracle_selects_on_validation_and_opens_test_for_lora_r2_only():
    test_r2 = {"target": 73.0, "retention": 85.0, "stress": 88.0}  # §0x0BT
    candidates = [
        {"validation": v, "test": test_r2 if i == 2 else _Sealed()}
        for i, v in enumerate(VALIDATION)
    ]
    out = select_then_report(candidates, GATES, TIE_BREAK)
    assert out.chosen == 2
    assert dict(out.report) == test_r2
    assert out.selection == feasible_selection(VALIDATION, GATES, TIE_BREAK)


def test_empty_feasible_set_keeps_the_test_split_closed():
    candidates = [{"validation": v, "test": _Sealed()} for v in VALIDATION]
    strict = {**GATES, "retention": (95.0, None)}
    out = select_then_report(candidates, strict, TIE_BREAK)
    assert (out.chosen, out.report) == (None, None)
    assert out.reason == "no release: the feasible set is empty"


def test_select_then_report_rejects_selecting_on_the_report_split():
    with pytest.raises(ValueError, match="leaks"):
        select_then_report([{"test": {"a": 1.0}}], {}, [], select_on="test", report_on="test")
    with pytest.raises(ValueError, match="lacks its 'validation' record"):
        select_then_report([{"test": {"a": 1.0}}], {}, [])
