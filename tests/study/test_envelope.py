"""Tests for gaugelab.study.stats.envelope: the observed upper envelope and the iso-quality
ratio."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from gaugelab.study.stats.envelope import Envelope, iso_quality_cost_ratio, upper_envelope

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
