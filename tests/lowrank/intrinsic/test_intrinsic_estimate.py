"""Tests for the d90 rule of gaugelab.lowrank.intrinsic.protocol (seed 003 §0x02F–K): thresholds,
the quality transform, the best of trials (max of the evaluation score), failed seeds in the
aggregate, crossing, bracket and censoring, no cumulative maximum, and the seed's worked examples
on their own inputs (the synthetic DID/SAID table, fixture 2.4 of the seed map; the DID bracket,
fixture 2.5)."""

import math

import pytest

from gaugelab.lowrank.intrinsic.protocol import (
    BOUNDARY_STATES,
    GridCrossing,
    QualityTransform,
    ThresholdRule,
    TrialRecord,
    classify_grid_crossing,
    estimate_from_records,
    historical_threshold,
    normalized_gain,
    normalized_gain_threshold,
)

BASE, FULL = 0.600, 0.850
DID = {4: 0.750, 6: 0.780, 8: 0.830}  # the seed's DID median scores
SAID = {2: 0.600, 4: 0.770, 6: 0.810, 8: 0.840}  # the seed's SAID median scores
SPREAD = (-0.02, 0.0, 0.05)  # three seeds around the median: the median is the table's value


def _records(table):
    out = []
    for d, median in table.items():
        for seed, offset in enumerate(SPREAD):
            for lr, worse in ((0.1, 0.01), (0.01, 0.0)):  # the second lr is selected
                score = median + offset - worse
                out.append(TrialRecord(d, seed, {"lr": lr}, "completed", score, score))
    return out


def _estimate(table, rule, records=None):
    return estimate_from_records(
        records or _records(table),
        grid=list(table),
        seeds=[0, 1, 2],
        full_score=FULL,
        base_score=BASE,
        rule=rule,
    )


def test_thresholds_of_the_synthetic_table():
    assert math.isclose(historical_threshold(FULL), 0.765, abs_tol=1e-12)  # 0.9 · 0.850
    assert math.isclose(normalized_gain_threshold(FULL, BASE), 0.825, abs_tol=1e-12)  # .6+.9·.25
    assert math.isclose(historical_threshold(0.85), 0.765)  # 0.9 × 85% = 76.5%
    # base 75%: reaching 76.5% captures a tenth of the full gain
    assert math.isclose(normalized_gain(0.765, 0.75, 0.85), 0.15, abs_tol=1e-12)


def test_synthetic_table_historical_threshold_did_6_said_4():
    did = _estimate(DID, ThresholdRule("historical", 0.9))
    said = _estimate(SAID, ThresholdRule("historical", 0.9))
    assert [s.aggregate for s in did.summaries] == pytest.approx(list(DID.values()), abs=1e-12)
    assert did.crossing == GridCrossing(
        "crossed", 6, (4, 6), "d90 = 6 on the tested grid, bracket (4, 6]"
    )
    assert said.crossing.estimate == 4 and said.crossing.bracket == (2, 4)
    assert all(s.selected[seed] == {"lr": 0.01} for s in did.summaries for seed in (0, 1, 2))


def test_synthetic_table_normalized_gain_both_first_pass_at_8():
    rule = ThresholdRule("normalized-gain", 0.9)
    for table in (DID, SAID):
        est = _estimate(table, rule)
        assert est.crossing.state == "crossed" and est.crossing.estimate == 8
        assert est.crossing.bracket == (6, 8)
        assert math.isclose(est.target, 0.825, abs_tol=1e-12)


def test_censoring_never_reports_d_min_or_d_max_as_the_estimate():
    left = classify_grid_crossing([(4, 0.9), (6, 0.95)], target=0.8)
    assert left.state == "left-censored" and left.estimate is None and left.bracket is None
    assert left.statement.startswith("d90 <= 4")
    right = classify_grid_crossing([(4, 0.5), (6, 0.6)], target=0.8)
    assert right.state == "right-censored" and right.estimate is None
    assert right.statement.startswith("d90 > 6 / unresolved")


def test_no_cumulative_maximum_and_non_monotone_scores_kept():
    scores = [(2, 0.5), (4, 0.81), (8, 0.79), (16, 0.85)]
    crossing = classify_grid_crossing(scores, target=0.8)
    assert crossing.estimate == 4 and crossing.bracket == (2, 4)
    assert crossing.failing_after == (8,)  # a later unlucky subspace, reported as measured
    dip = classify_grid_crossing([(2, 0.81), (4, 0.5)], target=0.8)
    assert dip.state == "left-censored"  # the first tested d passes; 4 failing is not smoothed


def test_failed_seeds_are_kept_and_never_selected():
    records = _records(DID)
    records.append(TrialRecord(6, 1, {"lr": 1.0}, "numerical_failure", message="loss nan"))
    records = [r for r in records if not (r.d == 8 and r.seed == 2)]
    records.append(TrialRecord(8, 2, {"lr": 0.1}, "numerical_failure", message="loss nan"))
    est = _estimate(DID, ThresholdRule(), records)
    assert len(est.records) == len(records)  # append-only: the failures are in the raw table
    eight = est.summaries[-1]
    assert eight.failed_seeds == [2] and set(eight.seed_scores) == {0, 1}
    assert eight.aggregate == pytest.approx(0.81)  # median(−inf, 0.83 − 0.02, 0.83): seed 2 kept
    assert est.summaries[1].selected[1] == {"lr": 0.01}  # the failed lr=1.0 trial not chosen


def test_lower_is_better_metric_needs_a_quality_transform():
    with pytest.raises(ValueError, match=r"0\.9 × a loss is meaningless"):
        QualityTransform("cross-entropy", higher_is_better=False)
    nll = QualityTransform("cross-entropy", False, "exp(-x)", lambda x: math.exp(-x))
    assert math.isclose(historical_threshold(0.5, transform=nll), 0.9 * math.exp(-0.5))
    with pytest.raises(ValueError, match="quality"):
        historical_threshold(-0.3)  # a signed score cannot be scaled by a ratio


def test_result_carries_the_envelope_of_0x02k():
    est = _estimate(DID, ThresholdRule())
    fields = est.as_dict()
    for key in (
        "records",
        "seeds",
        "budget",
        "metric",
        "full_score",
        "base_score",
        "threshold",
        "aggregator",
        "selection",
        "crossing",
        "projections",
        "ledger",
        "meaning",
        "non_implications",
    ):
        assert key in fields
    assert fields["crossing"]["state"] == "crossed" and len(est.non_implications) == 7
    assert "upper-bound" in est.meaning


def test_bad_declarations_are_rejected():
    with pytest.raises(ValueError, match="aggregator"):
        estimate_from_records(
            [], grid=[4], seeds=[0], full_score=FULL, base_score=BASE, aggregator="best"
        )
    with pytest.raises(ValueError, match="outside the declared grid"):
        estimate_from_records(
            _records({5: 0.8}), grid=[4], seeds=[0, 1, 2], full_score=FULL, base_score=BASE
        )
    with pytest.raises(ValueError, match="kind"):
        ThresholdRule("cumulative-max")
    with pytest.raises(ValueError, match="repeated d"):
        classify_grid_crossing([(4, 0.5), (4, 0.6)], 0.5)


# --- the seed's worked examples, on exactly their inputs -----------------------------------------


def _one_seed(table):
    """One seed, one trial per d, scoring the table's value: its median is that value exactly."""
    return [TrialRecord(d, 0, {"lr": 0.01}, "completed", x, x) for d, x in table.items()]


def test_seed_0x02F_synthetic_table_thresholds_0_765_and_0_825():
    assert math.isclose(historical_threshold(0.850), 0.765, abs_tol=1e-12)  # 0.9 · 0.850
    assert math.isclose(normalized_gain_threshold(0.850, 0.600), 0.825, abs_tol=1e-12)


def test_seed_0x02F_synthetic_table_historical_did_6_said_4():
    target = historical_threshold(0.850)
    assert classify_grid_crossing(list(DID.items()), target).estimate == 6
    assert classify_grid_crossing(list(SAID.items()), target).estimate == 4
    for table, expected in ((DID, 6), (SAID, 4)):
        est = estimate_from_records(
            _one_seed(table), grid=list(table), seeds=[0], full_score=0.850, base_score=0.600
        )
        assert [s.aggregate for s in est.summaries] == list(table.values())  # the table, as is
        assert (est.crossing.state, est.crossing.estimate) == ("crossed", expected)


def test_seed_0x02F_synthetic_table_normalized_gain_both_first_pass_at_8():
    target = normalized_gain_threshold(0.850, 0.600)
    rule = ThresholdRule("normalized-gain", 0.9)
    for table in (DID, SAID):
        assert classify_grid_crossing(list(table.items()), target).estimate == 8
        est = estimate_from_records(
            _one_seed(table), grid=list(table), seeds=[0], full_score=0.850, base_score=0.600,
            rule=rule,
        )  # fmt: skip
        assert (est.crossing.state, est.crossing.estimate) == ("crossed", 8)


def test_seed_0x02G_did_4_fails_6_passes_bracket_4_6():
    crossing = classify_grid_crossing(list(DID.items()), historical_threshold(0.850))
    assert crossing == GridCrossing(
        "crossed", 6, (4, 6), "d90 = 6 on the tested grid, bracket (4, 6]", failing_after=()
    )
    est = estimate_from_records(
        _one_seed(DID), grid=list(DID), seeds=[0], full_score=0.850, base_score=0.600
    )
    assert [s.passes for s in est.summaries] == [False, True, True]  # d = 4 fails, 6 passes


def test_seed_0x02G_first_tested_d_passing_is_left_censored_d_estimate_le_d_min():
    # the SAID table with d = 2 dropped: its first tested d, 4, already passes 0.765
    crossing = classify_grid_crossing([(4, 0.770), (6, 0.810), (8, 0.840)], 0.765)
    assert (crossing.state, crossing.estimate, crossing.bracket) == ("left-censored", None, None)
    assert crossing.statement == "d90 <= 4 (left-censored: the first tested d passes)"


def test_seed_0x02G_no_tested_d_passing_is_right_censored_above_d_max():
    # the DID table under a target none of its scores reaches
    crossing = classify_grid_crossing(list(DID.items()), 0.9)
    assert (crossing.state, crossing.estimate, crossing.bracket) == ("right-censored", None, None)
    assert crossing.statement == "d90 > 8 / unresolved (right-censored: no tested d passes)"


# --- best of trials, failed seeds, failing d -----------------------------------------------------


def test_seed_0x02F_best_of_trials_is_the_max_of_the_evaluation_score():
    # per seed: lr 0.1 wins on the selection split, lr 0.01 on the evaluation split
    records = [
        TrialRecord(4, seed, {"lr": lr}, "completed", sel, ev)
        for seed in (0, 1, 2)
        for lr, sel, ev in ((0.1, 0.95, 0.70), (0.01, 0.60, 0.80 + 0.01 * seed))
    ]
    est = estimate_from_records(records, grid=[4], seeds=[0, 1, 2], full_score=FULL,
                                base_score=BASE)  # fmt: skip
    (four,) = est.summaries
    assert four.seed_scores == pytest.approx({0: 0.80, 1: 0.81, 2: 0.82})  # max_h S(d, s, h)
    assert all(four.selected[seed] == {"lr": 0.01} for seed in (0, 1, 2))
    assert four.aggregate == pytest.approx(0.81) and four.passes  # ≥ 0.765; lr 0.1 gave 0.70
    assert est.crossing.state == "left-censored"


def test_best_of_trials_needs_no_selection_score_and_keeps_the_first_of_ties():
    records = [
        TrialRecord(4, 0, {"lr": 0.1}, "completed", None, 0.8),
        TrialRecord(4, 0, {"lr": 0.01}, "completed", 0.99, 0.8),
    ]
    est = estimate_from_records(records, grid=[4], seeds=[0], full_score=FULL, base_score=BASE)
    assert est.summaries[0].selected[0] == {"lr": 0.1} and est.summaries[0].seed_scores[0] == 0.8


def test_seed_0x02J_a_failed_seed_stays_in_the_median_and_counts_as_not_passing():
    def estimate(failed, aggregator="median"):
        records = [
            TrialRecord(4, seed, {"lr": 0.01}, "completed", 0.9, 0.9)
            for seed in (0, 1, 2)
            if seed not in failed
        ]
        records += [TrialRecord(4, s, {"lr": 0.01}, "numerical_failure") for s in failed]
        est = estimate_from_records(records, grid=[4], seeds=[0, 1, 2], full_score=FULL,
                                    base_score=BASE, aggregator=aggregator)  # fmt: skip
        return est.summaries[0]

    one = estimate({2})
    assert one.aggregate == 0.9 and one.passes  # median(−inf, 0.9, 0.9)
    two = estimate({1, 2})
    # median(−inf, −inf, 0.9): failing — the survivors' median, 0.9, would have passed
    assert two.aggregate == -math.inf and not two.passes and two.failed_seeds == [1, 2]
    assert two.seed_scores == {0: 0.9}
    assert estimate({2}, "mean").aggregate == -math.inf  # mean and min see the failure too
    assert estimate({2}, "min").aggregate == -math.inf


def test_a_failed_seed_of_two_fails_the_median():
    records = [
        TrialRecord(4, 0, {"lr": 0.01}, "completed", 0.9, 0.9),
        TrialRecord(4, 1, {"lr": 0.01}, "numerical_failure", message="loss nan"),
        TrialRecord(8, 0, {"lr": 0.01}, "completed", 0.9, 0.9),
        TrialRecord(8, 1, {"lr": 0.01}, "completed", 0.8, 0.8),
    ]
    est = estimate_from_records(records, grid=[4, 8], seeds=[0, 1], full_score=FULL,
                                base_score=BASE)  # fmt: skip
    assert est.summaries[0].aggregate == -math.inf  # (−inf + 0.9) / 2
    assert (est.crossing.state, est.crossing.bracket) == ("crossed", (4, 8))
    assert est.crossing.all_failed == ()  # seed 0 was scored at d = 4


def test_seed_0x02G_an_all_failed_first_d_is_failing_not_left_censored():
    records = [TrialRecord(2, s, {"lr": 0.01}, "numerical_failure") for s in (0, 1, 2)]
    records += [TrialRecord(4, s, {"lr": 0.01}, "completed", 0.8, 0.8) for s in (0, 1, 2)]
    est = estimate_from_records(records, grid=[2, 4], seeds=[0, 1, 2], full_score=FULL,
                                base_score=BASE)  # fmt: skip
    two = est.summaries[0]
    assert two.all_failed and two.aggregate == -math.inf and not two.passes
    assert est.crossing == GridCrossing(
        "crossed", 4, (2, 4),
        "d90 = 4 on the tested grid, bracket (2, 4]; every seed failed at d = 2", (), (2,),
    )  # fmt: skip
    pairs = classify_grid_crossing([(2, None), (4, 0.8)], target=0.765)  # the same, as pairs
    assert (pairs.state, pairs.estimate, pairs.bracket) == ("crossed", 4, (2, 4))


def test_an_all_failed_d_is_a_bracket_end_and_a_failing_after():
    inside = classify_grid_crossing([(2, 0.5), (4, None), (8, 0.9)], target=0.8)
    assert (inside.state, inside.estimate, inside.bracket) == ("crossed", 8, (4, 8))
    after = classify_grid_crossing([(2, 0.5), (4, 0.9), (8, None)], target=0.8)
    assert after.bracket == (2, 4) and after.failing_after == (8,) and after.all_failed == (8,)


def test_every_d_all_failed_is_right_censored_above_the_largest_tested_d():
    crossing = classify_grid_crossing([(4, None), (8, -math.inf)], target=0.8)
    assert (crossing.state, crossing.estimate, crossing.bracket) == ("right-censored", None, None)
    assert crossing.statement == (
        "d90 > 8 / unresolved (right-censored: no tested d passes; every seed failed at d = 4)"
    )
    assert crossing.state in BOUNDARY_STATES and len(BOUNDARY_STATES) == 3


def test_a_nan_aggregate_is_refused():
    with pytest.raises(ValueError, match="aggregate=nan at d=8"):
        classify_grid_crossing([(4, 0.5), (8, float("nan"))], target=0.8)
