// The chain hash and each record's columns, shared by the SQLite and PostgreSQL stores.
#include "adapters/log/chain.hpp"

#include <algorithm>
#include <cmath>

#include "core/ids.hpp"
#include "core/json.hpp"
#include "core/sha256.hpp"

namespace baton::log {

void render_chain_text(std::span<const column_value> row, std::string& out) {
  std::vector<const column_value*> sorted;
  sorted.reserve(row.size());
  for (const column_value& c : row) {
    if (c.name != "row_hash" && !std::holds_alternative<std::nullptr_t>(c.value)) sorted.push_back(&c);
  }
  std::sort(sorted.begin(), sorted.end(), [](const column_value* a, const column_value* b) { return a->name < b->name; });
  out.push_back('{');
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (i) out.push_back(',');
    render_string(sorted[i]->name, out);
    out.push_back(':');
    const cell& v = sorted[i]->value;
    if (const auto* n = std::get_if<std::int64_t>(&v)) {
      out += std::to_string(*n);
    } else if (const auto* d = std::get_if<double>(&v)) {
      render_double(*d, out);
    } else {
      render_string(std::get<std::string_view>(v), out);
    }
  }
  out.push_back('}');
}

const cell* find_column(std::span<const column_value> row, std::string_view name) {
  for (const column_value& c : row) {
    if (c.name == name) return &c.value;
  }
  return nullptr;
}

std::vector<std::string> unique_column_names(std::span<const std::string_view> names) {
  std::vector<std::string> out;
  for (const std::string_view base : names) {
    std::string name(base);
    for (int k = 2; std::find(out.begin(), out.end(), name) != out.end(); ++k) name = std::string(base) + ":" + std::to_string(k);
    out.push_back(std::move(name));
  }
  return out;
}

std::string chain_hash(std::span<const column_value> row, std::string& scratch) {
  scratch.clear();
  render_chain_text(row, scratch);
  return sha256_hex(scratch);
}

namespace {

// A REAL as SQLite gives it back: it keeps no NaN (stored as NULL) and no -0.0 (an integral
// REAL is stored as an integer), so both are normalised before they are hashed (and PostgreSQL
// is given the same values, so a row hashes alike in both).
cell real(double v) {
  if (std::isnan(v)) return nullptr;
  return v == 0 ? 0.0 : v;
}

// A JSON column: its text, or NULL for a null value.
cell json_text(const json& v, std::string& storage) {
  if (v.is_null()) return nullptr;
  storage.clear();
  render_json(v, storage, false);
  return std::string_view(storage);
}

}  // namespace

void fill_row(const decision_record& r, bool store_state, row_text& t, std::vector<column_value>& row) {
  t.created_at = iso_utc(r.created_ms);
  row = {
      {"seq", std::int64_t{0}},
      {"id", std::string_view(r.id)},
      {"request_id", std::string_view(r.request_id)},
      {"session", std::string_view(r.session)},
      {"turn", r.turn},
      {"created_ms", r.created_ms},
      {"created_at", std::string_view(t.created_at)},
      {"queue_ms", real(r.queue_ms)},
      {"compile_ms", real(r.compile_ms)},
      {"engine_ms", real(r.engine_ms)},
      {"policy_ms", real(r.policy_ms)},
      {"total_ms", real(r.total_ms)},
      {"engine", std::string_view(r.engine)},
      {"model", std::string_view(r.model)},
      {"fingerprint", std::string_view(r.fingerprint)},
      {"registry_hash", std::string_view(r.registry_hash)},
      {"policy_hash", std::string_view(r.policy_hash)},
      {"schema_hash", std::string_view(r.schema_hash)},
      {"state_hash", std::string_view(r.state_hash)},
      {"state", store_state && r.state ? cell(std::string_view(*r.state)) : cell(nullptr)},
      {"answers", r.answers.empty() ? cell(nullptr) : cell(std::string_view(r.answers))},
      {"action", std::string_view(r.action)},
      {"tool", std::string_view(r.tool)},
      {"lane", std::string_view(r.lane)},
      {"confidence", real(r.confidence)},
      {"arguments", json_text(r.arguments, t.arguments)},
      {"proposal", json_text(r.proposal, t.proposal)},
      {"error_code", std::string_view(r.error_code)},
      {"fallback_of", r.fallback_of.empty() ? cell(nullptr) : cell(std::string_view(r.fallback_of))},
      {"cached_tokens", r.cached_tokens ? cell(*r.cached_tokens) : cell(nullptr)},
      {"events_dropped", r.events_dropped ? cell(*r.events_dropped) : cell(nullptr)},
      {"media", json_text(r.media, t.media)},
      {"media_dropped", r.media_dropped ? cell(*r.media_dropped) : cell(nullptr)},
      {"prev_hash", std::string_view()},
      {"row_hash", std::string_view()},
  };
}

void fill_row(const tool_run_record& r, bool, row_text& t, std::vector<column_value>& row) {
  t.created_at = iso_utc(r.created_ms);
  row = {
      {"seq", std::int64_t{0}},
      {"id", std::string_view(r.id)},
      {"decision", std::string_view(r.decision)},
      {"tool", std::string_view(r.tool)},
      {"executor", std::string_view(r.executor)},
      {"created_ms", r.created_ms},
      {"created_at", std::string_view(t.created_at)},
      {"duration_ms", real(r.duration_ms)},
      {"ok", std::int64_t{r.ok ? 1 : 0}},
      {"output", json_text(r.output, t.output)},
      {"error_code", std::string_view(r.error_code)},
      {"detail", std::string_view(r.detail)},
      {"attempts", std::int64_t{r.attempts}},
      {"prev_hash", std::string_view()},
      {"row_hash", std::string_view()},
  };
}

void fill_row(const escalation_record& r, bool, row_text& t, std::vector<column_value>& row) {
  t.created_at = iso_utc(r.created_ms);
  t.deadline_at = iso_utc(r.deadline_ms);
  t.arguments.clear();
  render_json(r.arguments, t.arguments, false);
  t.candidates.clear();
  render_json(r.candidates, t.candidates, false);
  row = {
      {"seq", std::int64_t{0}},
      {"id", std::string_view(r.id)},
      {"decision", std::string_view(r.decision)},
      {"session", std::string_view(r.session)},
      {"turn", r.turn},
      {"created_ms", r.created_ms},
      {"created_at", std::string_view(t.created_at)},
      {"deadline_ms", r.deadline_ms},
      {"deadline_at", std::string_view(t.deadline_at)},
      {"on_deadline", std::string_view(r.on_deadline)},
      {"reason", std::string_view(r.reason)},
      {"question", std::string_view(r.question)},
      {"tool", std::string_view(r.tool)},
      {"arguments", std::string_view(t.arguments)},
      {"confidence", real(r.confidence)},
      {"candidates", std::string_view(t.candidates)},
      {"state", std::string_view(r.state)},
      {"registry_hash", std::string_view(r.registry_hash)},
      {"policy_hash", std::string_view(r.policy_hash)},
      {"prev_hash", std::string_view()},
      {"row_hash", std::string_view()},
  };
}

void fill_row(const resolution_record& r, bool, row_text& t, std::vector<column_value>& row) {
  t.created_at = iso_utc(r.created_ms);
  t.arguments.clear();
  render_json(r.arguments, t.arguments, false);
  row = {
      {"seq", std::int64_t{0}},
      {"id", std::string_view(r.id)},
      {"escalation", std::string_view(r.escalation)},
      {"created_ms", r.created_ms},
      {"created_at", std::string_view(t.created_at)},
      {"outcome", std::string_view(r.outcome)},
      {"tool", std::string_view(r.tool)},
      {"arguments", std::string_view(t.arguments)},
      {"reason", std::string_view(r.reason)},
      {"reviewer", std::string_view(r.reviewer)},
      {"by", std::string_view(r.by)},
      {"forced", std::int64_t{r.forced ? 1 : 0}},
      {"registry_hash", std::string_view(r.registry_hash)},
      {"policy_hash", std::string_view(r.policy_hash)},
      {"prev_hash", std::string_view()},
      {"row_hash", std::string_view()},
  };
}

void fill_row(const delivery_record& r, bool, row_text& t, std::vector<column_value>& row) {
  t.created_at = iso_utc(r.created_ms);
  row = {
      {"seq", std::int64_t{0}},
      {"resolution", std::string_view(r.resolution)},
      {"created_ms", r.created_ms},
      {"created_at", std::string_view(t.created_at)},
      {"prev_hash", std::string_view()},
      {"row_hash", std::string_view()},
  };
}

void fill_row(const reload_record& r, bool, row_text& t, std::vector<column_value>& row) {
  t.created_at = iso_utc(r.created_ms);
  row = {
      {"seq", std::int64_t{0}},
      {"id", std::string_view(r.id)},
      {"created_ms", r.created_ms},
      {"created_at", std::string_view(t.created_at)},
      {"who", std::string_view(r.who)},
      {"outcome", std::string_view(r.outcome)},
      {"reason", std::string_view(r.reason)},
      {"registry_file", std::string_view(r.registry_file)},
      {"policy_file", std::string_view(r.policy_file)},
      {"old_registry_hash", std::string_view(r.old_registry_hash)},
      {"old_policy_hash", std::string_view(r.old_policy_hash)},
      {"new_registry_hash", r.new_registry_hash.empty() ? cell(nullptr) : cell(std::string_view(r.new_registry_hash))},
      {"new_policy_hash", r.new_policy_hash.empty() ? cell(nullptr) : cell(std::string_view(r.new_policy_hash))},
      {"prev_hash", std::string_view()},
      {"row_hash", std::string_view()},
  };
}

}  // namespace baton::log
