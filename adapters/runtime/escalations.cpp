#include "adapters/runtime/escalations.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <unordered_map>

#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/runtime/agent_service.hpp"
#include "adapters/log/sqlite_log.hpp"
#include "core/ids.hpp"

namespace baton {

namespace {

constexpr const char* deadline_reviewer = "baton";

error not_found(const std::string& id) {
  return make_error(404, "NOT_FOUND", "no escalation " + id);
}

// A refused field of a resolution, named in `loc` as the agent protocol names a frame's fields.
error invalid_field(json loc, std::string type, std::string msg) {
  return make_error(422, "INVALID_RESOLUTION", std::vector<issue>{issue{std::move(loc), std::move(msg), std::move(type), nullptr}});
}

// The API key a logged session belongs to: "KEY/SESSION" (a session id holds no '/', a key name
// may), "" without keys.
std::string_view owner_of(std::string_view session) {
  const auto slash = session.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : session.substr(0, slash);
}

const log::cell* column(const std::vector<log::column_value>& row, std::string_view name) {
  for (const auto& c : row) {
    if (c.name == name) return &c.value;
  }
  return nullptr;
}

std::string text(const std::vector<log::column_value>& row, std::string_view name) {
  const log::cell* c = column(row, name);
  const auto* t = c ? std::get_if<std::string_view>(c) : nullptr;
  return t ? std::string(*t) : std::string();
}

std::int64_t integer(const std::vector<log::column_value>& row, std::string_view name) {
  const log::cell* c = column(row, name);
  const auto* n = c ? std::get_if<std::int64_t>(c) : nullptr;
  return n ? *n : 0;
}

double real(const std::vector<log::column_value>& row, std::string_view name) {
  const log::cell* c = column(row, name);
  if (!c) return 0;
  if (const auto* d = std::get_if<double>(c)) return *d;
  if (const auto* n = std::get_if<std::int64_t>(c)) return static_cast<double>(*n);
  return 0;
}

// A JSON text the log holds; null when it does not parse (a row written by hand).
json parsed(std::string_view text) {
  json out;
  json_parse_error err;
  return parse_json(text, out, err, json_parse_options{}) ? out : json();
}

json json_column(const std::vector<log::column_value>& row, std::string_view name) { return parsed(text(row, name)); }

log::escalation_record escalation_from(const std::vector<log::column_value>& row) {
  log::escalation_record r;
  r.id = text(row, "id");
  r.decision = text(row, "decision");
  r.session = text(row, "session");
  r.turn = integer(row, "turn");
  r.created_ms = integer(row, "created_ms");
  r.deadline_ms = integer(row, "deadline_ms");
  r.on_deadline = text(row, "on_deadline");
  r.reason = text(row, "reason");
  r.question = text(row, "question");
  r.tool = text(row, "tool");
  r.arguments = json_column(row, "arguments");
  r.confidence = real(row, "confidence");
  r.candidates = json_column(row, "candidates");
  r.state = text(row, "state");
  r.registry_hash = text(row, "registry_hash");
  r.policy_hash = text(row, "policy_hash");
  return r;
}

log::resolution_record resolution_from(const std::vector<log::column_value>& row) {
  log::resolution_record r;
  r.id = text(row, "id");
  r.escalation = text(row, "escalation");
  r.created_ms = integer(row, "created_ms");
  r.outcome = text(row, "outcome");
  r.tool = text(row, "tool");
  r.arguments = json_column(row, "arguments");
  r.reason = text(row, "reason");
  r.reviewer = text(row, "reviewer");
  r.by = text(row, "by");
  r.forced = integer(row, "forced") != 0;
  r.registry_hash = text(row, "registry_hash");
  r.policy_hash = text(row, "policy_hash");
  return r;
}

// Escalation rows with what their evidence is derived from: the decision's logged answers.
constexpr const char* with_decision =
    "SELECT e.*, d.answers AS decision_answers, d.error_code AS decision_error FROM escalations e "
    "LEFT JOIN decisions d ON d.id = e.decision";

json tool_run_json(const log::tool_run_record& r) {
  return json{{"id", r.id},
              {"tool", r.tool},
              {"executor", r.executor},
              {"ok", r.ok},
              {"error_code", r.ok ? json() : json(r.error_code)},
              {"detail", r.detail},
              {"output", r.output},
              {"attempts", r.attempts},
              {"duration_ms", round_decimals(r.duration_ms, 3)},
              {"created_at", iso_utc(r.created_ms)},
              {"created_ms", r.created_ms}};
}

json tool_run_json(const std::vector<log::column_value>& row) {
  log::tool_run_record r;
  r.id = text(row, "id");
  r.tool = text(row, "tool");
  r.executor = text(row, "executor");
  r.ok = integer(row, "ok") != 0;
  r.error_code = text(row, "error_code");
  r.detail = text(row, "detail");
  r.output = json_column(row, "output");
  r.attempts = static_cast<int>(integer(row, "attempts"));
  r.duration_ms = real(row, "duration_ms");
  r.created_ms = integer(row, "created_ms");
  return tool_run_json(r);
}

// A number for people: `decimals` decimals, no trailing zeros ("1", "0.93").
std::string number_text(double v, int decimals = 4) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// A value and the threshold it was held against, with as many decimals (4 at least) as it takes
// for two different numbers to read differently: 0.80001 is above 0.8, and says so.
std::pair<std::string, std::string> compared_text(double value, double threshold) {
  int decimals = 4;
  while (decimals < 17 && value != threshold && number_text(value, decimals) == number_text(threshold, decimals)) {
    ++decimals;
  }
  return {number_text(value, decimals), number_text(threshold, decimals)};
}

// A question's instructions: a global question's, or a choice or boolean parameter's.
std::string instructions_of(const tools::registry& reg, const std::string& question) {
  if (const auto q = reg.questions.find(question); q != reg.questions.end() && q->is_object()) {
    return q->value("instructions", "");
  }
  for (const tools::tool& t : reg.tools) {
    for (const tools::parameter& p : t.parameters) {
      if (p.type != tools::parameter_type::text && tools::parameter_question_id(t, p) == question) return p.instructions;
    }
  }
  return {};
}

// One answer in words and numbers; the tool question's is the candidates.
json answer_json(const tools::registry& reg, const std::string& question, const answer& a) {
  json out = {{"question", question}, {"instructions", instructions_of(reg, question)}};
  if (const auto* n = std::get_if<noul_answer>(&a)) {
    out["type"] = "noul";
    out["p_true"] = round_decimals(n->noul, 4);
  } else if (const auto* c = std::get_if<choice_answer>(&a)) {
    out["type"] = "choice";
    out["choice"] = c->choice;
    out["confidence"] = round_decimals(c->confidence, 4);
  } else if (const auto* sc = std::get_if<score_answer>(&a)) {
    out["type"] = "score";
    out["score"] = round_decimals(sc->score, 4);
    out["confidence"] = round_decimals(sc->confidence, 4);
    // The level the score is nearest to, in the registry's words.
    const std::string nearest = std::to_string(static_cast<long long>(std::llround(sc->score)));
    for (const auto& [k, v] : sc->legend) {
      if (k == nearest) out["level"] = v.is_string() ? v : json(render_json(v, false));
    }
  }
  return out;
}

// "'low' or 'high'", as pydantic words a literal's expected values.
std::string expected_text(const json& values) {
  std::string out;
  std::size_t i = 0;
  for (const auto& [label, d] : values.items()) {
    out += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + ("'" + label + "'");
    ++i;
  }
  return out;
}

// The arguments a reviewer gives a tool: its parameters only, each of its type; every choice and
// boolean parameter given; a text parameter the registry fixes takes its value. Refused as the
// agent API refuses a frame: one FastAPI-style issue per field, at loc ["arguments", NAME].
result<void> complete_arguments(const tools::tool& t, json& args) {
  if (!args.is_object()) {
    return make_error(422, "INVALID_RESOLUTION",
                      {issue{json::array({"arguments"}), "Input should be a valid dictionary", "dict_type", nullptr}});
  }
  std::vector<issue> issues;
  auto add = [&](const std::string& name, std::string msg, const char* type, json ctx = nullptr) {
    issues.push_back({json::array({"arguments", name}), std::move(msg), type, std::move(ctx)});
  };
  for (const auto& [name, value] : args.items()) {
    const auto p = std::find_if(t.parameters.begin(), t.parameters.end(),
                                [&](const tools::parameter& x) { return x.name == name; });
    if (p == t.parameters.end()) {
      add(name, "Extra inputs are not permitted (`" + t.id + "` has no such parameter)", "extra_forbidden");
      continue;
    }
    switch (p->type) {
      case tools::parameter_type::choice:
        if (!value.is_string() || !p->values.contains(value.get<std::string>())) {
          const std::string expected = expected_text(p->values);
          add(name, "Input should be " + expected, "literal_error", {{"expected", expected}});
        }
        break;
      case tools::parameter_type::boolean:
        if (!value.is_boolean()) add(name, "Input should be a valid boolean", "bool_type");
        break;
      case tools::parameter_type::text:
        if (!value.is_string()) {
          add(name, "Input should be a valid string", "string_type");
        } else if (p->value && value != *p->value) {
          const std::string expected = "'" + *p->value + "'";
          add(name, "Input should be " + expected + " (fixed by the registry)", "literal_error", {{"expected", expected}});
        }
        break;
    }
  }
  for (const tools::parameter& p : t.parameters) {
    if (p.type == tools::parameter_type::text) {
      if (p.value) args[p.name] = *p.value;
    } else if (!args.contains(p.name)) {
      add(p.name, "Field required (a " + std::string(tools::to_string(p.type)) + ")", "missing");
    }
  }
  if (!issues.empty()) return make_error(422, "INVALID_RESOLUTION", std::move(issues));
  return {};
}

}  // namespace

// A pending escalation, with its deadline's timer.
struct escalation_desk::entry {
  log::escalation_record record;
  std::unique_ptr<boost::asio::steady_timer> timer;
  bool resolving = false;  // its resolution row is on its way to the log
};

// A resolution the agent has not acknowledged.
struct escalation_desk::waiting {
  std::string session;
  std::string frame;     // {"type":"resolution",…}
  std::string decision;  // for an agent-run tool's tool_result
  std::string tool;      // "" unless the agent runs it
  bool acknowledged = false;  // its delivery row is being written
};

// A read-only connection to the log for what memory does not hold (resolved escalations).
struct escalation_desk::reader {
  log::db_handle db;
  mutable std::mutex mutex;

  const escalation_desk& desk;

  reader(const log::log_options& o, const escalation_desk& d) : desk(d) {
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(o.path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
    db.reset(raw);
    if (rc != SQLITE_OK) {
      throw error_exception(make_error(500, "LOG_OPEN_FAILED", "cannot read the decision log " + o.path.string() +
                                                                   ": " + (raw ? sqlite3_errmsg(raw) : "out of memory")));
    }
    sqlite3_busy_timeout(db.get(), o.busy_timeout_ms);
  }

  // Calls `each` with every row of `sql` (its `?` bound to `arg` when given).
  result<void> query(const char* sql, const std::optional<std::string>& arg,
                     const std::function<void(const std::vector<log::column_value>&)>& each,
                     std::optional<std::int64_t> limit = std::nullopt) const {
    std::lock_guard lock(mutex);
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db.get(), sql, -1, &raw, nullptr) != SQLITE_OK) return failed();
    log::statement s(raw);
    int index = 1;
    if (arg) sqlite3_bind_text(s.get(), index++, arg->c_str(), static_cast<int>(arg->size()), SQLITE_TRANSIENT);
    if (limit) sqlite3_bind_int64(s.get(), index++, *limit);
    std::vector<log::column_value> row;
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      log::read_row(s.get(), row);
      each(row);
    }
    return rc == SQLITE_DONE ? result<void>() : failed();
  }

  error failed() const {
    return make_error(500, "LOG_READ_FAILED", std::string("cannot read the decision log: ") + sqlite3_errmsg(db.get()));
  }

  // The resolutions `selection` picks (SQL over `resolutions r`: WHERE and ORDER BY, and a `LIMIT ?`
  // when `limit` is given), each with its escalation: two queries however many there are.
  result<std::vector<std::pair<log::resolution_record, log::escalation_record>>> resolutions(
      const std::string& selection, std::optional<std::int64_t> limit = std::nullopt) const {
    std::vector<std::pair<log::resolution_record, log::escalation_record>> out;
    auto read = query(("SELECT r.* FROM resolutions r " + selection).c_str(), std::nullopt,
                      [&](const auto& row) { out.emplace_back(resolution_from(row), log::escalation_record{}); }, limit);
    if (!read) return read.error();
    std::unordered_map<std::string, log::escalation_record> escalations;
    read = query((std::string(with_decision) +
                  " WHERE e.id IN (SELECT r.escalation FROM resolutions r " + selection + ")").c_str(),
                 std::nullopt,
                 [&](const auto& row) {
                   log::escalation_record e = escalation_from(row);
                   desk.add_evidence(e, text(row, "decision_answers"), text(row, "decision_error"));
                   escalations.emplace(e.id, std::move(e));
                 },
                 limit);
    if (!read) return read.error();
    for (auto& [r, e] : out) {
      if (const auto it = escalations.find(r.escalation); it != escalations.end()) e = it->second;
    }
    return out;
  }

  // The tool runs of the decisions `decisions` (SQL over `resolutions r` and `escalations e`, as
  // for resolutions()) selects, decision → its latest run, rendered.
  result<std::map<std::string, json>> tool_runs(const std::string& decisions,
                                                std::optional<std::string> arg = std::nullopt,
                                                std::optional<std::int64_t> limit = std::nullopt) const {
    std::map<std::string, json> out;
    auto read = query(("SELECT * FROM tool_runs WHERE decision IN (" + decisions + ") ORDER BY seq").c_str(), arg,
                      [&](const auto& row) { out[text(row, "decision")] = tool_run_json(row); }, limit);
    if (!read) return read.error();
    return out;
  }

  // The escalation `id` and its resolution, if any.
  result<std::optional<std::pair<log::escalation_record, std::optional<log::resolution_record>>>> find(
      const std::string& id) const {
    std::optional<std::pair<log::escalation_record, std::optional<log::resolution_record>>> found;
    auto read = query((std::string(with_decision) + " WHERE e.id = ?").c_str(), id, [&](const auto& row) {
      found.emplace(escalation_from(row), std::nullopt);
      desk.add_evidence(found->first, text(row, "decision_answers"), text(row, "decision_error"));
    });
    if (!read) return read.error();
    if (!found) return found;
    read = query("SELECT * FROM resolutions WHERE escalation = ?", id,
                 [&](const auto& row) { found->second = resolution_from(row); });
    if (!read) return read.error();
    return found;
  }
};

escalation_desk::escalation_desk(log::decision_log& log, escalation_routing routing, boost::asio::any_io_executor io)
    : log_(log), routing_(routing), io_(std::move(io)), reader_(std::make_unique<reader>(log.options(), *this)) {}

escalation_desk::~escalation_desk() = default;

std::string escalation_desk::executor_kind(const std::string& tool) const {
  const auto it = routing_.executors.find(tool);
  return it == routing_.executors.end() ? "agent" : std::string(it->second->kind());
}

tools::executor* escalation_desk::executor_for(const log::resolution_record& r) const {
  if (r.outcome != "execute") return nullptr;
  const auto it = routing_.executors.find(r.tool);
  return it == routing_.executors.end() ? nullptr : it->second.get();
}

escalation_desk::waiting escalation_desk::waiting_for(const log::resolution_record& r, const log::escalation_record& e,
                                                      const json& resolution) const {
  waiting w;
  w.session = e.session;
  w.decision = e.decision;
  w.frame = render_json(json{{"type", "resolution"}, {"resolution", resolution}}, false);
  if (const tools::executor* ex = executor_for(r); ex && ex->agent_runs()) w.tool = r.tool;
  return w;
}

void escalation_desk::run_if_baton_runs(const log::resolution_record& r, const log::escalation_record& e) {
  if (tools::executor* ex = executor_for(r); ex && !ex->agent_runs()) run_tool(*ex, e, r.tool, r.arguments);
}

json escalation_desk::resolution_json(const log::resolution_record& r, const log::escalation_record& e) const {
  const tools::executor* ex = executor_for(r);
  return json{{"id", r.id},
              {"escalation", r.escalation},
              {"decision", e.decision},
              {"session", e.session},
              {"turn", e.turn},
              {"outcome", r.outcome},
              {"tool", r.tool.empty() ? json() : json(r.tool)},
              {"arguments", r.arguments},
              {"reason", r.reason},
              {"reviewer", r.reviewer},
              {"by", r.by},
              {"forced", r.forced},
              {"created_at", iso_utc(r.created_ms)},
              {"created_ms", r.created_ms},
              {"executor", ex ? json(ex->kind()) : json()}};
}

json escalation_desk::evidence_of(const log::escalation_record& r, const response* answers,
                                  std::string_view error_code) const {
  const policies::policy& p = routing_.policy;
  json ev = {{"rule", r.reason}, {"why", ""}, {"inputs", nullptr}, {"answers", json::array()}, {"tie", false}};
  std::string why;
  // The thresholds are the serving policy's: only when it is the one that decided are they shown.
  const bool same_policy = r.policy_hash == p.hash;
  const bool second_pass = r.reason.starts_with("fallback:");
  const std::string rule = second_pass ? r.reason.substr(9) : r.reason;
  const auto t = std::find_if(routing_.registry.tools.begin(), routing_.registry.tools.end(),
                              [&](const tools::tool& x) { return x.id == r.tool; });
  if (rule == "on_engine_error") {
    why = std::string(second_pass ? "the fallback engine" : "the engine") + " could not decide (" +
          (error_code.empty() ? std::string("no answer") : std::string(error_code)) +
          ") and this policy escalates engine failures (on_engine_error: escalate)";
  } else if (!same_policy) {
    why = r.reason + " (the policy changed since this was raised: its thresholds then are not shown)";
  } else if (rule == "rule:always_escalate") {
    why = r.tool + " is always escalated by this policy (rules.always_escalate)";
  } else if (rule == "rule:max_risk" && t != routing_.registry.tools.end() && p.max_risk) {
    why = r.tool + " is " + std::string(tools::to_string(t->risk)) + " risk; this policy allows at most " +
          std::string(tools::to_string(*p.max_risk));
    ev["inputs"] = {{"tool", r.tool},
                    {"risk", tools::to_string(t->risk)},
                    {"max_risk", tools::to_string(*p.max_risk)}};
  } else if (rule.starts_with("rule:escalate_when:")) {
    const std::string question = rule.substr(19);
    const auto trigger = std::find_if(p.escalate_when.begin(), p.escalate_when.end(),
                                      [&](const policies::escalation_trigger& x) { return x.question == question; });
    const answer* a = answers ? find_answer(*answers, question) : nullptr;
    if (trigger != p.escalate_when.end() && a) {
      const bool noul = trigger->when == policies::escalation_trigger::noul_above;
      const auto* n = std::get_if<noul_answer>(a);
      const auto* sc = std::get_if<score_answer>(a);
      const double value = n ? n->noul : sc ? sc->score : 0;
      const auto [value_text, threshold_text] = compared_text(value, trigger->threshold);
      why = noul ? question + ": P(true) " + value_text + " is above the trigger " + threshold_text + " (noul_above)"
                 : question + " scored " + value_text + ", above the trigger " + threshold_text + " (score_above)";
      ev["inputs"] = {{"question", question},
                      {noul ? "p_true" : "score", round_decimals(value, 4)},
                      {noul ? "noul_above" : "score_above", trigger->threshold}};
    }
  } else if (rule.starts_with("lane:")) {
    const std::string lane_name = rule.substr(5);
    const policies::lane& l = policies::lane_for(p, lane_name, second_pass).thresholds;
    const std::string metric(to_string(p.metric));
    // The first pass escalates below the lane's fallback; the fallback engine's pass below its execute.
    const bool below_fallback = !second_pass && r.confidence < l.fallback;
    const auto [confidence_text, threshold_text] = compared_text(r.confidence, below_fallback ? l.fallback : l.execute);
    why = std::string(second_pass ? "the fallback engine's " : "") + "confidence " + confidence_text + " (" + metric +
          ") is below the " + lane_name + " lane's " + (below_fallback ? "fallback " : "execute ") + threshold_text +
          (second_pass ? ": a second unsure answer goes to a person" : "");
    ev["inputs"] = {{"confidence", round_decimals(r.confidence, 4)},
                    {"metric", metric},
                    {"lane", lane_name},
                    {"execute", l.execute},
                    {"fallback", l.fallback}};
  }
  ev["why"] = why.empty() ? r.reason : why;
  auto own_parameter = [&](const std::string& id) {
    if (t == routing_.registry.tools.end()) return false;
    return std::any_of(t->parameters.begin(), t->parameters.end(),
                       [&](const tools::parameter& x) { return tools::parameter_question_id(*t, x) == id; });
  };
  if (answers) {
    for (const auto& [id, a] : answers->answers) {
      if (id == tools::tool_question_id) {
        // A flat tie: the proposed tool won only by coming first.
        if (const auto* c = std::get_if<choice_answer>(&a); c && c->probabilities.size() > 1) {
          double top = 0;
          for (const auto& [o, pr] : c->probabilities) top = std::max(top, pr);
          const auto tied = std::count_if(c->probabilities.begin(), c->probabilities.end(),
                                          [&](const auto& x) { return top - x.second < 1e-9; });
          ev["tie"] = tied > 1;
        }
        continue;
      }
      // Another tool's parameters do not bear on whether this tool runs: the global questions and
      // the escalated tool's parameters only.
      if (!routing_.registry.questions.contains(id) && !own_parameter(id)) continue;
      ev["answers"].push_back(answer_json(routing_.registry, id, a));
    }
  }
  return ev;
}

void escalation_desk::add_evidence(log::escalation_record& r, std::string_view logged, std::string_view error_code) const {
  std::optional<response> answers;
  if (!logged.empty()) {
    // The log keeps only the answers object: the rest of a response is filled in to read it.
    auto read = response_from_json(
        json{{"model", ""}, {"answers", parsed(logged)}, {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}});
    if (read) answers = std::move(*read);
  }
  r.evidence = evidence_of(r, answers ? &*answers : nullptr, error_code);
}

json escalation_desk::escalation_json(const log::escalation_record& r, const json& resolution, const json& tool_run) const {
  json shown = resolution;
  if (shown.is_object()) shown["tool_run"] = tool_run;
  return json{{"id", r.id},
              {"status", resolution.is_null() ? "pending" : "resolved"},
              {"decision", r.decision},
              {"session", r.session},
              {"turn", r.turn},
              {"created_at", iso_utc(r.created_ms)},
              {"created_ms", r.created_ms},
              {"deadline_at", iso_utc(r.deadline_ms)},
              {"deadline_ms", r.deadline_ms},
              {"on_deadline", r.on_deadline},
              {"reason", r.reason},
              {"question", r.question},
              {"tool", r.tool.empty() ? json() : json(r.tool)},
              {"arguments", r.arguments},
              {"confidence", round_decimals(r.confidence, 4)},
              {"candidates", r.candidates},
              {"state", parsed(r.state)},
              {"evidence", r.evidence},
              {"registry_hash", r.registry_hash},
              {"policy_hash", r.policy_hash},
              {"resolution", shown}};
}

log::escalation_record escalation_desk::make_record(const log::decision_record& d, const response* answers,
                                                    std::string state) const {
  log::escalation_record r;
  r.id = new_id('e');
  r.decision = d.id;
  r.session = d.session;
  r.turn = d.turn;
  r.created_ms = unix_ms();
  const policies::escalation_terms terms = policies::escalation_terms_for(routing_.policy, d.tool);
  r.deadline_ms = r.created_ms + terms.deadline_s * 1000;
  r.on_deadline = terms.execute_on_deadline ? "execute" : "deny";
  r.reason = d.lane;
  r.tool = d.tool;
  r.arguments = d.arguments;
  r.confidence = d.confidence;
  r.state = std::move(state);
  r.registry_hash = d.registry_hash;
  r.policy_hash = d.policy_hash;
  if (d.tool.empty()) {
    r.question = "The engine could not decide (" + (d.error_code.empty() ? std::string("no answer") : d.error_code) +
                 "). Which tool, if any, should run?";
  } else {
    r.question = "Should " + d.tool + " run? It was escalated by " + d.lane + " at confidence " +
                 render_json(json(round_decimals(d.confidence, 4)), false) + ".";
  }
  if (answers) {
    for (const auto& [id, a] : answers->answers) {
      const auto* choice = std::get_if<choice_answer>(&a);
      if (id != tools::tool_question_id || !choice) continue;
      std::vector<std::pair<std::string, double>> sorted = choice->probabilities;
      std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
      for (const auto& [tool, p] : sorted) {
        std::string description;
        if (tool == tools::finish_option && routing_.registry.finish) description = *routing_.registry.finish;
        for (const tools::tool& t : routing_.registry.tools) {
          if (t.id == tool) description = t.description;
        }
        r.candidates.push_back({{"tool", tool}, {"description", description}, {"probability", round_decimals(p, 4)}});
      }
    }
  }
  r.evidence = evidence_of(r, answers, d.error_code);
  return r;
}

void escalation_desk::start() {
  const std::int64_t now = unix_ms();
  std::vector<log::escalation_record> pending;
  auto read = reader_->query(
      (std::string(with_decision) +
       " WHERE NOT EXISTS (SELECT 1 FROM resolutions r WHERE r.escalation = e.id) ORDER BY e.seq").c_str(),
      std::nullopt, [&](const auto& row) {
        pending.push_back(escalation_from(row));
        add_evidence(pending.back(), text(row, "decision_answers"), text(row, "decision_error"));
      });
  if (!read) throw error_exception(read.error());
  auto unacknowledged = reader_->resolutions(
      "WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.resolution = r.id) ORDER BY r.seq");
  if (!unacknowledged) throw error_exception(unacknowledged.error());

  std::size_t expired = 0;
  for (log::escalation_record& e : pending) {
    auto owned = std::make_unique<entry>();
    owned->record = std::move(e);
    if (owned->record.deadline_ms > now) {
      pending_.emplace(owned->record.id, std::move(owned));
      continue;
    }
    // Passed while baton was down: resolved now, durably, before anything is served.
    auto res = prepare_deadline(*owned);
    std::promise<result<void>> written;
    auto queued = log_.append(res, [&written](result<void> ok) { written.set_value(ok); });
    const result<void> ok = queued ? written.get_future().get() : queued;
    if (!ok && ok.error().code != "DUPLICATE_ROW") throw error_exception(ok.error());
    ++expired;
    if (!ok) continue;
    routing_.counters.resolution(res.outcome, res.by);
    // A tool baton runs itself runs as it would have at the deadline (once the I/O threads run).
    run_if_baton_runs(res, owned->record);
    unacknowledged->emplace_back(std::move(res), owned->record);
  }
  for (const auto& [res, esc] : *unacknowledged) {
    waiting_.emplace(res.id, waiting_for(res, esc, resolution_json(res, esc)));
  }
  for (auto& [id, e] : pending_) arm(*e);
  if (!pending_.empty() || !waiting_.empty() || expired) {
    spdlog::info("escalations: {} pending, {} resolved at start-up (deadline passed), {} resolutions wait for their "
                 "agent", pending_.size(), expired, waiting_.size());
  }
}

void escalation_desk::arm(entry& e) {
  e.timer = std::make_unique<boost::asio::steady_timer>(io_);
  e.timer->expires_after(std::chrono::milliseconds(std::max<std::int64_t>(0, e.record.deadline_ms - unix_ms())));
  e.timer->async_wait([this, id = e.record.id](boost::system::error_code ec) {
    if (!ec) on_deadline(id);
  });
}

void escalation_desk::raised(const log::escalation_record& r) {
  {
    std::lock_guard lock(mutex_);
    auto owned = std::make_unique<entry>();
    owned->record = r;
    arm(*owned);
    pending_.emplace(r.id, std::move(owned));
    broadcast_locked(render_json(json{{"type", "escalation"}, {"escalation", escalation_json(r, nullptr)}}, false));
  }
}

protocol::resolve_input escalation_desk::deadline_input(const log::escalation_record& r) {
  protocol::resolve_input in;
  in.execute = r.on_deadline == "execute" && !r.tool.empty();
  if (in.execute) {
    in.tool = r.tool;
    in.arguments = r.arguments;
  }
  in.reason = "nobody resolved it by its deadline, " + iso_utc(r.deadline_ms) + " (on_deadline: " + r.on_deadline + ")";
  in.force = true;  // the outcome configured when it was raised applies whatever changed since
  return in;
}

log::resolution_record escalation_desk::prepare_deadline(const entry& e) const {
  auto res = prepare(e, deadline_input(e.record), deadline_reviewer, "deadline");
  if (res) return std::move(*res);
  // The configured `execute` no longer fits the registry (a tool renamed, a parameter changed):
  // denied, saying why, rather than left pending for ever.
  protocol::resolve_input deny = deadline_input(e.record);
  deny.execute = false;
  deny.tool.reset();
  deny.arguments.reset();
  deny.reason += "; denied: its execute no longer fits the registry (" + res.error().message + ")";
  auto denied = prepare(e, std::move(deny), deadline_reviewer, "deadline");
  return std::move(*denied);  // a forced deny has nothing left to refuse
}

void escalation_desk::on_deadline(const std::string& id) {
  log::resolution_record res;
  {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(id);
    if (it == pending_.end() || it->second->resolving) return;
    res = prepare_deadline(*it->second);
    it->second->resolving = true;
  }
  write_resolution(id, std::move(res), [this, id](result<json> r) {
    if (r) return;
    // Not in the log (a full or failing log): the deadline is tried again in 5 s.
    spdlog::error("escalation {}: its deadline passed, but its resolution is not in the log ({}); retrying in 5 s", id,
                  r.error().message);
    std::lock_guard lock(mutex_);
    if (const auto it = pending_.find(id); it != pending_.end() && it->second->timer) {
      it->second->timer->expires_after(std::chrono::seconds(5));
      it->second->timer->async_wait([this, id](boost::system::error_code ec) {
        if (!ec) on_deadline(id);
      });
    }
  });
}

void escalation_desk::resolve(const std::string& id, protocol::resolve_input in, const std::string& reviewer,
                              resolved_callback done) {
  resolve_as(id, std::move(in), reviewer, "reviewer", std::move(done));
}

result<log::resolution_record> escalation_desk::prepare(const entry& e, protocol::resolve_input&& in, const std::string& reviewer,
                                                        const char* by) const {
  const log::escalation_record& r = e.record;
  log::resolution_record res;
  res.outcome = in.execute ? "execute" : "deny";
  if (in.execute) {
    res.tool = in.tool.value_or(r.tool);
    if (res.tool.empty()) return invalid_field(json::array({"tool"}), "missing", "`tool` is required: the escalated decision names none");
    const bool finish = res.tool == tools::finish_option && routing_.registry.finish;
    const auto t = std::find_if(routing_.registry.tools.begin(), routing_.registry.tools.end(),
                                [&](const tools::tool& x) { return x.id == res.tool; });
    if (!finish && t == routing_.registry.tools.end()) return invalid_field(json::array({"tool"}), "literal_error", "unknown tool `" + res.tool + "`");
    res.arguments = in.arguments ? *in.arguments : res.tool == r.tool ? r.arguments : json::object();
    if (t != routing_.registry.tools.end()) {
      if (auto ok = complete_arguments(*t, res.arguments); !ok) return ok.error();
    } else if (!res.arguments.is_object() || !res.arguments.empty()) {
      return invalid_field(json::array({"arguments"}), "extra_forbidden", "`finish` takes no arguments");
    }
  }
  const bool registry_changed = r.registry_hash != routing_.registry.hash;
  const bool policy_changed = r.policy_hash != routing_.policy.hash;
  if ((registry_changed || policy_changed) && !in.force) {
    const std::string what = registry_changed && policy_changed ? "the registry and the policy"
                             : registry_changed                 ? "the registry"
                                                                : "the policy";
    return make_error(409, "VERSION_CHANGED", what + " changed since escalation " + r.id +
                                                  " was raised; resolve with \"force\": true to resolve it anyway");
  }
  res.id = new_id('v');
  res.escalation = r.id;
  res.created_ms = unix_ms();
  res.reason = std::move(in.reason);
  res.reviewer = reviewer;
  res.by = by;
  res.forced = in.force && (registry_changed || policy_changed);
  res.registry_hash = routing_.registry.hash;
  res.policy_hash = routing_.policy.hash;
  return res;
}

void escalation_desk::resolve_as(const std::string& id, protocol::resolve_input in, const std::string& reviewer, const char* by,
                                 resolved_callback done) {
  result<log::resolution_record> prepared = not_found(id);
  {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(id);
    if (it != pending_.end()) {
      if (it->second->resolving) {
        prepared = make_error(409, "RESOLUTION_IN_PROGRESS",
                              "escalation " + id + " is being resolved by another call; read it again in a moment");
      } else {
        prepared = prepare(*it->second, std::move(in), reviewer, by);
        if (prepared) it->second->resolving = true;
      }
    }
  }
  if (prepared) return write_resolution(id, std::move(*prepared), std::move(done));
  if (prepared.error().code != "NOT_FOUND") return done(prepared.error());
  // Not pending here: resolved already, or not (yet) an escalation at all.
  auto found = reader_->find(id);
  if (!found) return done(found.error());
  if (!*found || !(*found)->second) return done(not_found(id));
  const log::resolution_record& r = *(*found)->second;
  done(make_error(409, "ALREADY_RESOLVED",
                  "escalation " + id + " is already resolved: " + r.outcome + (r.tool.empty() ? "" : " " + r.tool) +
                      " by " + r.reviewer + " at " + iso_utc(r.created_ms) + " (resolution " + r.id + ")"));
}

void escalation_desk::write_resolution(const std::string& id, log::resolution_record res, resolved_callback done) {
  log::resolution_record copy = res;
  auto queued = log_.append(std::move(copy), [this, id, res, done](result<void> ok) mutable {
    boost::asio::post(io_, [this, id, res = std::move(res), ok, done = std::move(done)]() mutable {
      finish(id, std::move(res), ok, std::move(done));
    });
  });
  if (!queued) finish(id, std::move(res), queued, std::move(done));
}

void escalation_desk::finish(const std::string& id, log::resolution_record r, result<void> written,
                             resolved_callback done) {
  std::optional<log::escalation_record> e;
  std::optional<waiting> w;
  json object;
  std::optional<error> failed;
  {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(id);
    if (it == pending_.end()) {
      failed = make_error(409, "ALREADY_RESOLVED", "escalation " + id + " is already resolved");
    } else if (!written && written.error().code != "DUPLICATE_ROW") {
      it->second->resolving = false;
      failed = written.error();
    } else {
      e = std::move(it->second->record);
      if (it->second->timer) it->second->timer->cancel();
      pending_.erase(it);
      if (!written) {
        // Another baton on the same log resolved it first.
        failed = make_error(409, "ALREADY_RESOLVED", "escalation " + id + " is already resolved");
      } else {
        object = resolution_json(r, *e);
        w = waiting_for(r, *e, object);
        waiting_.emplace(r.id, *w);
        // Under the lock, so that reviewers see `resolved` after the `escalation` it follows.
        broadcast_locked(render_json(json{{"type", "resolved"}, {"escalation", escalation_json(*e, object)}}, false));
      }
    }
  }
  if (failed) return done(std::move(*failed));
  routing_.counters.resolution(r.outcome, r.by);
  spdlog::info("escalation {} resolved by {} ({}): {} {}", id, r.reviewer, r.by, r.outcome, r.tool);
  deliver(*w);
  // A tool baton runs itself runs now; the agent runs its own once it has the resolution.
  run_if_baton_runs(r, *e);
  done(result<json>(boost::system::in_place_value, std::move(object)));
}

void escalation_desk::run_tool(tools::executor& ex, const log::escalation_record& e, const std::string& tool,
                               const json& arguments) {
  ex.run(tools::tool_call{e.decision, tool, arguments},
         [this, escalation = e.id, decision = e.decision, session = e.session, tool,
          kind = std::string(ex.kind())](tools::tool_outcome o) {
           routing_.counters.tool_run(tool, o.ok);
           log::tool_run_record run = log::tool_run_of(decision, tool, kind, o);
           // Reviewers hear of the run once it is in the log, so that GET /v1/escalations/{id} agrees.
           const std::string frame =
               render_json(json{{"type", "tool_run"}, {"escalation", escalation}, {"tool_run", tool_run_json(run)}}, false);
           auto report = [this, decision, frame](result<void> ok) {
             if (!ok) {
               spdlog::error("the tool run of decision {} is not in the log: {}", decision, ok.error().message);
               return;
             }
             std::lock_guard lock(mutex_);
             broadcast_locked(frame);
           };
           if (auto queued = log_.append(std::move(run), report); !queued) report(queued.error());
           const json f = protocol::render_tool_result(decision, tool, std::move(o));
           std::shared_ptr<agent_connection> c;
           {
             std::lock_guard lock(mutex_);
             if (const auto it = sessions_.find(session); it != sessions_.end()) c = it->second.lock();
           }
           // Only a connected session hears of it; the run is in the log either way.
           if (c) {
             boost::asio::post(c->strand(), [c, frame = render_json(f, false)]() mutable { c->send(std::move(frame)); });
           }
         });
}

void escalation_desk::deliver(const waiting& w) {
  std::shared_ptr<agent_connection> c;
  {
    std::lock_guard lock(mutex_);
    if (const auto s = sessions_.find(w.session); s != sessions_.end()) c = s->second.lock();
  }
  if (!c) return;  // sent when the agent resumes the session
  boost::asio::post(c->strand(), [c, w, max = routing_.max_pending_tool_results] {
    c->send(w.frame);
    if (!w.tool.empty()) c->await_tool(w.decision, w.tool, max);
  });
}

escalation_desk::attached escalation_desk::attach(const std::string& session, const std::shared_ptr<agent_connection>& c,
                                                  bool resend) {
  attached a;
  std::lock_guard lock(mutex_);
  sessions_[session] = c;
  // Forget the connections that are gone, now and then, so the map stays the size of the live ones.
  if (sessions_.size() > 2 * live_mark_ + 64) {
    std::erase_if(sessions_, [](const auto& s) { return s.second.expired(); });
    live_mark_ = sessions_.size();
  }
  if (resend) {
    for (const auto& [id, e] : pending_) {
      if (e->record.session == session) a.pending.push_back(id);
    }
    for (const auto& [id, w] : waiting_) {
      if (w.session != session || w.acknowledged) continue;
      a.frames.push_back(w.frame);
      if (!w.tool.empty()) a.awaited.emplace_back(w.decision, w.tool);
    }
  }
  return a;
}

result<void> escalation_desk::acknowledge(const std::string& resolution, const std::string& owner) {
  bool waiting_here = false;
  {
    std::lock_guard lock(mutex_);
    const auto it = waiting_.find(resolution);
    if (it != waiting_.end() && owner_of(it->second.session) == owner) {
      if (it->second.acknowledged) return {};  // its delivery row is on its way
      it->second.acknowledged = true;
      waiting_here = true;
    }
  }
  if (waiting_here) {
    auto written = [this, resolution](result<void> ok) {
      boost::asio::post(io_, [this, resolution, ok] {
        std::lock_guard lock(mutex_);
        const auto it = waiting_.find(resolution);
        if (it == waiting_.end()) return;
        if (!ok) {
          // Sent again on the next resume, and acknowledged again.
          spdlog::error("the acknowledgement of resolution {} is not in the log: {}", resolution, ok.error().message);
          it->second.acknowledged = false;
          return;
        }
        const std::string session = it->second.session;
        waiting_.erase(it);
        // Nothing more to send this session: its connection need not be remembered.
        const bool more =
            std::any_of(waiting_.begin(), waiting_.end(), [&](const auto& x) { return x.second.session == session; }) ||
            std::any_of(pending_.begin(), pending_.end(), [&](const auto& x) { return x.second->record.session == session; });
        if (!more) sessions_.erase(session);
      });
    };
    if (auto queued = log_.append(log::delivery_record{resolution, unix_ms()}, written); !queued) written(queued.error());
    return {};
  }
  // Delivery is at least once: acknowledging again what is acknowledged is no error.
  bool acknowledged = false;
  std::string session;
  auto read = reader_->query(
      "SELECT e.session FROM deliveries d JOIN resolutions r ON r.id = d.resolution "
      "JOIN escalations e ON e.id = r.escalation WHERE d.resolution = ?",
      resolution, [&](const auto& row) {
        session = text(row, "session");
        acknowledged = true;
      });
  if (!read) return read.error();
  if (acknowledged && owner_of(session) == owner) return {};
  return make_error(404, "UNKNOWN_RESOLUTION",
                    "resolution `" + resolution + "` is not one of this key's sessions' resolutions");
}

void escalation_desk::add_listener(const std::shared_ptr<review_listener>& l) {
  std::lock_guard lock(mutex_);
  json list = json::array();
  for (const auto& [id, e] : pending_) {
    if (list.size() == max_listed) break;
    list.push_back(escalation_json(e->record, nullptr));
  }
  // send() only queues: under the lock, nothing the desk says later can overtake the snapshot.
  l->send(render_json(json{{"type", "snapshot"}, {"escalations", std::move(list)}}, false));
  listeners_.push_back(l);
}

void escalation_desk::broadcast_locked(const std::string& frame) {
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (auto l = it->lock()) {
      l->send(frame);
      ++it;
    } else {
      it = listeners_.erase(it);
    }
  }
}

std::size_t escalation_desk::pending() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

result<std::string> escalation_desk::list_json(std::string_view status, std::size_t limit) const {
  if (status != "pending" && status != "resolved" && status != "all") {
    return make_error(422, "INVALID_REQUEST", "status must be pending, resolved or all");
  }
  json list = json::array();
  if (status != "resolved") {
    std::lock_guard lock(mutex_);
    for (const auto& [id, e] : pending_) {
      if (list.size() == limit) break;
      list.push_back(escalation_json(e->record, nullptr));
    }
  }
  if (status != "pending") {
    const std::string selection = "ORDER BY r.seq DESC LIMIT ?";
    auto resolved = reader_->resolutions(selection, static_cast<std::int64_t>(limit));
    if (!resolved) return resolved.error();
    auto runs = reader_->tool_runs(
        "SELECT e.decision FROM resolutions r JOIN escalations e ON e.id = r.escalation " + selection, std::nullopt,
        static_cast<std::int64_t>(limit));
    if (!runs) return runs.error();
    for (const auto& [r, e] : *resolved) {
      const auto run = runs->find(e.decision);
      list.push_back(escalation_json(e, resolution_json(r, e), run == runs->end() ? json() : run->second));
    }
  }
  return render_json(json{{"escalations", std::move(list)}}, false);
}

result<std::string> escalation_desk::get_json(const std::string& id) const {
  {
    std::lock_guard lock(mutex_);
    if (const auto it = pending_.find(id); it != pending_.end()) {
      return render_json(escalation_json(it->second->record, nullptr), false);
    }
  }
  auto found = reader_->find(id);
  if (!found) return found.error();
  if (!*found) return not_found(id);
  const auto& [e, r] = **found;
  if (!r) return render_json(escalation_json(e, nullptr), false);
  auto runs = reader_->tool_runs("?", e.decision);
  if (!runs) return runs.error();
  const auto run = runs->find(e.decision);
  return render_json(escalation_json(e, resolution_json(*r, e), run == runs->end() ? json() : run->second), false);
}

std::string escalation_desk::tools_json() const {
  json list = json::array();
  for (const tools::tool& t : routing_.registry.tools) {
    json parameters = json::array();
    for (const tools::parameter& p : t.parameters) {
      json values = json::array();
      for (const auto& [label, description] : p.values.items()) values.push_back({{"value", label}, {"description", description}});
      parameters.push_back({{"name", p.name},
                            {"type", tools::to_string(p.type)},
                            {"instructions", p.instructions},
                            {"values", std::move(values)},
                            {"fixed", p.value ? json(*p.value) : json()}});
    }
    list.push_back({{"id", t.id},
                    {"description", t.description},
                    {"risk", tools::to_string(t.risk)},
                    {"executor", executor_kind(t.id)},
                    {"parameters", std::move(parameters)}});
  }
  json out = {{"tools", std::move(list)}, {"finish", routing_.registry.finish ? json(*routing_.registry.finish) : json()},
              {"registry_hash", routing_.registry.hash}};
  return render_json(out, false);
}

}  // namespace baton
