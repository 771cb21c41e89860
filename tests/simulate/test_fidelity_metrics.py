"""Fidelity metrics on step times small enough to work out by hand."""

import math

import numpy as np
import pytest

from placer.simulate.fidelity import (
    abs_errors,
    fidelity_summary,
    kendall_tau,
    pair_order_agreement,
    regret,
    spearman,
    top_predicted_bias,
)

MEASURED = [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_prediction_in_the_same_order_scores_one_whatever_its_scale():
    predicted = [10.0, 20.0, 31.0, 45.0, 90.0]
    assert spearman(MEASURED, predicted) == pytest.approx(1.0)
    assert kendall_tau(MEASURED, predicted) == pytest.approx(1.0)
    assert pair_order_agreement(MEASURED, predicted) == (1.0, 10)


def test_a_reversed_prediction_scores_minus_one():
    predicted = MEASURED[::-1]
    assert spearman(MEASURED, predicted) == pytest.approx(-1.0)
    assert kendall_tau(MEASURED, predicted) == pytest.approx(-1.0)
    assert pair_order_agreement(MEASURED, predicted) == (0.0, 10)


def test_spearman_of_two_swapped_neighbour_pairs():
    # rank differences 1, 1, 1, 1, 0: 1 - 6 * 4 / (5 * (25 - 1)) = 0.8
    assert spearman(MEASURED, [2.0, 1.0, 4.0, 3.0, 5.0]) == pytest.approx(0.8)


def test_spearman_gives_tied_values_their_average_rank():
    # predicted ranks 1, 2.5, 2.5, 4 against 1, 2, 3, 4: Pearson of those is 0.9486833
    assert spearman([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 2.0, 3.0]) == pytest.approx(3 / math.sqrt(10))


def test_kendall_tau_b_leaves_tied_pairs_out_of_each_side_of_the_denominator():
    # 6 pairs. Measured ties 3 of them (the first three values), predicted none. The 3 pairs untied in
    # measured are all concordant: tau-b = 3 / sqrt(3 * 6)
    assert kendall_tau([1.0, 1.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(1 / math.sqrt(2))


def test_kendall_tau_b_with_ties_on_both_sides():
    # pairs: (0,1) +/+ (0,2) +/+ (0,3) +/+ (1,2) tie in measured, (1,3) +/- discordant, (2,3) tie in
    # predicted: (3 - 1) / sqrt(5 * 5) = 0.4
    assert kendall_tau([1.0, 2.0, 2.0, 3.0], [1.0, 3.0, 2.0, 2.0]) == pytest.approx(0.4)


def test_rank_metrics_are_undefined_when_one_side_is_constant():
    assert math.isnan(spearman(MEASURED, [2.0] * 5))
    assert math.isnan(kendall_tau(MEASURED, [2.0] * 5))


def test_errors_are_relative_to_the_measured_time():
    np.testing.assert_allclose(abs_errors([2.0, 4.0], [3.0, 3.0]), [0.5, 0.25])


def test_pair_order_ignores_pairs_measured_within_five_percent():
    measured = [10.0, 10.3, 20.0, 30.0]   # 10 vs 10.3 is 3 % apart: noise, whatever the prediction says
    predicted = [11.0, 9.0, 25.0, 24.0]   # gets 20 < 30 wrong, every other distinct pair right
    assert pair_order_agreement(measured, predicted) == (pytest.approx(0.8), 5)


def test_pair_order_gap_is_relative_to_the_faster_placement():
    # 100 vs 104.9 is 4.9 % of the faster: ignored; with a 4 % gap it counts (and is ordered wrong)
    share, pairs = pair_order_agreement([100.0, 104.9], [2.0, 1.0])
    assert pairs == 0 and math.isnan(share)
    assert pair_order_agreement([100.0, 104.9], [2.0, 1.0], min_gap=0.04) == (0.0, 1)


def test_a_predicted_tie_on_a_distinct_pair_is_a_wrong_order():
    assert pair_order_agreement([1.0, 2.0], [3.0, 3.0]) == (0.0, 1)


def test_summary_reports_the_ninetieth_percentile_error():
    measured = [1.0] * 10
    predicted = [1.0 + e for e in (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10)]
    summary = fidelity_summary(measured, predicted)
    assert summary["placements"] == 10
    assert summary["median_abs_error"] == pytest.approx(0.055)
    # linear interpolation: position 0.9 * 9 = 8.1 between 0.09 and 0.10
    assert summary["p90_abs_error"] == pytest.approx(0.091)
    assert summary["pairs"] == 0 and math.isnan(summary["pair_order"])


def test_summary_has_every_metric():
    summary = fidelity_summary(MEASURED, [1.1, 1.9, 3.3, 4.0, 5.0])
    assert set(summary) == {"placements", "spearman", "kendall_tau", "median_abs_error", "p90_abs_error",
                            "pair_order", "pairs", "top3_bias", "regret"}
    assert summary["spearman"] == pytest.approx(1.0) and summary["pair_order"] == 1.0


def test_mismatched_lengths_are_refused_with_what_to_give():
    with pytest.raises(ValueError, match="3 measured but 2 predicted"):
        fidelity_summary([1.0, 2.0, 3.0], [1.0, 2.0])


@pytest.mark.parametrize("metric", [spearman, kendall_tau, abs_errors, pair_order_agreement, fidelity_summary])
def test_fewer_than_two_placements_are_refused(metric):
    with pytest.raises(ValueError, match="at least 2"):
        metric([1.0], [1.0])


def test_failed_placements_must_be_left_out():
    with pytest.raises(ValueError, match="finite"):
        spearman([1.0, math.inf], [1.0, 2.0])


def test_the_bias_on_the_placements_predicted_fastest_is_what_a_planner_is_told_about_its_picks():
    measured = [10.0, 20.0, 30.0, 40.0, 50.0]
    # predicted fastest first: 12 for 10 (+20 %), 18 for 40 (-55 %), 21 for 20 (+5 %); the rest is not picked
    predicted = [12.0, 21.0, 60.0, 18.0, 70.0]
    assert top_predicted_bias(measured, predicted, 3) == pytest.approx((0.2 - 0.55 + 0.05) / 3)
    assert top_predicted_bias(measured, predicted, 1) == pytest.approx(0.2)  # 12 for 10: the favourite
    assert top_predicted_bias(measured, [8.0, 16.0, 24.0, 32.0, 40.0], 3) == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="at least 1"):
        top_predicted_bias(measured, predicted, 0)


def test_regret_is_what_picking_the_predicted_fastest_costs_against_the_measured_fastest():
    measured = [10.0, 12.0, 15.0]
    assert regret(measured, [1.0, 2.0, 3.0]) == 0.0  # it picks the measured best
    assert regret(measured, [2.0, 3.0, 1.0]) == pytest.approx(0.5)  # it picks the 15, against 10
    assert regret(measured, [2.0, 1.0, 1.0]) == pytest.approx(0.2)  # a predicted tie keeps the given order

