"""Tests for gaugelab.study.stats.pareto: exact small cases and the Low-Rank Theory oracles."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import pytest

from gaugelab.study.stats import pareto as selection
from gaugelab.study.stats.pareto import feasible_selection, pareto_front, select_then_report

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
    monkeypatch.setattr(selection, "pareto_front", forbidden)
    assert selection.feasible_selection(points, {"a": (1.5, None)}, []).chosen == 1
    monkeypatch.undo()
    monkeypatch.setattr(selection, "feasible_selection", forbidden)
    assert selection.pareto_front(points, {"a": "max"}) == [1]


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
