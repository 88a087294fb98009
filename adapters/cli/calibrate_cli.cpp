#include "adapters/cli/calibrate_cli.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <tuple>

#include "adapters/cli/exit_codes.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"
#include "core/sha256.hpp"

namespace baton {

namespace {

constexpr int exit_read_failed = 2;  // the log cannot be read

constexpr const char* calibrate_help = R"(Usage: baton calibrate [--db LOG] [--policy FILE] [--registry FILE] [--config FILE] [--since T]
                       [--target-precision P] [--fallback-precision P] [--min-support N]
                       [--out FILE] [--html FILE] [--json]

Turns the reviewers' resolutions in the decision log into labels of the tool the engine proposed,
measures per tool how well its confidence predicts them, and proposes per-tool lanes the labels
support, written as a policy fragment and replayed against the log (as `baton replay` does).

Labels: a reviewer who executed the proposed tool makes a correct label; a deny or another tool
a wrong one. A deadline resolution is no judgement and no label; a pending escalation neither.
A first pass that fell back takes the label of its second pass's escalation. Second passes are
left out (their confidence is the fallback engine's; fallback_lanes are not calibrated here), and
so are rows made under another registry, SystemOne answers, engine failures and unreadable
answers. Confidence is recomputed from the logged answers with the policy's metric.

Audit samples (the policy's `audit: {rate: R}`, lane "audit", or "fallback:audit" where the
audit drew a second pass) are the only labels above an execute threshold: a random share of the
decisions that would have executed. Each counts for 1/rate decisions, so that precision above the
current threshold is estimated without bias; a first pass labelled by its second pass's audited
escalation counts so too. The rate is estimated per policy hash from the log itself, first and
second passes together (the audit draws both at the same rate): audit-lane decisions /
(audit-lane + execute decisions). Weighted precision bounds use the effective size
(sum w)^2 / sum w^2.

Per tool: precision (and its Wilson 95 % lower bound) of the labels at or above each threshold,
coverage (the share of the tool's first passes at or above it: what would execute), a
reliability diagram (10 bins), the expected calibration error and the Brier score.

Proposal, for each tool with at least --min-support labels: the decisions are split into a fit
half and a held-out half by a hash of their id (the same split every run). `execute` is the
lowest threshold, among the labels' confidences, whose precision lower bound reaches
--target-precision on the fit half; it is then checked once on the held-out half, whose verdicts
played no part in choosing it, and proposed only when the bound reaches the target there too
(otherwise the lane is kept and both bounds are shown). `fallback` likewise at
--fallback-precision (the model is more often right than wrong there: worth asking the fallback
engine rather than a person), never above `execute`. Each is written as the shortest decimal that
keeps the same decisions on each side.
A tool where no threshold qualifies, or with too few labels, keeps its lane and is listed so;
so does a tool a rule decides before any lane (deny, always_escalate, over max_risk), whose labels
still count in its figures.
At 0.95 a half needs at least 73 labels at or above the threshold, all correct, before any
threshold qualifies.

Options:
  --policy FILE             the current policy: its lanes are the starting point and its
                            metric the confidence (default: the config's)
  --db, --registry, --config, --since   as for `baton replay`
  --target-precision P      the execute lane's precision, in (0, 1) (default 0.95)
  --fallback-precision P    the fallback lane's, in (0, 1) (default 0.5)
  --min-support N           labels a tool needs for a proposal (default 30)
  --out FILE                write the proposed `lanes:` block there (YAML the policy loader
                            reads: replace the policy's `lanes` with it)
  --html FILE               write the report as one HTML page with the plots (inline SVG and
                            CSS; no script, nothing fetched)
  --json                    one JSON object instead of the text report
  -h, --help                show this help

Exit status: 0 done; 2 the log cannot be read; 64 usage; 66 no log, registry, policy or config
at its path; 73 --out or --html cannot be written; 78 an invalid config, registry or policy.
)";

std::string fixed(double v, int places) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", places, v);
  return buf;
}

std::string number(double v) {
  std::string out;
  render_double(v, out);
  return out;
}

std::string percent(double share) { return fixed(100 * share, 1) + "%"; }

double coverage(const std::vector<double>& confidences, double t) {
  if (confidences.empty()) return 0;
  const auto n = std::count_if(confidences.begin(), confidences.end(), [t](double c) { return c >= t; });
  return double(n) / double(confidences.size());
}

// The thresholds the tables show: 0, 0.05, …, 0.95.
std::vector<double> grid() {
  std::vector<double> out;
  for (int i = 0; i < 20; ++i) out.push_back(i / 20.0);
  return out;
}

// The largest confidence of `values` below t (−1 when none): what a rounded threshold must stay above.
double below(const std::vector<double>& values, double t) {
  double out = -1;
  for (const double v : values) {
    if (v < t) out = std::max(out, v);
  }
  return out;
}

std::string lane_yaml(const policies::lane& l) {
  return "{execute: " + number(l.execute) + ", fallback: " + number(l.fallback) + "}";
}

const policies::lane& current_lane(const policies::policy& p, const std::string& tool) {
  return policies::lane_for(p, tool).thresholds;
}

// The rule that decides every decision of `tool` before any lane ("" when its lane applies).
std::string rule_over_lanes(const policies::policy& p, const tools::tool& tool) {
  auto listed = [&](const std::vector<std::string>& ids) { return std::find(ids.begin(), ids.end(), tool.id) != ids.end(); };
  if (listed(p.deny)) return "rule:deny";
  if (listed(p.always_escalate)) return "rule:always_escalate";
  if (p.max_risk && tool.risk > *p.max_risk) return "rule:max_risk";
  return {};
}

std::string status_line(const tool_calibration& t, const calibrate_options& o) {
  if (t.status == "not_a_tool") return "finish follows the default lane: no lane of its own";
  if (t.status == "ruled") return t.rule + " decides every one of its decisions: its lane never applies, none proposed";
  if (t.status == "too_few") {
    return "keeps its lane " + lane_yaml(t.current) + ": " + std::to_string(t.labels.size()) +
           " labels, fewer than --min-support " + std::to_string(o.min_support);
  }
  std::string s;
  if (t.status == "kept") {
    s = "keeps its lane " + lane_yaml(t.current) + ": no threshold reaches " + number(o.target) + " nor " +
        number(o.fallback_target) + " on the fit half and again on the held-out half";
  } else {
    s = "proposed " + lane_yaml(t.proposed) + " (now " + lane_yaml(t.current) + ")";
  }
  // A threshold the fit half chose and the held-out half did not confirm: both bounds, and kept.
  auto unconfirmed = [&](const char* name, const policies::threshold_choice& c, double target) {
    return std::string("\n    ") + name + ": " + number(std::round(c.threshold * 1000) / 1000) + " reaches " + number(target) +
           " on the fit half (lower bound " + fixed(c.fit.lower, 3) + " on " + std::to_string(c.fit.labels) +
           " labels) but not on the held-out half (" + fixed(c.held.lower, 3) + " on " +
           std::to_string(c.held.labels) + "): the current one is kept";
  };
  if (t.execute && t.execute->confirmed) {
    s += "\n    execute: lower bound " + fixed(t.execute->fit.lower, 3) + " on " + std::to_string(t.execute->fit.labels) +
         " fit labels, " + fixed(t.execute->held.lower, 3) + " on " + std::to_string(t.execute->held.labels) +
         " held-out; coverage " + percent(coverage(t.confidences, t.proposed.execute));
  } else if (t.execute) {
    s += unconfirmed("execute", *t.execute, o.target);
  } else if (t.status != "kept") {
    s += "\n    execute: no threshold reaches " + number(o.target) + " on the fit half: the current one is kept";
  }
  if (t.at_current && t.at_current->labels > 0 && t.at_current->lower < o.target) {
    s += "\n    warning: at the current execute " + number(t.current.execute) + " the precision is " +
         fixed(t.at_current->precision, 3) + " (lower bound " + fixed(t.at_current->lower, 3) + ", " +
         std::to_string(t.at_current->labels) + " labels), below " + number(o.target) +
         ": what this lane executes is wrong more often than the target allows; raise execute to 1 to send "
         "every one to a person, or improve the engine";
  }
  if (t.fallback && !t.fallback->confirmed) {
    s += unconfirmed("fallback", *t.fallback, o.fallback_target);
  } else if (t.fallback) {
    s += "\n    fallback: lower bound " + fixed(t.fallback->fit.lower, 3) + " on " +
         std::to_string(t.fallback->fit.labels) + " fit labels, " + fixed(t.fallback->held.lower, 3) + " on " +
         std::to_string(t.fallback->held.labels) + " held-out";
  }
  return s;
}

// ---- The HTML page: inline CSS and SVG only. ----

std::string escaped(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// A plot's frame: 0..1 on both axes, gridlines every 0.2, axis titles.
struct plot {
  static constexpr double width = 360, height = 260, left = 44, right = 12, top = 12, bottom = 40;
  static double x(double v) { return left + v * (width - left - right); }
  static double y(double v) { return top + (1 - v) * (height - top - bottom); }

  static std::string open(const char* kind, const std::string& tool, const char* label, const char* x_title,
                          const char* y_title) {
    std::string s = "<svg class=\"" + std::string(kind) + "\" data-tool=\"" + escaped(tool) +
                    "\" role=\"img\" aria-label=\"" + label + " of " + escaped(tool) + "\" viewBox=\"0 0 " +
                    fixed(width, 0) + " " + fixed(height, 0) + "\" width=\"" + fixed(width, 0) + "\" height=\"" +
                    fixed(height, 0) + "\">";
    s += "<rect class=\"frame\" x=\"" + fixed(x(0), 1) + "\" y=\"" + fixed(y(1), 1) + "\" width=\"" +
         fixed(x(1) - x(0), 1) + "\" height=\"" + fixed(y(0) - y(1), 1) + "\"/>";
    for (int i = 0; i <= 5; ++i) {
      const double v = i / 5.0;
      s += "<line class=\"grid\" x1=\"" + fixed(x(v), 1) + "\" y1=\"" + fixed(y(0), 1) + "\" x2=\"" + fixed(x(v), 1) +
           "\" y2=\"" + fixed(y(1), 1) + "\"/>";
      s += "<line class=\"grid\" x1=\"" + fixed(x(0), 1) + "\" y1=\"" + fixed(y(v), 1) + "\" x2=\"" + fixed(x(1), 1) +
           "\" y2=\"" + fixed(y(v), 1) + "\"/>";
      s += "<text class=\"tick\" x=\"" + fixed(x(v), 1) + "\" y=\"" + fixed(y(0) + 14, 1) +
           "\" text-anchor=\"middle\">" + fixed(v, 1) + "</text>";
      s += "<text class=\"tick\" x=\"" + fixed(x(0) - 6, 1) + "\" y=\"" + fixed(y(v) + 4, 1) +
           "\" text-anchor=\"end\">" + fixed(v, 1) + "</text>";
    }
    s += "<text class=\"title\" x=\"" + fixed((x(0) + x(1)) / 2, 1) + "\" y=\"" + fixed(height - 6, 1) +
         "\" text-anchor=\"middle\">" + x_title + "</text>";
    s += "<text class=\"title\" transform=\"rotate(-90)\" x=\"" + fixed(-(y(0) + y(1)) / 2, 1) +
         "\" y=\"12\" text-anchor=\"middle\">" + y_title + "</text>";
    return s;
  }
};

std::string reliability_svg(const std::string& tool, const std::vector<policies::reliability_bin>& bins) {
  std::string s = plot::open("reliability", tool, "Reliability diagram", "confidence", "share correct");
  s += "<line class=\"ideal\" x1=\"" + fixed(plot::x(0), 1) + "\" y1=\"" + fixed(plot::y(0), 1) + "\" x2=\"" +
       fixed(plot::x(1), 1) + "\" y2=\"" + fixed(plot::y(1), 1) + "\"/>";
  std::size_t most = 1;
  for (const auto& b : bins) most = std::max(most, b.count);
  for (const auto& b : bins) {
    if (b.count == 0) continue;
    const double x0 = plot::x(b.low) + 1, x1 = plot::x(b.high) - 1;
    const double top = plot::y(b.accuracy), base = plot::y(0);
    s += "<rect class=\"bar\" x=\"" + fixed(x0, 1) + "\" y=\"" + fixed(top, 1) + "\" width=\"" + fixed(x1 - x0, 1) +
         "\" height=\"" + fixed(std::max(base - top, 1.0), 1) + "\"><title>" + fixed(b.low, 1) + "–" +
         fixed(b.high, 1) + ": " + std::to_string(b.count) + " labels, mean confidence " +
         fixed(b.mean_confidence, 3) + ", share correct " + fixed(b.accuracy, 3) + "</title></rect>";
    const double r = 2.5 + 5.5 * std::sqrt(double(b.count) / double(most));
    s += "<circle class=\"mean\" cx=\"" + fixed(plot::x(b.mean_confidence), 1) + "\" cy=\"" + fixed(top, 1) +
         "\" r=\"" + fixed(r, 1) + "\"/>";
  }
  return s + "</svg>";
}

std::string polyline(const char* cls, const std::vector<std::pair<double, double>>& points) {
  std::string s = "<polyline class=\"" + std::string(cls) + "\" points=\"";
  for (const auto& [x, y] : points) s += fixed(plot::x(x), 1) + "," + fixed(plot::y(y), 1) + " ";
  if (!points.empty()) s.pop_back();
  return s + "\"/>";
}

std::string curve_svg(const tool_calibration& t, const calibrate_options& o) {
  std::string s = plot::open("curve", t.tool, "Precision and coverage", "threshold", "precision / coverage");
  std::vector<std::pair<double, double>> precision, lower, covered;
  for (int i = 0; i <= 100; ++i) {
    const double th = i / 100.0;
    const auto p = policies::precision_above(t.labels, th);
    if (p.labels > 0) {
      precision.emplace_back(th, p.precision);
      lower.emplace_back(th, p.lower);
    }
    covered.emplace_back(th, coverage(t.confidences, th));
  }
  s += "<line class=\"target\" x1=\"" + fixed(plot::x(0), 1) + "\" y1=\"" + fixed(plot::y(o.target), 1) + "\" x2=\"" +
       fixed(plot::x(1), 1) + "\" y2=\"" + fixed(plot::y(o.target), 1) + "\"/>";
  s += polyline("coverage", covered) + polyline("lower", lower) + polyline("precision", precision);
  if (t.execute) {
    s += "<line class=\"threshold\" x1=\"" + fixed(plot::x(t.proposed.execute), 1) + "\" y1=\"" + fixed(plot::y(0), 1) +
         "\" x2=\"" + fixed(plot::x(t.proposed.execute), 1) + "\" y2=\"" + fixed(plot::y(1), 1) +
         "\"><title>proposed execute " + number(t.proposed.execute) + "</title></line>";
  }
  return s + "</svg>";
}

constexpr const char* page_style = R"(
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;color:#1d2330}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-top:1px solid #d5d9e0;padding-top:14px}
table{border-collapse:collapse;margin:8px 0}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eceef2}
th:first-child,td:first-child{text-align:left}.plots{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
figure{margin:0;width:360px}figcaption{font-size:12px;color:#555c6b}table.thresholds{font-size:12px}
svg .frame{fill:#fafbfc;stroke:#b8bfca}svg .grid{stroke:#e3e6eb}svg .tick,svg .title{font-size:10px;fill:#555c6b}
svg .ideal{stroke:#8a93a3;stroke-dasharray:4 3}svg .bar{fill:#9cc0e8}svg .mean{fill:#1f5fa8}
svg .precision{fill:none;stroke:#1f5fa8;stroke-width:2}svg .lower{fill:none;stroke:#1f5fa8;stroke-dasharray:5 3}
svg .coverage{fill:none;stroke:#c26d12;stroke-width:2}svg .target{stroke:#2e8540;stroke-dasharray:2 3}
svg .threshold{stroke:#b3261e;stroke-width:1.5}pre{background:#f4f6f8;padding:10px;overflow:auto}
.status{margin:6px 0;white-space:pre-line}
)";

void tool_section(std::string& h, const tool_calibration& t, const calibrate_options& o) {
  h += "<section class=\"tool\" data-tool=\"" + escaped(t.tool) + "\"><h2>" + escaped(t.tool) + "</h2>";
  h += "<p>" + std::to_string(t.labels.size()) + " labels (" + std::to_string(t.audit_labels) + " audit samples), " +
       std::to_string(t.confidences.size()) + " first passes; ECE " + fixed(t.ece, 3) + ", Brier " +
       fixed(t.brier, 3) + "</p>";
  h += "<p class=\"status\">" + escaped(status_line(t, o)) + "</p>";
  h += "<div class=\"plots\"><figure>" + reliability_svg(t.tool, t.bins) +
       "<figcaption>Reliability: bars are the share correct per confidence bin, dots the bins' mean confidence "
       "(size: labels); the dashed diagonal is perfect calibration.</figcaption></figure><figure>" +
       curve_svg(t, o) +
       "<figcaption>Blue: precision of the labels at or above a threshold (dashed: its 95 % lower bound); orange: "
       "coverage; green: the target; red: the proposed execute threshold.</figcaption></figure>";
  h += "<table class=\"thresholds\"><tr><th>≥ threshold</th><th>labels</th><th>precision</th><th>lower bound</th><th>coverage</th></tr>";
  for (const double th : grid()) {
    const auto p = policies::precision_above(t.labels, th);
    h += "<tr><td>" + fixed(th, 2) + "</td><td>" + std::to_string(p.labels) + "</td><td>" +
         (p.labels ? fixed(p.precision, 3) : std::string("–")) + "</td><td>" +
         (p.labels ? fixed(p.lower, 3) : std::string("–")) + "</td><td>" + percent(coverage(t.confidences, th)) +
         "</td></tr>";
  }
  h += "</table></div></section>";
}

void replay_summary_html(std::string& h, const replay_report& r) {
  h += "<h2>Replay of the proposed lanes</h2><table class=\"replay\"><tr><th>tool</th><th>old → new</th><th>lane</th>"
       "<th>decisions</th><th>approved</th><th>changed</th><th>denied</th></tr>";
  for (const auto& [k, c] : r.table) {
    const std::string lane = k.old_lane == k.new_lane ? k.old_lane : k.old_lane + " → " + k.new_lane;
    h += "<tr><td>" + escaped(k.tool) + "</td><td>" + escaped(k.old_action + " → " + k.new_action) + "</td><td>" +
         escaped(lane) + "</td><td>" + std::to_string(c.decisions) + "</td><td>" + std::to_string(c.approved) +
         "</td><td>" + std::to_string(c.changed) + "</td><td>" + std::to_string(c.denied) + "</td></tr>";
  }
  h += "</table><p>";
  for (const char* name : {"executes_denied", "executes_changed", "escalates_approved", "changed"}) {
    h += std::string(name) + " " + std::to_string(static_cast<long long>(r.counter(name))) + " &nbsp; ";
  }
  h += "</p>";
}

}  // namespace

result<calibration_report> calibrate_log(const log::log_reader& log, const review_inputs& in,
                                         const calibrate_options& options) {
  calibration_report rep;
  rep.options = options;
  rep.db = in.db.where();
  rep.policy_file = in.policy_file.string();
  rep.policy_hash = in.policy.hash;
  rep.metric = std::string(to_string(in.policy.metric));
  rep.since_ms = in.since_ms;
  for (const tools::tool& t : in.registry.tools) rep.tools.emplace_back().tool = t.id;
  if (in.registry.finish) rep.tools.emplace_back().tool = tools::finish_option;
  auto tool_index = [&](const std::string& id) -> tool_calibration* {
    for (auto& t : rep.tools) {
      if (t.tool == id) return &t;
    }
    return nullptr;
  };
  // Audit labels with their policy hash: weighted once the rates are known.
  std::vector<std::tuple<tool_calibration*, std::size_t, std::string>> audited;
  std::map<std::string, std::pair<std::size_t, std::size_t>> lanes_seen;  // policy hash → (audit, execute)

  auto read = log.reviewed_decisions(in.since_ms, false, [&](const log::reviewed_decision& row) {
    const log::decision_record& d = row.decision;
    ++rep.decisions;
    if (d.lane == "systemone") {
      ++rep.systemone;
      return;
    }
    // The audit draws second passes at the policy's rate too: they count toward it, before the
    // other checks, so that a label weighted by a second pass's audit always finds its rate.
    if (!d.fallback_of.empty()) {
      if (policies::is_audit_lane(d.lane)) ++lanes_seen[d.policy_hash].first;
      if (d.action == "execute") ++lanes_seen[d.policy_hash].second;
    }
    if (d.registry_hash != in.registry.hash) {
      ++rep.skipped_registry;
      return;
    }
    if (d.answers.empty()) {
      ++rep.engine_failures;
      return;
    }
    if (!d.fallback_of.empty()) {
      ++rep.second_passes;
      return;
    }
    const auto answers = logged_answers(d);
    const answer* tool_answer = answers ? find_answer(*answers, tools::tool_question_id) : nullptr;
    const auto* choice = tool_answer ? std::get_if<choice_answer>(tool_answer) : nullptr;
    // The tool the policy judged: the engine's choice, or the call an agent made (an MCP gateway's).
    const std::string judged = d.tool.empty() || !choice ? (choice ? choice->choice : std::string()) : d.tool;
    tool_calibration* t = choice ? tool_index(judged) : nullptr;
    if (!t) {
      ++rep.unreadable;
      return;
    }
    ++rep.first_passes;
    if (policies::is_audit_lane(d.lane)) ++lanes_seen[d.policy_hash].first;
    if (d.action == "execute") ++lanes_seen[d.policy_hash].second;
    // The review is of the escalation that followed: the second pass's after a fallback, so it is
    // an audit sample when the audit drew the second pass, at the rate of the second pass's policy.
    const auto& drawn = row.second_pass ? row.second_pass->lane : d.lane;
    const auto& drawn_under = row.second_pass ? row.second_pass->policy_hash : d.policy_hash;
    const bool audit = policies::is_audit_lane(drawn);
    const double confidence = std::max(0.0, policies::confidence_in(*choice, judged, in.policy.metric));
    t->confidences.push_back(confidence);
    switch (review_of(row)) {
      case review::none: return;
      case review::pending: ++t->pending; ++rep.pending; return;
      case review::deadline: ++t->deadline; ++rep.deadline; return;
      case review::approved:
      case review::changed:
      case review::denied: break;
    }
    t->labels.push_back({confidence, review_of(row) == review::approved, 1, policies::held_out(d.id)});
    if (audit) audited.emplace_back(t, t->labels.size() - 1, drawn_under);
  });
  if (!read) return read.error();

  for (const auto& [hash, seen] : lanes_seen) {
    if (seen.first > 0) rep.audit_rates[hash] = double(seen.first) / double(seen.first + seen.second);
  }
  for (const auto& [t, i, hash] : audited) {
    t->labels[i].weight = 1 / rep.audit_rates.at(hash);
    ++t->audit_labels;
    ++rep.audit_labels;
  }

  rep.proposed = in.policy;
  rep.proposed.tool_lanes.clear();
  std::vector<std::pair<std::string, std::string>> fragment_tools;  // id → "{…}  # why"
  for (tool_calibration& t : rep.tools) {
    rep.labels += t.labels.size();
    rep.all_labels.insert(rep.all_labels.end(), t.labels.begin(), t.labels.end());
    t.bins = policies::reliability(t.labels);
    t.ece = policies::expected_calibration_error(t.bins);
    t.brier = policies::brier_score(t.labels);
    const bool is_tool = t.tool != tools::finish_option;
    t.current = is_tool ? current_lane(in.policy, t.tool) : in.policy.default_lane;
    t.proposed = t.current;
    if (!is_tool) {
      t.status = "not_a_tool";
      continue;
    }
    t.rule = rule_over_lanes(in.policy, *tools::find_tool(in.registry, t.tool));
    if (!t.rule.empty()) {
      t.status = "ruled";
    } else if (t.labels.size() < options.min_support) {
      t.status = "too_few";
    } else {
      t.execute = policies::lowest_threshold(t.labels, options.target);
      t.fallback = policies::lowest_threshold(t.labels, options.fallback_target);
      // A threshold the held-out half does not confirm is reported, not proposed.
      const bool execute = t.execute && t.execute->confirmed;
      const bool fallback = t.fallback && t.fallback->confirmed;
      if (execute) t.proposed.execute = policies::round_threshold(t.execute->threshold, below(t.confidences, t.execute->threshold));
      if (fallback) {
        t.proposed.fallback = policies::round_threshold(t.fallback->threshold, below(t.confidences, t.fallback->threshold));
      }
      t.proposed.fallback = std::min(t.proposed.fallback, t.proposed.execute);
      t.status = execute ? "proposed" : fallback ? "fallback_only" : "kept";
      if (!execute) t.at_current = policies::precision_above(t.labels, t.current.execute);
    }
    const bool own = std::any_of(in.policy.tool_lanes.begin(), in.policy.tool_lanes.end(),
                                 [&](const auto& l) { return l.first == t.tool; });
    const bool changes = t.proposed.execute != t.current.execute || t.proposed.fallback != t.current.fallback;
    if (own || changes) {
      rep.proposed.tool_lanes.emplace_back(t.tool, t.proposed);
      std::string why = t.status == "ruled"      ? t.rule + " decides: kept"
                        : t.status == "too_few"  ? std::to_string(t.labels.size()) + " labels: kept"
                        : t.status == "kept"     ? "no threshold qualifies: kept"
                        : t.status == "proposed" ? "proposed from " + std::to_string(t.labels.size()) + " labels"
                                                 : "fallback proposed from " + std::to_string(t.labels.size()) + " labels";
      if (t.at_current && t.at_current->labels > 0 && t.at_current->lower < options.target) {
        why += "; execute kept below the target: precision " + fixed(t.at_current->precision, 3) + " above it";
      }
      fragment_tools.emplace_back(t.tool, lane_yaml(t.proposed) + "  # " + why);
    }
  }
  rep.all_bins = policies::reliability(rep.all_labels);
  rep.all_ece = policies::expected_calibration_error(rep.all_bins);
  rep.all_brier = policies::brier_score(rep.all_labels);
  rep.proposed.hash = sha256_hex(rep.proposed.canonical_json());

  rep.fragment = "# baton calibrate: lanes for precision " + number(options.target) + " (execute) and " +
                 number(options.fallback_target) + " (fallback), from " + std::to_string(rep.labels) +
                 " labels in " + rep.db + ",\n# starting from " + rep.policy_file +
                 ". Replace the policy's `lanes` with this block.\nlanes:\n  default: " +
                 lane_yaml(in.policy.default_lane) + "\n";
  if (!fragment_tools.empty()) {
    rep.fragment += "  tools:\n";
    for (const auto& [id, text] : fragment_tools) rep.fragment += "    " + id + ": " + text + "\n";
  }
  return rep;
}

void render_calibration(const calibration_report& r, std::ostream& out) {
  const calibrate_options& o = r.options;
  out << "baton calibrate: " << r.db << ", " << r.decisions << " decisions"
      << (r.since_ms > 0 ? " since " + iso_utc(r.since_ms) : std::string()) << "\n"
      << "  policy " << r.policy_file << ", confidence " << r.metric << "\n"
      << "  labels: " << r.labels << " from reviewers (" << r.audit_labels << " audit samples";
  for (const auto& [hash, rate] : r.audit_rates) out << "; rate " << fixed(rate, 4) << " under " << hash.substr(0, 19);
  out << "); left out: " << r.deadline << " deadline resolutions, " << r.pending << " pending\n"
      << "  not read: " << r.skipped_registry << " under another registry, " << r.systemone << " SystemOne answers, "
      << r.engine_failures << " engine failures, " << r.unreadable << " unreadable, " << r.second_passes
      << " second passes\n"
      << "  all tools: ECE " << fixed(r.all_ece, 3) << ", Brier " << fixed(r.all_brier, 3) << "\n"
      << "  execute at precision >= " << number(o.target) << ", fallback at >= " << number(o.fallback_target)
      << " (Wilson 95% lower bound: the lowest threshold that meets it on the fit half of a split by decision id, "
         "proposed when it meets it on the held-out half too); min support " << o.min_support << "\n";
  for (const tool_calibration& t : r.tools) {
    if (t.labels.empty() && t.confidences.empty()) continue;
    std::size_t fit = 0;
    for (const auto& l : t.labels) fit += l.held_out ? 0 : 1;
    double right = 0, weight = 0;
    for (const auto& l : t.labels) {
      weight += l.weight;
      right += l.correct ? l.weight : 0;
    }
    out << "\n" << t.tool << ": " << t.confidences.size() << " first passes, " << t.labels.size() << " labels (fit "
        << fit << ", held-out " << t.labels.size() - fit << ")";
    if (!t.labels.empty()) {
      out << ", precision " << fixed(right / weight, 3) << ", ECE " << fixed(t.ece, 3) << ", Brier " << fixed(t.brier, 3);
    }
    out << "\n";
    if (!t.labels.empty()) {
      out << "   >= t  labels  precision  lower  coverage\n";
      std::size_t last = SIZE_MAX;
      for (const double th : grid()) {
        const auto p = policies::precision_above(t.labels, th);
        if (p.labels == last) continue;  // nothing between the rows
        last = p.labels;
        char line[128];
        std::snprintf(line, sizeof line, "   %4.2f  %6zu  %9s  %5s  %8s\n", th, p.labels,
                      p.labels ? fixed(p.precision, 3).c_str() : "-", p.labels ? fixed(p.lower, 3).c_str() : "-",
                      percent(coverage(t.confidences, th)).c_str());
        out << line;
      }
    }
    out << "  " << status_line(t, o) << "\n";
  }
  out << "\nproposed lanes:\n" << r.fragment;
  if (r.replay) {
    out << "\nreplay of the proposed lanes:\n";
    render_replay(*r.replay, out);
  }
}

json calibration_json(const calibration_report& r) {
  const calibrate_options& o = r.options;
  json j = json::object();
  j["db"] = r.db;
  j["since_ms"] = r.since_ms;
  j["policy"] = {{"file", r.policy_file}, {"hash", r.policy_hash}, {"confidence", r.metric}};
  j["target_precision"] = o.target;
  j["fallback_precision"] = o.fallback_target;
  j["min_support"] = o.min_support;
  j["decisions"] = r.decisions;
  j["first_passes"] = r.first_passes;
  j["labels"] = r.labels;
  j["audit_labels"] = r.audit_labels;
  j["deadline"] = r.deadline;
  j["pending"] = r.pending;
  j["skipped_registry"] = r.skipped_registry;
  j["systemone"] = r.systemone;
  j["engine_failures"] = r.engine_failures;
  j["unreadable"] = r.unreadable;
  j["second_passes"] = r.second_passes;
  json rates = json::object();
  for (const auto& [hash, rate] : r.audit_rates) rates[hash] = rate;
  j["audit_rates"] = std::move(rates);
  j["ece"] = r.all_ece;
  j["brier"] = r.all_brier;
  auto lane_json = [](const policies::lane& l) { return json{{"execute", l.execute}, {"fallback", l.fallback}}; };
  auto choice_json = [](const std::optional<policies::threshold_choice>& c) -> json {
    if (!c) return nullptr;
    return {{"threshold", c->threshold},
            {"fit", {{"labels", c->fit.labels}, {"precision", c->fit.precision}, {"lower", c->fit.lower}}},
            {"held_out", {{"labels", c->held.labels}, {"precision", c->held.precision}, {"lower", c->held.lower}}},
            {"confirmed", c->confirmed}};
  };
  json tools = json::array();
  for (const tool_calibration& t : r.tools) {
    json bins = json::array();
    for (const auto& b : t.bins) {
      bins.push_back({{"low", b.low}, {"high", b.high}, {"count", b.count}, {"weight", b.weight},
                      {"mean_confidence", b.mean_confidence}, {"accuracy", b.accuracy}});
    }
    json thresholds = json::array();
    for (const double th : grid()) {
      const auto p = policies::precision_above(t.labels, th);
      thresholds.push_back({{"threshold", th}, {"labels", p.labels}, {"precision", p.precision}, {"lower", p.lower},
                            {"coverage", coverage(t.confidences, th)}});
    }
    tools.push_back({{"tool", t.tool},
                     {"first_passes", t.confidences.size()},
                     {"labels", t.labels.size()},
                     {"audit_labels", t.audit_labels},
                     {"deadline", t.deadline},
                     {"pending", t.pending},
                     {"ece", t.ece},
                     {"brier", t.brier},
                     {"reliability", std::move(bins)},
                     {"thresholds", std::move(thresholds)},
                     {"status", t.status},
                     {"current", lane_json(t.current)},
                     {"proposed", lane_json(t.proposed)},
                     {"execute", choice_json(t.execute)},
                     {"fallback", choice_json(t.fallback)}});
    if (t.at_current) {
      tools.back()["at_current_execute"] = {{"labels", t.at_current->labels},
                                             {"precision", t.at_current->precision},
                                             {"lower", t.at_current->lower},
                                             {"below_target", t.at_current->labels > 0 && t.at_current->lower < r.options.target}};
    }
  }
  j["tools"] = std::move(tools);
  j["fragment"] = r.fragment;
  if (r.replay) j["replay"] = replay_json(*r.replay);
  return j;
}

std::string calibration_html(const calibration_report& r) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      // Nothing may be fetched: the page is read from a file, offline, possibly much later.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>baton calibrate: " + escaped(r.db) + "</title><style>" + page_style + "</style></head><body>";
  h += "<h1>baton calibrate</h1><p>" + escaped(r.db) + ": " + std::to_string(r.decisions) + " decisions" +
       (r.since_ms > 0 ? " since " + iso_utc(r.since_ms) : std::string()) + "; policy " + escaped(r.policy_file) +
       " (confidence " + escaped(r.metric) + "). " + std::to_string(r.labels) + " labels from reviewers (" +
       std::to_string(r.audit_labels) + " audit samples, weighted by the inverse of their rate); " +
       std::to_string(r.deadline) + " deadline resolutions and " + std::to_string(r.pending) +
       " pending escalations are no labels.</p>";
  h += "<p>Execute at precision ≥ " + number(r.options.target) + ", fallback at ≥ " + number(r.options.fallback_target) +
       ": the lowest threshold whose Wilson 95 % lower bound reaches it on the fit half of a split by decision id, "
       "checked once on the held-out half and proposed only when it reaches it there too; "
       "tools with fewer than " + std::to_string(r.options.min_support) + " labels keep their lane.</p>";
  tool_calibration all;
  all.tool = "all tools";
  all.labels = r.all_labels;
  all.bins = r.all_bins;
  all.ece = r.all_ece;
  all.brier = r.all_brier;
  all.status = "not_a_tool";
  for (const auto& t : r.tools) all.confidences.insert(all.confidences.end(), t.confidences.begin(), t.confidences.end());
  h += "<section class=\"tool\" data-tool=\"all tools\"><h2>All tools</h2><p>" + std::to_string(all.labels.size()) +
       " labels; ECE " + fixed(all.ece, 3) + ", Brier " + fixed(all.brier, 3) + "</p><div class=\"plots\"><figure>" +
       reliability_svg(all.tool, all.bins) + "<figcaption>Reliability of every tool's labels together.</figcaption>"
       "</figure><figure>" + curve_svg(all, r.options) +
       "<figcaption>Precision (blue, dashed: lower bound) and coverage (orange) of every tool together.</figcaption>"
       "</figure></div></section>";
  for (const tool_calibration& t : r.tools) {
    if (t.labels.empty() && t.confidences.empty()) continue;
    tool_section(h, t, r.options);
  }
  h += "<h2>Proposed lanes</h2><pre class=\"fragment\">" + escaped(r.fragment) + "</pre>";
  if (r.replay) replay_summary_html(h, *r.replay);
  return h + "</body></html>\n";
}

int calibrate_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  command_args a;
  if (auto problem = parse_args(args, {"--db", "--policy", "--registry", "--config", "--since", "--target-precision",
                                       "--fallback-precision", "--min-support", "--out", "--html"},
                                {"--json"}, a)) {
    return usage_error(err, *problem, "calibrate");
  }
  if (a.help) {
    out << calibrate_help;
    return exit_ok;
  }
  if (a.file) return usage_error(err, "unexpected argument '" + *a.file + "'", "calibrate");
  calibrate_options options;
  for (const auto& [flag, target] : {std::pair{"--target-precision", &options.target},
                                     std::pair{"--fallback-precision", &options.fallback_target}}) {
    const auto v = a.get(flag);
    if (!v) continue;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), *target);
    if (ec != std::errc() || end != v->data() + v->size() || !(*target > 0 && *target < 1)) {
      return usage_error(err, std::string(flag) + " takes a precision between 0 and 1, not '" + std::string(*v) + "'",
                         "calibrate");
    }
  }
  if (options.fallback_target > options.target) {
    return usage_error(err, "--fallback-precision is above --target-precision", "calibrate");
  }
  if (!read_count(a, "--min-support", options.min_support)) {
    return usage_error(err, "--min-support needs a positive number of labels", "calibrate");
  }
  review_inputs in;
  if (auto failed = read_review_inputs(a, "calibrate", in, err)) return *failed;
  const std::filesystem::path config(a.get("--config").value_or("config/baton.yaml"));
  for (const char* flag : {"--out", "--html"}) {
    const auto file = a.get(flag);
    if (file && overwrites_an_input(*file, {in.db.shared() ? std::filesystem::path() : in.db.path, in.policy_file,
                                            in.registry_file, config})) {
      err << "baton calibrate: " << flag << " " << *file << " is one of the files calibrate reads; name another\n";
      return exit_cant_create;
    }
  }
  auto log = log::log_reader::open(in.db);
  if (!log) {
    err << "baton calibrate: " << log.error().message << "\n";
    return log.error().code == codes::no_log ? exit_no_input : exit_read_failed;
  }
  auto report = calibrate_log(**log, in, options);
  if (!report) {
    err << "baton calibrate: " << report.error().message << "\n";
    return exit_read_failed;
  }
  // The proposal replayed: the current policy with the proposed lanes.
  review_inputs proposed = in;
  proposed.policy = report->proposed;
  proposed.policy_file = a.has("--out") ? std::filesystem::path(*a.get("--out")) : std::filesystem::path("(proposed lanes)");
  auto replayed = replay_log(**log, proposed);
  if (!replayed) {
    err << "baton calibrate: " << replayed.error().message << "\n";
    return exit_read_failed;
  }
  report->replay = std::move(*replayed);

  auto write = [&](std::string_view file, const std::string& text) {
    std::ofstream f{std::string(file), std::ios::binary | std::ios::trunc};
    f << text;
    f.close();
    if (!f) err << "baton calibrate: cannot write " << file << "\n";
    return static_cast<bool>(f);
  };
  if (const auto file = a.get("--out"); file && !write(*file, report->fragment)) return exit_cant_create;
  if (const auto file = a.get("--html"); file && !write(*file, calibration_html(*report))) return exit_cant_create;
  if (a.has("--json")) {
    out << render_json(calibration_json(*report), false) << "\n";
  } else {
    render_calibration(*report, out);
  }
  out.flush();
  return exit_ok;
}

}  // namespace baton
