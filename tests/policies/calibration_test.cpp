// policies/calibration: against values worked out by hand (and the textbook Wilson interval).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "policies/calibration.hpp"

namespace baton::policies {
namespace {

TEST(calibration, wilson_lower_bound_matches_the_textbook_interval) {
  // 8 of 10 at 95 %: (0.4902, 0.9433).
  EXPECT_NEAR(wilson_lower(8, 10), 0.4901624715, 1e-9);
  // All right: n / (n + z²).
  EXPECT_NEAR(wilson_lower(10, 10), 10 / (10 + z95 * z95), 1e-12);
  EXPECT_NEAR(wilson_lower(2, 3), 0.2076596008, 1e-9);
  EXPECT_EQ(wilson_lower(0, 0), 0);
  EXPECT_EQ(wilson_lower(0, 5), 0);
  // 73 right in a row is the fewest whose bound reaches 0.95.
  EXPECT_GE(wilson_lower(73, 73), 0.95);
  EXPECT_LT(wilson_lower(72, 72), 0.95);
}

TEST(calibration, the_held_out_half_is_fixed_by_the_decision_id) {
  // sha256("calibrate:d-1") starts 49 (odd), "calibrate:d-2" 16, "calibrate:d-4" 11.
  EXPECT_TRUE(held_out("d-1"));
  EXPECT_FALSE(held_out("d-2"));
  EXPECT_TRUE(held_out("d-4"));
  int held = 0;
  for (int i = 0; i < 2000; ++i) held += held_out("d-" + std::to_string(i)) ? 1 : 0;
  EXPECT_GT(held, 900);
  EXPECT_LT(held, 1100);
}

TEST(calibration, precision_above_a_threshold_counts_the_labels_at_or_above_it) {
  const std::vector<label> labels = {{0.9, true}, {0.8, true}, {0.7, false}, {0.6, true}};
  const precision_at p = precision_above(labels, 0.7);
  EXPECT_EQ(p.labels, 3u);
  EXPECT_DOUBLE_EQ(p.weight, 3);
  EXPECT_DOUBLE_EQ(p.precision, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(p.effective_n, 3);
  EXPECT_NEAR(p.lower, 0.2076596008, 1e-9);
  const precision_at none = precision_above(labels, 0.95);
  EXPECT_EQ(none.labels, 0u);
  EXPECT_EQ(none.precision, 0);
  EXPECT_EQ(none.lower, 0);
}

TEST(calibration, audit_weights_count_in_the_precision_and_shrink_the_effective_size) {
  // Ten audit samples standing for ten decisions each, nine right: precision 0.9 at an effective
  // size of (Σw)² / Σw² = 100² / 1000 = 10, so the bound is Wilson's for 9 of 10; and two
  // unweighted wrong labels just above the threshold pull the precision to 90 / 102.
  std::vector<label> labels;
  for (int i = 0; i < 10; ++i) labels.push_back({0.95, i != 0, 10});
  precision_at p = precision_above(labels, 0.9);
  EXPECT_DOUBLE_EQ(p.precision, 0.9);
  EXPECT_DOUBLE_EQ(p.effective_n, 10);
  EXPECT_NEAR(p.lower, 0.5958499732, 1e-9);
  labels.push_back({0.91, false, 1});
  labels.push_back({0.92, false, 1});
  p = precision_above(labels, 0.9);
  EXPECT_EQ(p.labels, 12u);
  EXPECT_DOUBLE_EQ(p.weight, 102);
  EXPECT_DOUBLE_EQ(p.precision, 90.0 / 102.0);
  EXPECT_DOUBLE_EQ(p.effective_n, 102.0 * 102.0 / 1002.0);
}

TEST(calibration, reliability_bins_ece_and_brier_by_hand) {
  // Two bins. [0, 0.5): 0.2 wrong, 0.4 right: mean 0.3, accuracy 0.5, gap 0.2. [0.5, 1]: 0.6, 0.8
  // right, 1.0 wrong (1 is in the last bin): mean 0.8, accuracy 2/3, gap 2/15.
  // ECE = (2·0.2 + 3·2/15) / 5 = 0.16. Brier = (0.04 + 0.36 + 0.16 + 0.04 + 1) / 5 = 0.32.
  const std::vector<label> labels = {{0.2, false}, {0.4, true}, {0.6, true}, {0.8, true}, {1.0, false}};
  const auto bins = reliability(labels, 2);
  ASSERT_EQ(bins.size(), 2u);
  EXPECT_EQ(bins[0].count, 2u);
  EXPECT_DOUBLE_EQ(bins[0].low, 0);
  EXPECT_DOUBLE_EQ(bins[0].high, 0.5);
  EXPECT_NEAR(bins[0].mean_confidence, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(bins[0].accuracy, 0.5);
  EXPECT_EQ(bins[1].count, 3u);
  EXPECT_NEAR(bins[1].mean_confidence, 0.8, 1e-12);
  EXPECT_DOUBLE_EQ(bins[1].accuracy, 2.0 / 3.0);
  EXPECT_NEAR(expected_calibration_error(bins), 0.16, 1e-12);
  EXPECT_NEAR(brier_score(labels), 0.32, 1e-12);

  // Ten bins: empty ones stay empty and do not count.
  const auto ten = reliability(labels, 10);
  ASSERT_EQ(ten.size(), 10u);
  EXPECT_EQ(ten[0].count, 0u);
  EXPECT_EQ(ten[2].count, 1u);
  EXPECT_EQ(ten[9].count, 1u);  // 1.0
  EXPECT_NEAR(expected_calibration_error(ten), (0.2 + 0.6 + 0.4 + 0.2 + 1.0) / 5, 1e-12);
  EXPECT_EQ(expected_calibration_error(reliability({}, 10)), 0);
  EXPECT_EQ(brier_score({}), 0);
}

// Per half: `right` labels from 0.70 up (all correct) and 30 below 0.70 (all wrong).
std::vector<label> two_halves(int right) {
  std::vector<label> out;
  for (const bool held : {false, true}) {
    for (int i = 0; i < right; ++i) out.push_back({0.70 + 0.29 * i / right, true, 1, held});
    for (int i = 0; i < 30; ++i) out.push_back({0.40 + 0.01 * i, false, 1, held});
  }
  return out;
}

TEST(calibration, the_lowest_threshold_is_chosen_on_the_fit_half_and_checked_once_on_the_held_out_half) {
  // 100 right above 0.70 on each half: the bound at 0.70 is 100 / (100 + z²) = 0.963; one step
  // lower (0.69) adds a wrong one: Wilson 100 of 101 is 0.946.
  std::vector<label> labels = two_halves(100);
  auto chosen = lowest_threshold(labels, 0.95);
  ASSERT_TRUE(chosen);
  EXPECT_DOUBLE_EQ(chosen->threshold, 0.70);
  EXPECT_TRUE(chosen->confirmed);
  EXPECT_EQ(chosen->fit.labels, 100u);
  EXPECT_EQ(chosen->held.labels, 100u);
  EXPECT_NEAR(chosen->held.lower, 0.9630065018, 1e-9);
  // 0.97 needs about 124 right in a row on the fit half.
  EXPECT_FALSE(lowest_threshold(labels, 0.97));
  // A lower target reaches lower.
  chosen = lowest_threshold(labels, 0.5);
  ASSERT_TRUE(chosen);
  EXPECT_LT(chosen->threshold, 0.70);
  EXPECT_TRUE(chosen->confirmed);

  // A wrong label at 0.75 on the held-out half alone: the fit half still chooses 0.70, and the
  // held-out half is not searched for a threshold of its own (under the old rule, both halves
  // searched, it moved to 0.7522): its one check at 0.70 fails (100 of 101, 0.946), so the
  // choice is reported with both bounds and not confirmed.
  labels.push_back({0.75, false, 1, true});
  chosen = lowest_threshold(labels, 0.95);
  ASSERT_TRUE(chosen);
  EXPECT_DOUBLE_EQ(chosen->threshold, 0.70);
  EXPECT_FALSE(chosen->confirmed);
  EXPECT_GE(chosen->fit.lower, 0.95);
  EXPECT_EQ(chosen->held.labels, 101u);
  EXPECT_NEAR(chosen->held.lower, wilson_lower(100, 101), 1e-12);
  EXPECT_LT(chosen->held.lower, 0.95);
  // The same wrong label on the fit half moves the choice up instead, and the held-out half,
  // clean above it, confirms it.
  labels = two_halves(100);
  labels.push_back({0.75, false, 1, false});
  chosen = lowest_threshold(labels, 0.95);
  ASSERT_TRUE(chosen);
  EXPECT_NEAR(chosen->threshold, 0.7522, 1e-12);
  EXPECT_EQ(chosen->fit.labels, 82u);
  EXPECT_NEAR(chosen->fit.lower, 82 / (82 + z95 * z95), 1e-12);
  EXPECT_TRUE(chosen->confirmed);
  // One at 0.95 on the fit half: above it too few remain for the bound, and nothing is chosen.
  labels = two_halves(100);
  labels.push_back({0.95, false, 1, false});
  EXPECT_FALSE(lowest_threshold(labels, 0.95));
  EXPECT_FALSE(lowest_threshold({}, 0.5));
}

TEST(calibration, a_threshold_is_rounded_to_the_shortest_decimal_that_keeps_the_same_decisions) {
  EXPECT_DOUBLE_EQ(round_threshold(0.7234817, 0.70), 0.72);
  EXPECT_DOUBLE_EQ(round_threshold(0.7234817, 0.65), 0.7);
  EXPECT_DOUBLE_EQ(round_threshold(0.29, 0.2), 0.29);  // 0.29 · 100 is 28.999… in binary
  EXPECT_DOUBLE_EQ(round_threshold(0.5, 0.3), 0.5);
  // Nothing of 6 places fits between them: the threshold itself.
  EXPECT_DOUBLE_EQ(round_threshold(0.72348171, 0.72348170), 0.72348171);
}

}  // namespace
}  // namespace baton::policies
