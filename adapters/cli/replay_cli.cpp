#include "adapters/cli/replay_cli.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <set>

#include "adapters/cli/engine_cli.hpp"
#include "adapters/cli/exit_codes.hpp"
#include "adapters/runtime/server_config.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"
#include "engine/factory/make_engine.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

namespace {

// Exit statuses of `baton replay` besides exit_codes.hpp's.
constexpr int exit_condition_holds = 1;  // a --fail-if condition holds
constexpr int exit_read_failed = 2;      // the log cannot be read, or --engine cannot be loaded

constexpr const char* replay_help = R"(Usage: baton replay --policy NEW.yaml [--db LOG] [--registry FILE] [--config FILE]
                    [--since T] [--json] [--fail-if EXPR]...
                    [--engine NAME [--model DIR ...]]

Decides every logged decision again under the policy NEW.yaml from the answers the log kept (no
model is asked) and prints, per tool, how many went from each old action and lane to each new
one. Where a person resolved the escalation that followed a decision (its own, or its second
pass's after a fallback), the table says what they did with the proposed tool: approved (ran it),
changed (ran another tool) or denied; a deadline that ran out is no judgement and is counted
apart. Each review counts once: a turn that falls back again counts it on its second pass, whose
escalation it was; one that no longer falls back, on its first pass. The summary names what a policy change must not do: execute what a reviewer denied or
changed, and escalate what a reviewer simply approved.

A second pass (a decision the fallback engine made) is decided with the fallback rules; when the
new policy no longer falls back on its first pass, the second pass is not reached and is counted
as such. The policy's audit (`audit: {rate: R}`) draws from each logged decision's id as the
live server does: the replay audits the decisions the server would have. Rows are skipped and
counted when they were made under another registry than FILE's (the tools and questions differ),
when they are SystemOne answers (no routing), after an engine failure (no answers) and when
their answers do not parse.

Options:
  --policy FILE      the policy to replay (required)
  --db LOG           the decision log, a file or a postgresql:// URL (default: the config's log)
  --registry FILE    the registry the rows must have been made under (default: the config's)
  --config FILE      where the defaults come from (default config/baton.yaml); not read when
                     --db and --registry are given
  --since T          only decisions made at or after T: unix milliseconds, or an ISO 8601 date
                     or date-time (2024-05-01, 2024-05-01T12:30:00Z, 2024-05-01 12:30+02:00;
                     without a zone, UTC)
  --json             one JSON object instead of the table: the counters below, "actions"
                     (action -> {old, new}), "table" and, with --engine, "drift"
  --fail-if EXPR     exit 1 when a comparison holds, e.g. 'executes_denied>0'. NAME OP NUMBER
                     with OP one of > >= < <= == !=; several in one flag split by commas, or the
                     flag repeated: any that holds fails. NAME is a counter:
                       decisions, replayed, changed (another action), lane_changed (same action,
                       another lane), reviewed, approved, changed_by_reviewer, denied,
                       deadline, pending, executes_denied, executes_changed, executes_approved,
                       escalates_approved, escalates_changed, escalates_denied, skipped_registry,
                       systemone, engine_failures, unreadable, unreached
                     or with --engine: drift.redecided, drift.no_state, drift.with_media,
                     drift.engine_errors,
                     drift.flips, drift.flip_rate, drift.actions_changed,
                     drift.confidence_shift_mean, drift.confidence_shift_median,
                     drift.confidence_shift_mean_abs
  --engine NAME      also decide the logged states again with this engine (keyword, or clef
                     with --model DIR and the clef flags of `baton decide`): how often the tool
                     choice's argmax flips, per question, how far its confidence moves, and how
                     many actions the new answers change under NEW.yaml. Only where the log kept
                     the state (log.store_state: true); rows without one are counted. Rows whose
                     turn carried media (images, audio, videos) are counted and not decided
                     again: the log keeps what they were, not the media. First passes only: a
                     second pass was another engine's
  -h, --help         show this help

Exit status: 0 done; 1 a --fail-if condition holds; 2 the log cannot be read, or the engine
cannot be loaded; 64 usage; 66 no log, registry, policy or config at its path; 78 an invalid
config, registry or policy.
)";

std::string trimmed(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

// A whole decimal number of `digits` digits at `s[at]`.
std::optional<int> digits_at(std::string_view s, std::size_t at, std::size_t digits) {
  if (at + digits > s.size()) return std::nullopt;
  int v = 0;
  for (std::size_t i = at; i < at + digits; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// An --fail-if comparison.
struct fail_condition {
  std::string text, name, op;
  double value = 0;
  bool holds(double v) const {
    if (op == ">") return v > value;
    if (op == ">=") return v >= value;
    if (op == "<") return v < value;
    if (op == "<=") return v <= value;
    if (op == "==") return v == value;
    return v != value;
  }
};

// The counters --fail-if may name.
const std::vector<std::string>& counter_names() {
  static const std::vector<std::string> names = {
      "decisions",          "replayed",          "changed",          "lane_changed",      "reviewed",
      "approved",           "changed_by_reviewer", "denied",         "deadline",          "pending",
      "executes_denied",    "executes_changed",  "executes_approved", "escalates_approved", "escalates_changed",
      "escalates_denied",   "skipped_registry",  "systemone",        "engine_failures",   "unreadable",
      "unreached"};
  return names;
}
const std::vector<std::string>& drift_names() {
  static const std::vector<std::string> names = {
      "drift.redecided", "drift.no_state",        "drift.with_media",              "drift.engine_errors",
      "drift.flips",
      "drift.flip_rate", "drift.actions_changed", "drift.confidence_shift_mean",   "drift.confidence_shift_median",
      "drift.confidence_shift_mean_abs"};
  return names;
}

// One --fail-if value (comma-separated comparisons) into `out`; the problem otherwise.
std::optional<std::string> parse_fail_if(std::string_view expr, bool with_engine, std::vector<fail_condition>& out) {
  std::size_t start = 0;
  while (start <= expr.size()) {
    const std::size_t comma = expr.find(',', start);
    const std::string part = trimmed(expr.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    start = comma == std::string_view::npos ? expr.size() + 1 : comma + 1;
    if (part.empty()) return "--fail-if has an empty comparison in '" + std::string(expr) + "'";
    const std::size_t at = part.find_first_of("<>=!");
    if (at == std::string::npos) return "--fail-if '" + part + "' is not NAME OP NUMBER (OP: > >= < <= == !=)";
    fail_condition c;
    c.text = part;
    c.name = trimmed(std::string_view(part).substr(0, at));
    const bool two = at + 1 < part.size() && part[at + 1] == '=';
    c.op = part.substr(at, two ? 2 : 1);
    if (c.op == "=" || c.op == "!") return "--fail-if '" + part + "': OP is one of > >= < <= == !=";
    const std::string number = trimmed(std::string_view(part).substr(at + c.op.size()));
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), c.value);
    if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !std::isfinite(c.value)) {
      return "--fail-if '" + part + "': '" + number + "' is not a number";
    }
    const auto& names = counter_names();
    const bool counter = std::find(names.begin(), names.end(), c.name) != names.end();
    const bool drift = std::find(drift_names().begin(), drift_names().end(), c.name) != drift_names().end();
    if (drift && !with_engine) return "--fail-if '" + part + "': " + c.name + " needs --engine";
    if (!counter && !drift) return "--fail-if '" + part + "': unknown counter '" + c.name + "' (baton replay --help lists them)";
    out.push_back(std::move(c));
  }
  return std::nullopt;
}

std::string choice_of(const answer& a) {
  if (const auto* c = std::get_if<choice_answer>(&a)) return c->choice;
  if (const auto* s = std::get_if<score_answer>(&a)) {
    // The most likely level; the first wins a tie, as make_response picks.
    std::size_t best = 0;
    for (std::size_t i = 1; i < s->probabilities.size(); ++i) {
      if (s->probabilities[i].second > s->probabilities[best].second) best = i;
    }
    return s->probabilities.empty() ? std::string() : s->probabilities[best].first;
  }
  return std::get<noul_answer>(a).noul >= 0.5 ? "true" : "false";
}

double tool_confidence(const response& r, confidence_metric metric) {
  const answer* a = find_answer(r, tools::tool_question_id);
  const auto* c = a ? std::get_if<choice_answer>(a) : nullptr;
  if (!c) return 0;
  std::vector<double> p;
  for (const auto& [option, probability] : c->probabilities) p.push_back(probability);
  return choice_confidence(p, metric);
}

// The --engine pass: logged states in batches through the engine, compared with the logged answers.
class drift_probe {
 public:
  // The registry's questions as one request and in two stages, where it compiles so: each logged
  // decision is asked as the server asked it (its answers show which).
  drift_probe(decision_engine& engine, const review_inputs& in, std::optional<request> one,
              std::optional<tools::staged_questions> stages, drift_report& out)
      : engine_(engine), in_(in), one_(std::move(one)), stages_(std::move(stages)), out_(out) {
    out_.model = engine.describe().model_id;
  }

  void add(const log::decision_record& d, response old, policies::action::kind replayed) {
    // Its state without its media is not what was decided on.
    if (!d.media.is_null()) {
      ++out_.with_media;
      return;
    }
    if (!d.state) {
      ++out_.no_state;
      return;
    }
    // A decision of two stages lists the other groups ("group:NAME") beside its group's tools.
    const answer* tool = find_answer(old, tools::tool_question_id);
    const auto* choice = tool ? std::get_if<choice_answer>(tool) : nullptr;
    const bool staged = choice && std::any_of(choice->probabilities.begin(), choice->probabilities.end(),
                                              [](const auto& p) { return p.first.starts_with(tools::group_option_prefix); });
    if (staged ? !stages_ : !one_) {  // the registry cannot be asked so
      ++out_.engine_errors;
      return;
    }
    request r = staged ? stages_->first : *one_;
    json_parse_error unused;
    if (!parse_json(*d.state, r.state, unused, json_parse_options{256})) r.state = *d.state;
    json full_state = staged ? r.state : json();  // the second stage fits the window again from the whole
    if (!fit(r)) {
      ++out_.engine_errors;
      return;
    }
    batch_.push_back(std::move(r));
    pending_.push_back({std::move(old), replayed, d.id, d.proposal, staged, std::move(full_state)});
    if (batch_.size() >= 32) flush();
  }

  void flush() {
    if (batch_.empty()) return;
    auto results = engine_.decide(batch_);
    // In two stages, what the first stages chose is asked next, as the server asks it.
    std::vector<request> seconds;
    struct first_stage {
      std::size_t index;  // in the batch
      response answers;
      std::string group;
    };
    std::vector<first_stage> firsts;
    for (std::size_t i = 0; i < batch_.size(); ++i) {
      auto fresh = answers_of(batch_[i], results[i]);
      if (!fresh) continue;
      if (!pending_[i].staged) {
        compare(pending_[i], *fresh);
        continue;
      }
      const std::string group = group_for(pending_[i].proposal, *fresh);
      const auto second = group.empty() ? stages_->second.end() : stages_->second.find(group);
      if (second == stages_->second.end()) {  // finish, or a group of one tool: nothing more to ask
        compare(pending_[i], tools::merge_stages(*stages_, *fresh, group, nullptr));
        continue;
      }
      request r = second->second;
      r.state = pending_[i].full_state;
      if (!fit(r)) {
        ++out_.engine_errors;
        continue;
      }
      seconds.push_back(std::move(r));
      firsts.push_back({i, std::move(*fresh), group});
    }
    if (!seconds.empty()) {
      auto second_results = engine_.decide(seconds);
      for (std::size_t k = 0; k < seconds.size(); ++k) {
        auto fresh = answers_of(seconds[k], second_results[k]);
        if (!fresh) continue;
        const first_stage& f = firsts[k];
        compare(pending_[f.index], tools::merge_stages(*stages_, f.answers, f.group, &*fresh));
      }
    }
    batch_.clear();
    pending_.clear();
  }

 private:
  // A logged state waiting for its batch: its logged answers, the action they replay to, its id.
  struct logged {
    response answers;
    policies::action::kind replayed;
    std::string id;
    json proposal;
    bool staged = false;
    json full_state;  // staged: the state before the first stage's window was fitted
  };

  // The window the engine has: the server leaves out the oldest events the same way.
  bool fit(request& r) {
    return bool(tools::drop_oldest_events(r, in_.history, [this](const request& q) { return engine_.state_overflow(q); }));
  }

  // An engine's answers to `r`, or none (an engine error, counted).
  std::optional<response> answers_of(const request& r, const result<decision>& d) {
    auto fresh = d ? make_response(r, *d, in_.policy.metric, engine_.describe().model_id) : result<response>(d.error());
    if (!fresh) {
      ++out_.engine_errors;
      return std::nullopt;
    }
    return std::move(*fresh);
  }

  // The group the second stage asks, as the server took it (empty: none, finish).
  std::string group_for(const json& proposal, const response& first) const {
    const bool call = proposal.is_object() && proposal.value("call", false);
    const std::string called = call ? proposal.value("tool", "") : std::string();
    return tools::second_stage_group(*stages_, in_.registry, first, call ? &called : nullptr).value_or("");
  }

  void compare(const logged& was, const response& fresh) {
    const response& old = was.answers;
    ++out_.redecided;
    for (const auto& [id, a] : old.answers) {
      const answer* now = find_answer(fresh, id);
      if (!now || now->index() != a.index()) continue;
      auto it = std::find_if(out_.questions.begin(), out_.questions.end(), [&](const auto& q) { return q.first == id; });
      if (it == out_.questions.end()) it = out_.questions.insert(out_.questions.end(), {id, {0, 0}});
      ++it->second.first;
      if (choice_of(a) != choice_of(*now)) {
        ++it->second.second;
        if (id == tools::tool_question_id) ++out_.flips;
      }
    }
    out_.shifts.push_back(tool_confidence(fresh, in_.policy.metric) - tool_confidence(old, in_.policy.metric));
    // The new answers under the same policy, against the logged answers under it.
    const auto now = policies::redecide(in_.policy, in_.registry, fresh, was.proposal, false, was.id);
    if (now.what != was.replayed) ++out_.actions_changed;
  }

  decision_engine& engine_;
  const review_inputs& in_;
  std::optional<request> one_;
  std::optional<tools::staged_questions> stages_;
  drift_report& out_;
  std::vector<request> batch_;
  std::vector<logged> pending_;
};

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double mean_abs(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += std::abs(x);
  return v.empty() ? 0 : sum / double(v.size());
}

double flip_rate(const drift_report& d) { return d.redecided ? double(d.flips) / double(d.redecided) : 0; }

std::string fixed(double v, int places) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", places, v);
  return buf;
}

std::string signed_fixed(double v, int places) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.*f", places, v);
  return buf;
}

std::string percent(std::size_t part, std::size_t whole) {
  return whole ? fixed(100.0 * double(part) / double(whole), 1) + "%" : "-";
}

// A policy or registry hash cut for the table's header: "sha256:" and 12 digits.
std::string short_hash(const std::string& h) { return h.size() > 19 ? h.substr(0, 19) + "…" : h; }

}  // namespace

double replay_report::counter(std::string_view name) const {
  for (const auto& [n, v] : counters) {
    if (n == name) return v;
  }
  if (drift && name.starts_with("drift.")) {
    const std::string_view k = name.substr(6);
    if (k == "redecided") return double(drift->redecided);
    if (k == "no_state") return double(drift->no_state);
    if (k == "with_media") return double(drift->with_media);
    if (k == "engine_errors") return double(drift->engine_errors);
    if (k == "flips") return double(drift->flips);
    if (k == "flip_rate") return flip_rate(*drift);
    if (k == "actions_changed") return double(drift->actions_changed);
    if (k == "confidence_shift_mean") return mean(drift->shifts);
    if (k == "confidence_shift_median") return median(drift->shifts);
    if (k == "confidence_shift_mean_abs") return mean_abs(drift->shifts);
  }
  return 0;
}

std::optional<std::int64_t> parse_since(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (s.find_first_not_of("0123456789") == std::string_view::npos) {
    std::int64_t ms = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), ms);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return ms;
  }
  const auto year = digits_at(s, 0, 4), month = digits_at(s, 5, 2), day = digits_at(s, 8, 2);
  if (!year || !month || !day || s[4] != '-' || s[7] != '-') return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year(*year), std::chrono::month(unsigned(*month)),
                                         std::chrono::day(unsigned(*day))};
  if (!date.ok()) return std::nullopt;
  std::int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::sys_days(date).time_since_epoch()).count();
  if (s.size() == 10) return ms;
  if (s[10] != 'T' && s[10] != ' ') return std::nullopt;
  const auto hour = digits_at(s, 11, 2), minute = digits_at(s, 14, 2);
  if (!hour || !minute || s.size() < 16 || s[13] != ':' || *hour > 23 || *minute > 59) return std::nullopt;
  ms += (*hour * 60 + *minute) * 60000LL;
  std::size_t at = 16;
  if (at < s.size() && s[at] == ':') {
    const auto second = digits_at(s, at + 1, 2);
    if (!second || *second > 59) return std::nullopt;
    ms += *second * 1000LL;
    at += 3;
    if (at < s.size() && s[at] == '.') {
      // Milliseconds: the first three digits count, more are allowed.
      std::size_t end = at + 1;
      while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
      if (end == at + 1) return std::nullopt;
      std::string fraction(s.substr(at + 1, std::min<std::size_t>(3, end - at - 1)));
      fraction.resize(3, '0');
      ms += std::stoi(fraction);
      at = end;
    }
  }
  if (at == s.size() || (s[at] == 'Z' && at + 1 == s.size())) return ms;
  if ((s[at] == '+' || s[at] == '-') && s.size() == at + 6 && s[at + 3] == ':') {
    const auto oh = digits_at(s, at + 1, 2), om = digits_at(s, at + 4, 2);
    if (!oh || !om || *oh > 23 || *om > 59) return std::nullopt;
    const std::int64_t offset = (*oh * 60 + *om) * 60000LL;
    return s[at] == '+' ? ms - offset : ms + offset;
  }
  return std::nullopt;
}

std::optional<int> read_review_inputs(const command_args& a, const char* command, review_inputs& out,
                                      std::ostream& err) {
  const auto db = a.get("--db");
  const auto registry = a.get("--registry");
  const auto policy = a.get("--policy");
  if (auto since = a.get("--since")) {
    const auto ms = parse_since(*since);
    if (!ms) {
      return usage_error(err, "--since takes unix milliseconds or an ISO 8601 date or date-time, not '" +
                                  std::string(*since) + "'", command);
    }
    out.since_ms = *ms;
  }
  std::optional<server_config> config;
  if (a.has("--config") || !db || !registry || !policy) {
    const std::filesystem::path file(a.get("--config").value_or("config/baton.yaml"));
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      err << "baton " << command << ": no config at " << file.string()
          << " (it gives the defaults of --db, --registry and --policy)\n";
      return exit_no_input;
    }
    auto loaded = load_server_config(file);
    if (!loaded) {
      err << "baton " << command << ": " << loaded.error().message << "\n";
      return exit_config;
    }
    config = std::move(*loaded);
  }
  out.db = db ? log::log_at(*db) : config->log;
  if (config) out.history = config->history;
  out.registry_file = registry ? std::filesystem::path(*registry) : config->registry;
  out.policy_file = policy ? std::filesystem::path(*policy) : config->policy;
  for (const auto* file : {&out.registry_file, &out.policy_file}) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*file, ec)) {
      err << "baton " << command << ": no " << (file == &out.registry_file ? "registry" : "policy") << " at "
          << file->string() << "\n";
      return exit_no_input;
    }
  }
  // The registry was accepted at start-up under the serving engine's limits; the wire defaults
  // are the widest a registry needs here (its hash does not depend on them).
  auto reg = tools::load_registry(out.registry_file, request_limits{});
  if (!reg) {
    err << "baton " << command << ": " << reg.error().message << "\n";
    return exit_config;
  }
  out.registry = std::move(*reg);
  auto pol = policies::load_policy(out.policy_file, out.registry);
  if (!pol) {
    err << "baton " << command << ": " << pol.error().message << "\n";
    return exit_config;
  }
  out.policy = std::move(*pol);
  return std::nullopt;
}

std::optional<response> logged_answers(const log::decision_record& d) {
  if (d.answers.empty()) return std::nullopt;
  json answers;
  json_parse_error unused;
  if (!parse_json(d.answers, answers, unused)) return std::nullopt;
  // The log keeps the answers object; a response around it is what the reader takes.
  json body = {{"model", d.model}, {"answers", std::move(answers)}, {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}};
  auto r = response_from_json(body);
  if (!r) return std::nullopt;
  return std::move(*r);
}

review review_of(const log::reviewed_decision& r) {
  if (r.escalation.empty()) return review::none;
  if (!r.resolution) return review::pending;
  if (r.resolution->by == "deadline") return review::deadline;
  if (r.resolution->outcome != "execute") return review::denied;
  return r.resolution->tool == r.decision.tool ? review::approved : review::changed;
}

result<replay_report> replay_log(const log::log_reader& log, const review_inputs& in, decision_engine* engine) {
  replay_report rep;
  rep.db = in.db.where();
  rep.since_ms = in.since_ms;
  rep.policy_file = in.policy_file.string();
  rep.policy_hash = in.policy.hash;
  rep.registry_file = in.registry_file.string();
  rep.registry_hash = in.registry.hash;

  std::map<std::string, std::size_t> n;
  for (const std::string& name : counter_names()) n[name] = 0;
  // First passes that fell back and no longer would: their second passes are not reached.
  std::set<std::string> no_longer_falling_back;
  // A first pass that still falls back shares its second pass's review: counted on the second
  // pass, whose escalation it is, or here at the end on the first pass when the second pass is
  // not replayed (another registry, an engine failure, unreadable answers).
  struct held_review {
    replay_cell* cell;
    review said;
    bool executes, escalates;
  };
  std::map<std::string, held_review> reviews_of_second_passes;  // first pass's id → its review

  // A person's verdict: the cell's count, the totals, and by what the replayed policy now does.
  auto reviewed = [&](std::size_t& in_cell, const char* total, const char* verdict, bool executes, bool escalates) {
    ++in_cell;
    ++n["reviewed"];
    ++n[total];
    if (executes) ++n[std::string("executes_") + verdict];
    if (escalates) ++n[std::string("escalates_") + verdict];
  };
  auto count_review = [&](replay_cell& cell, review said, bool executes, bool escalates) {
    switch (said) {
      case review::none: break;
      case review::pending: ++cell.pending; ++n["pending"]; break;
      case review::deadline: ++cell.deadline; ++n["deadline"]; break;
      case review::approved: reviewed(cell.approved, "approved", "approved", executes, escalates); break;
      case review::changed: reviewed(cell.changed, "changed_by_reviewer", "changed", executes, escalates); break;
      case review::denied: reviewed(cell.denied, "denied", "denied", executes, escalates); break;
    }
  };

  std::optional<drift_probe> probe;
  if (engine) {
    // Asked as the server asked each: one request, or two stages (a decision of either is logged
    // under this registry: routing.max_options and the engines' limits choose, and may have
    // changed). What neither way compiles is refused.
    std::optional<request> one;
    std::optional<tools::staged_questions> stages;
    auto one_request = tools::compile_questions(in.registry, engine->describe().limits);
    if (one_request) one = std::move(*one_request);
    if (auto staged = tools::compile_stages(in.registry, engine->describe().limits)) stages = std::move(*staged);
    if (!one && !stages) return one_request.error();
    rep.drift.emplace();
    probe.emplace(*engine, in, std::move(one), std::move(stages), *rep.drift);
  }

  auto read = log.reviewed_decisions(in.since_ms, engine != nullptr, [&](const log::reviewed_decision& row) {
    const log::decision_record& d = row.decision;
    ++n["decisions"];
    if (d.lane == "systemone") {
      ++n["systemone"];
      return;
    }
    if (d.registry_hash != in.registry.hash) {
      ++n["skipped_registry"];
      return;
    }
    if (d.answers.empty()) {
      ++n["engine_failures"];
      return;
    }
    const std::optional<response> answers = logged_answers(d);
    if (!answers) {
      ++n["unreadable"];
      return;
    }
    const bool second = !d.fallback_of.empty();
    if (second && no_longer_falling_back.contains(d.fallback_of)) {
      ++n["unreached"];
      return;
    }
    // The audit draws from the logged id: the same decisions the live server would have drawn.
    const policies::action now = policies::redecide(in.policy, in.registry, *answers, d.proposal, second, d.id);
    const std::string new_action(policies::to_string(now.what));
    if (!second && d.action == "fallback" && now.what != policies::action::fallback) {
      no_longer_falling_back.insert(d.id);
    }
    ++n["replayed"];
    if (new_action != d.action) {
      ++n["changed"];
    } else if (now.lane != d.lane) {
      ++n["lane_changed"];
    }
    ++rep.actions[d.action].first;
    ++rep.actions[new_action].second;

    replay_cell& cell = rep.table[{d.tool.empty() ? "-" : d.tool, d.action, d.lane, new_action, now.lane}];
    ++cell.decisions;
    const review said = review_of(row);
    const bool executes = now.what == policies::action::execute;
    const bool escalates = now.what == policies::action::escalate;
    if (row.second_pass && now.what == policies::action::fallback) {
      reviews_of_second_passes[d.id] = {&cell, said, executes, escalates};
    } else {
      if (second) reviews_of_second_passes.erase(d.fallback_of);
      count_review(cell, said, executes, escalates);
    }
    if (probe && !second) probe->add(d, *answers, now.what);
  });
  if (!read) return read.error();
  for (const auto& [id, r] : reviews_of_second_passes) count_review(*r.cell, r.said, r.executes, r.escalates);
  if (probe) probe->flush();
  for (const std::string& name : counter_names()) rep.counters.emplace_back(name, double(n[name]));
  return rep;
}

void render_replay(const replay_report& r, std::ostream& out) {
  const auto count = [&](const char* name) { return static_cast<std::size_t>(r.counter(name)); };
  out << "baton replay: " << r.db << ", " << count("decisions") << " decisions"
      << (r.since_ms > 0 ? " since " + iso_utc(r.since_ms) : std::string()) << "\n"
      << "  policy   " << r.policy_file << " (" << short_hash(r.policy_hash) << ")\n"
      << "  registry " << r.registry_file << " (" << short_hash(r.registry_hash) << ")\n\n";

  // The table, columns as wide as their widest cell.
  std::vector<std::array<std::string, 9>> rows;
  rows.push_back({"TOOL", "OLD -> NEW", "LANE", "DECISIONS", "APPROVED", "CHANGED", "DENIED", "DEADLINE", "PENDING"});
  for (const auto& [k, c] : r.table) {
    const std::string lane = k.old_lane == k.new_lane ? k.old_lane : k.old_lane + " -> " + k.new_lane;
    rows.push_back({k.tool, k.old_action + " -> " + k.new_action, lane, std::to_string(c.decisions),
                    std::to_string(c.approved), std::to_string(c.changed), std::to_string(c.denied),
                    std::to_string(c.deadline), std::to_string(c.pending)});
  }
  std::array<std::size_t, 9> width{};
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const std::size_t pad = width[i] - row[i].size();
      if (i < 3) {
        line += row[i] + std::string(i + 1 < row.size() ? pad + 2 : 0, ' ');
      } else {
        line += std::string(pad, ' ') + row[i] + (i + 1 < row.size() ? "  " : "");
      }
    }
    out << line << "\n";
  }
  if (r.table.empty()) out << "(no decision to replay)\n";

  out << "\nreplayed " << count("replayed") << ": " << count("changed") << " change action, " << count("lane_changed")
      << " change lane only\n"
      << "people: " << count("reviewed") << " reviewed (" << count("approved") << " approved, "
      << count("changed_by_reviewer") << " ran another tool, " << count("denied") << " denied), " << count("deadline")
      << " ended by deadline, " << count("pending") << " pending\n"
      << "the new policy executes " << count("executes_denied") << " that a reviewer denied and "
      << count("executes_changed") << " that a reviewer changed; it escalates " << count("escalates_approved")
      << " that a reviewer approved\n"
      << "not replayed: " << count("skipped_registry") << " under another registry, " << count("systemone")
      << " SystemOne answers, " << count("engine_failures") << " engine failures, " << count("unreadable")
      << " unreadable, " << count("unreached") << " second passes not reached\n";

  if (r.drift) {
    const drift_report& d = *r.drift;
    out << "\ndrift: " << d.redecided << " logged states decided again by " << d.model << " (" << d.no_state
        << " without a state, " << d.with_media << " with media the log does not keep, " << d.engine_errors
        << " engine errors)\n"
        << "  tool choice flipped: " << d.flips << " (" << percent(d.flips, d.redecided) << ")\n";
    if (!d.questions.empty()) {
      out << "  per question:";
      for (const auto& [id, c] : d.questions) out << " " << id << " " << c.second << "/" << c.first;
      out << "\n";
    }
    out << "  tool confidence shift (new - old): mean " << signed_fixed(mean(d.shifts), 4) << ", median "
        << signed_fixed(median(d.shifts), 4) << ", mean |shift| " << fixed(mean_abs(d.shifts), 4) << "\n"
        << "  actions the new answers change under the policy: " << d.actions_changed << "\n";
  }
}

json replay_json(const replay_report& r) {
  json o = json::object();
  o["db"] = r.db;
  o["since_ms"] = r.since_ms;
  o["policy"] = {{"file", r.policy_file}, {"hash", r.policy_hash}};
  o["registry"] = {{"file", r.registry_file}, {"hash", r.registry_hash}};
  for (const auto& [name, v] : r.counters) o[name] = static_cast<std::int64_t>(v);
  json actions = json::object();
  for (const auto& [a, c] : r.actions) actions[a] = {{"old", c.first}, {"new", c.second}};
  o["actions"] = std::move(actions);
  json table = json::array();
  for (const auto& [k, c] : r.table) {
    table.push_back({{"tool", k.tool},
                     {"old", {{"action", k.old_action}, {"lane", k.old_lane}}},
                     {"new", {{"action", k.new_action}, {"lane", k.new_lane}}},
                     {"decisions", c.decisions},
                     {"approved", c.approved},
                     {"changed", c.changed},
                     {"denied", c.denied},
                     {"deadline", c.deadline},
                     {"pending", c.pending}});
  }
  o["table"] = std::move(table);
  if (r.drift) {
    const drift_report& d = *r.drift;
    json questions = json::object();
    for (const auto& [id, c] : d.questions) questions[id] = {{"compared", c.first}, {"flipped", c.second}};
    o["drift"] = {{"model", d.model},
                  {"redecided", d.redecided},
                  {"no_state", d.no_state},
                  {"with_media", d.with_media},
                  {"engine_errors", d.engine_errors},
                  {"flips", d.flips},
                  {"flip_rate", flip_rate(d)},
                  {"questions", std::move(questions)},
                  {"confidence_shift_mean", mean(d.shifts)},
                  {"confidence_shift_median", median(d.shifts)},
                  {"confidence_shift_mean_abs", mean_abs(d.shifts)},
                  {"actions_changed", d.actions_changed}};
  }
  o["failed"] = r.failed;
  return o;
}

int replay_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  // --fail-if may be repeated: taken out before the others are parsed (they keep the last).
  std::vector<std::string_view> rest;
  std::vector<std::string_view> fail_if;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--fail-if") {
      if (i + 1 == args.size()) return usage_error(err, "--fail-if needs a value", "replay");
      fail_if.push_back(args[++i]);
    } else if (args[i].starts_with("--fail-if=")) {
      fail_if.push_back(args[i].substr(10));
    } else {
      rest.push_back(args[i]);
    }
  }
  command_args a;
  if (auto problem = parse_args(rest, {"--db", "--policy", "--registry", "--config", "--since", "--engine", "--model",
                                       "--model-id", "--dtype", "--head-dtype", "--device", "--max-length",
                                       "--threads", "--batch-tokens", "--prefix-cache", "--media-root"},
                                {"--json"}, a)) {
    return usage_error(err, *problem, "replay");
  }
  if (a.help) {
    out << replay_help;
    return exit_ok;
  }
  if (a.file) return usage_error(err, "unexpected argument '" + *a.file + "'", "replay");
  if (!a.has("--policy")) return usage_error(err, "--policy FILE is required: the policy to replay", "replay");
  std::vector<fail_condition> conditions;
  for (const std::string_view f : fail_if) {
    if (auto problem = parse_fail_if(f, a.has("--engine"), conditions)) return usage_error(err, *problem, "replay");
  }
  engine_options engine_options;
  std::unique_ptr<decision_engine> engine;
  // Also without --engine: a clef flag alone is a usage error, not ignored.
  if (auto failed = read_engine_flags(a, engine_options, "replay", err)) return *failed;
  review_inputs in;
  if (auto failed = read_review_inputs(a, "replay", in, err)) return *failed;
  auto log = log::log_reader::open(in.db);
  if (!log) {
    err << "baton replay: " << log.error().message << "\n";
    return log.error().code == codes::no_log ? exit_no_input : exit_read_failed;
  }
  if (a.has("--engine")) {
    auto made = make_engine(engine_options);
    if (!made) {
      if (made.error().status < 500) return usage_error(err, made.error().message, "replay");
      err << "baton replay: " << made.error().message << "\n";
      return exit_read_failed;
    }
    engine = std::move(*made);
  }
  auto report = replay_log(**log, in, engine.get());
  if (!report) {
    err << "baton replay: " << report.error().message << "\n";
    return exit_read_failed;
  }
  for (const fail_condition& c : conditions) {
    const double v = report->counter(c.name);
    if (c.holds(v)) {
      std::string value;
      if (v == std::floor(v) && std::abs(v) < 1e15) {
        value = std::to_string(static_cast<std::int64_t>(v));
      } else {
        render_double(v, value);
      }
      report->failed.push_back(c.text + " (" + c.name + " = " + value + ")");
    }
  }
  if (a.has("--json")) {
    out << render_json(replay_json(*report), false) << "\n";
  } else {
    render_replay(*report, out);
  }
  out.flush();
  for (const std::string& f : report->failed) err << "baton replay: --fail-if " << f << " holds\n";
  return report->failed.empty() ? exit_ok : exit_condition_holds;
}

}  // namespace baton
