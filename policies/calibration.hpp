// The statistics of `baton calibrate` (adapters/cli/README.md): how often a tool choice at a given
// confidence was right by its reviewers' labels, how well the confidences are calibrated, and the
// lowest threshold the labels support at a target precision. Pure functions over labels.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace baton::policies {

// The normal quantile of a two-sided 95 % interval.
inline constexpr double z95 = 1.959963984540054;

// The lower end of the Wilson score interval of a proportion `successes` of `n`; 0 when n is 0.
// `n` may be an effective count (weighted labels), not a whole number.
double wilson_lower(double successes, double n, double z = z95);

// One decision a reviewer judged: the proposed tool executed as proposed is correct, a deny or
// another tool is wrong.
struct label {
  double confidence = 0;  // of the proposed tool, per the policy's metric
  bool correct = false;
  double weight = 1;      // the decisions it stands for: 1/rate for an audit sample
  bool held_out = false;  // in the held-out half (held_out())
};

// The held-out half: a decision is in it when the first byte of sha256("calibrate:" + id) is odd.
// The same id is always in the same half, whichever log or run reads it.
bool held_out(std::string_view decision_id);

// Precision of the labels with confidence ≥ threshold. Weighted: precision is Σw·correct / Σw and
// the Wilson bound is taken at the effective size (Σw)² / Σw² (Kish), which is the count itself
// when every weight is 1.
struct precision_at {
  double threshold = 0;
  std::size_t labels = 0;    // how many labels are at or above it
  double weight = 0;         // their Σw
  double precision = 0;      // 0 when there are none
  double effective_n = 0;
  double lower = 0;          // the Wilson lower bound of the precision
};
precision_at precision_above(std::span<const label> labels, double threshold, double z = z95);

// Equal-width confidence bins over [0, 1] (a confidence of 1 is in the last); weighted means.
struct reliability_bin {
  double low = 0, high = 0;
  std::size_t count = 0;
  double weight = 0;
  double mean_confidence = 0;  // 0 for an empty bin
  double accuracy = 0;         // Σw·correct / Σw; 0 for an empty bin
};
std::vector<reliability_bin> reliability(std::span<const label> labels, std::size_t bins = 10);

// Expected calibration error: Σ over bins of (bin weight / total weight) · |accuracy − mean
// confidence|; 0 without labels.
double expected_calibration_error(std::span<const reliability_bin> bins);
// Brier score: Σw·(confidence − correct)² / Σw; 0 without labels.
double brier_score(std::span<const label> labels);

// The lowest threshold, among the labels' confidences, whose precision lower bound meets `target`
// on the fit half (held_out false), then checked once on the held-out half: `confirmed` when the
// held-out bound meets the target too. The held-out labels' outcomes play no part in the choice,
// so the check is an honest one: a threshold searched for on the same labels it is judged by is
// one that their noise may have picked. None when no threshold meets the target on the fit half.
struct threshold_choice {
  double threshold = 0;
  precision_at fit, held;
  bool confirmed = false;  // held.lower meets the target: only then is it proposed
};
std::optional<threshold_choice> lowest_threshold(std::span<const label> labels, double target, double z = z95);

// The shortest decimal (at most 6 places) d with below < d ≤ threshold, so that a proposal reads
// 0.72 rather than 0.7234817 while the same decisions stay above and below it; the threshold itself
// when none is.
double round_threshold(double threshold, double below);

}  // namespace baton::policies
