"""Tests for gaugelab.study.stats.paired: paired differences over shared seeds."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from gaugelab.study.stats.paired import paired_differences


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
