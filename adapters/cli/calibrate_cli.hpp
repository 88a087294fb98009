// `baton calibrate`: the reviewers' resolutions as labels of the proposed tool, how well each
// tool's confidences are calibrated, and per-tool lanes the labels support at a target precision,
// written as a policy fragment and replayed; also as a self-contained HTML page with the plots.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/cli/replay_cli.hpp"
#include "policies/calibration.hpp"
#include "policies/policy.hpp"

namespace baton {

struct calibrate_options {
  double target = 0.95;           // the execute lane's precision
  double fallback_target = 0.5;   // the fallback lane's
  std::size_t min_support = 30;   // labels a tool needs before a lane is proposed for it
};

struct tool_calibration {
  std::string tool;
  std::vector<policies::label> labels;
  std::vector<double> confidences;  // of every first pass that proposed it: what coverage counts
  std::size_t audit_labels = 0, deadline = 0, pending = 0;
  std::vector<policies::reliability_bin> bins;
  double ece = 0, brier = 0;
  std::optional<policies::threshold_choice> execute, fallback;
  policies::lane current, proposed;
  // When no execute threshold qualifies: the precision of what the current execute threshold lets
  // run. Below the target, keeping the lane keeps executing decisions the labels say are too often
  // wrong: the report says so rather than leaving it unremarked.
  std::optional<policies::precision_at> at_current;
  // proposed: both found or the execute one; fallback_only; kept: none qualifies; too_few: below
  // min support; ruled: a rule decides before any lane (`rule`); not_a_tool: finish (it follows
  // the default lane).
  std::string status;
  std::string rule;  // rule:deny, rule:always_escalate or rule:max_risk for `ruled`
};

struct calibration_report {
  calibrate_options options;
  std::string db, policy_file, policy_hash;
  std::string metric;
  std::int64_t since_ms = 0;
  std::size_t decisions = 0, first_passes = 0, labels = 0, audit_labels = 0, deadline = 0, pending = 0;
  std::size_t skipped_registry = 0, systemone = 0, engine_failures = 0, unreadable = 0, second_passes = 0;
  std::map<std::string, double> audit_rates;  // policy hash → audited share of would-execute decisions
  std::vector<tool_calibration> tools;        // registry order, then finish
  std::vector<policies::label> all_labels;
  std::vector<policies::reliability_bin> all_bins;
  double all_ece = 0, all_brier = 0;
  policies::policy proposed;  // the policy with the proposed lanes
  std::string fragment;       // the proposed `lanes:` block, as YAML the policy loader reads
  std::optional<replay_report> replay;  // of `proposed`
};

// Reads the labels and proposes the lanes; the replay is left to the caller. Errors: the log's.
result<calibration_report> calibrate_log(const log::log_reader& log, const review_inputs& in,
                                         const calibrate_options& options);

void render_calibration(const calibration_report& r, std::ostream& out);
json calibration_json(const calibration_report& r);
// One page, inline CSS and SVG: no script, nothing fetched.
std::string calibration_html(const calibration_report& r);

int calibrate_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace baton
