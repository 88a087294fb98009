#include "policies/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/sha256.hpp"

namespace baton::policies {

double wilson_lower(double successes, double n, double z) {
  if (n <= 0) return 0;
  const double p = std::clamp(successes / n, 0.0, 1.0);
  const double z2 = z * z;
  const double centre = p + z2 / (2 * n);
  const double spread = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n));
  return std::max(0.0, (centre - spread) / (1 + z2 / n));
}

bool held_out(std::string_view decision_id) {
  const std::string digest = sha256_hex(std::string("calibrate:").append(decision_id));
  // "sha256:" then hex: the first byte's low nibble is its second digit.
  const char low = digest[std::string_view("sha256:").size() + 1];
  const int nibble = low <= '9' ? low - '0' : low - 'a' + 10;
  return (nibble & 1) != 0;
}

precision_at precision_above(std::span<const label> labels, double threshold, double z) {
  precision_at out;
  out.threshold = threshold;
  double right = 0, squares = 0;
  for (const label& l : labels) {
    if (l.confidence < threshold) continue;
    ++out.labels;
    out.weight += l.weight;
    squares += l.weight * l.weight;
    if (l.correct) right += l.weight;
  }
  if (out.weight <= 0) return out;
  out.precision = right / out.weight;
  out.effective_n = out.weight * out.weight / squares;
  out.lower = wilson_lower(out.precision * out.effective_n, out.effective_n, z);
  return out;
}

std::vector<reliability_bin> reliability(std::span<const label> labels, std::size_t bins) {
  bins = std::max<std::size_t>(bins, 1);
  std::vector<reliability_bin> out(bins);
  std::vector<double> confidence(bins), right(bins);
  for (std::size_t b = 0; b < bins; ++b) {
    out[b].low = double(b) / double(bins);
    out[b].high = double(b + 1) / double(bins);
  }
  for (const label& l : labels) {
    const double c = std::clamp(l.confidence, 0.0, 1.0);
    const std::size_t b = std::min(bins - 1, static_cast<std::size_t>(c * double(bins)));
    ++out[b].count;
    out[b].weight += l.weight;
    confidence[b] += l.weight * c;
    if (l.correct) right[b] += l.weight;
  }
  for (std::size_t b = 0; b < bins; ++b) {
    if (out[b].weight <= 0) continue;
    out[b].mean_confidence = confidence[b] / out[b].weight;
    out[b].accuracy = right[b] / out[b].weight;
  }
  return out;
}

double expected_calibration_error(std::span<const reliability_bin> bins) {
  double total = 0, gap = 0;
  for (const reliability_bin& b : bins) {
    total += b.weight;
    gap += b.weight * std::abs(b.accuracy - b.mean_confidence);
  }
  return total > 0 ? gap / total : 0;
}

double brier_score(std::span<const label> labels) {
  double total = 0, sum = 0;
  for (const label& l : labels) {
    const double miss = l.confidence - (l.correct ? 1.0 : 0.0);
    total += l.weight;
    sum += l.weight * miss * miss;
  }
  return total > 0 ? sum / total : 0;
}

std::optional<threshold_choice> lowest_threshold(std::span<const label> labels, double target, double z) {
  std::vector<label> fit, held;
  std::vector<double> candidates;
  for (const label& l : labels) {
    (l.held_out ? held : fit).push_back(l);
    candidates.push_back(l.confidence);
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (const double t : candidates) {
    const precision_at f = precision_above(fit, t, z);
    if (f.lower < target) continue;
    const precision_at h = precision_above(held, t, z);
    return threshold_choice{t, f, h, h.lower >= target};
  }
  return std::nullopt;
}

double round_threshold(double threshold, double below) {
  double scale = 1;
  for (int places = 1; places <= 6; ++places) {
    scale *= 10;
    // The nudge keeps 0.29 (28.999… once scaled) from becoming 0.28; d ≤ threshold is checked.
    const double d = std::floor(threshold * scale + 1e-9) / scale;
    if (d > below && d <= threshold) return d;
  }
  return threshold;
}

}  // namespace baton::policies
