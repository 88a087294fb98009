#include "adapters/protocol/agent_protocol.hpp"

#include <algorithm>

namespace baton::protocol {

namespace {

// Collects every field problem of one frame, FastAPI-style, for one INVALID_FRAME answer.
struct checker {
  const json& frame;
  std::vector<issue> issues;

  void add(json loc, std::string msg, std::string type) { issues.push_back({std::move(loc), std::move(msg), std::move(type), nullptr}); }

  const json* get(const char* key) const {
    const auto it = frame.find(key);
    return it == frame.end() ? nullptr : &*it;
  }

  void only(std::initializer_list<std::string_view> keys) {
    for (const auto& [k, v] : frame.items()) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) add(json::array({k}), "Extra inputs are not permitted", "extra_forbidden");
    }
  }

  const json* required(const char* key) {
    const json* v = get(key);
    if (!v) add(json::array({key}), "Field required", "missing");
    return v;
  }

  std::optional<std::string> string(const char* key, bool needed) {
    const json* v = needed ? required(key) : get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) {
      add(json::array({key}), "Input should be a valid string", "string_type");
      return std::nullopt;
    }
    return v->get<std::string>();
  }

  // An array of JSON objects.
  void events(const char* key, const json& v) {
    if (!v.is_array()) {
      add(json::array({key}), "Input should be a valid list of event objects", "list_type");
      return;
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_object()) add(json::array({key, i}), "Input should be a valid dictionary (an event object)", "dict_type");
    }
  }
};

result<frame> invalid(checker& c) {
  return make_error(422, "INVALID_FRAME", std::move(c.issues));
}

result<frame> read_decide(const json& f) {
  checker c{f, {}};
  c.only({"type", "id", "session", "turn", "history", "append", "proposal", "questions"});
  decide_frame d;
  if (auto s = c.string("session", true)) {
    if (!valid_session_id(*s)) {
      c.add(json::array({"session"}), "A session id is 1-128 characters of A-Za-z0-9_.:@-", "string_pattern_mismatch");
    }
    d.session = std::move(*s);
  }
  if (const json* t = c.get("turn")) {
    // Integers beyond 64 bits arrive as big integers: out of range, not of the wrong type.
    const bool big = is_big_integer(*t);
    if (!t->is_number_integer() && !big) {
      c.add(json::array({"turn"}), "Input should be a valid integer", "int_type");
    } else if (big ? t->get_binary().front() == '-'
                   : t->is_number_unsigned() ? t->get<std::uint64_t>() < 1 : t->get<std::int64_t>() < 1) {
      c.add(json::array({"turn"}), "Input should be greater than or equal to 1", "greater_than_equal");
    } else if (big || t->get<std::uint64_t>() > std::uint64_t(max_turn)) {
      c.issues.push_back(turn_too_large({}).detail.front());
    } else {
      d.turn = t->get<std::int64_t>();
    }
  }
  const json* history = c.get("history");
  const json* append = c.get("append");
  if (history && append) {
    c.add(json::array({"append"}), "Give either history or append, not both", "value_error");
  } else if (!history && !append) {
    c.add(json::array({"history"}), "Field required (or append)", "missing");
  } else {
    d.append = append != nullptr;
    c.events(d.append ? "append" : "history", d.append ? *append : *history);
  }
  if (const json* p = c.get("proposal"); p && !p->is_null()) {
    if (!p->is_object()) {
      c.add(json::array({"proposal"}), "Input should be a valid dictionary", "dict_type");
    } else {
      const auto tool = p->find("tool");
      if (tool == p->end() || !tool->is_string()) {
        c.add(json::array({"proposal", "tool"}), "Input should be a valid string (a tool id)", "string_type");
      }
      const auto args = p->find("arguments");
      if (args != p->end() && !args->is_object()) {
        c.add(json::array({"proposal", "arguments"}), "Input should be a valid dictionary", "dict_type");
      }
      for (const auto& [k, v] : p->items()) {
        if (k != "tool" && k != "arguments") c.add(json::array({"proposal", k}), "Extra inputs are not permitted", "extra_forbidden");
      }
    }
  }
  if (const json* q = c.get("questions"); q && !q->is_null() && !q->is_object()) {
    c.add(json::array({"questions"}), "Input should be a valid dictionary of id → question", "dict_type");
  }
  if (!c.issues.empty()) return invalid(c);
  d.events = d.append ? *append : *history;
  if (const json* p = c.get("proposal")) d.proposal = *p;
  if (const json* q = c.get("questions")) d.questions = *q;
  return frame(std::move(d));
}

result<frame> read_tool_result(const json& f) {
  checker c{f, {}};
  c.only({"type", "id", "session", "decision", "ok", "output"});
  tool_result_frame r;
  if (auto d = c.string("decision", true)) r.decision = std::move(*d);
  c.string("session", false);
  if (const json* ok = c.required("ok")) {
    if (!ok->is_boolean()) {
      c.add(json::array({"ok"}), "Input should be a valid boolean", "bool_type");
    } else {
      r.ok = ok->get<bool>();
    }
  }
  if (!c.issues.empty()) return invalid(c);
  if (const json* o = c.get("output")) r.output = *o;
  return frame(std::move(r));
}

result<frame> read_resume(const json& f) {
  checker c{f, {}};
  c.only({"type", "id", "session"});
  resume_frame r;
  if (auto s = c.string("session", true)) {
    if (!valid_session_id(*s)) {
      c.add(json::array({"session"}), "A session id is 1-128 characters of A-Za-z0-9_.:@-", "string_pattern_mismatch");
    }
    r.session = std::move(*s);
  }
  if (!c.issues.empty()) return invalid(c);
  return frame(std::move(r));
}

result<frame> read_ack(const json& f) {
  checker c{f, {}};
  c.only({"type", "id", "resolution"});
  ack_frame a;
  if (auto r = c.string("resolution", true)) a.resolution = std::move(*r);
  if (!c.issues.empty()) return invalid(c);
  return frame(std::move(a));
}

}  // namespace

error turn_too_large(std::string_view context) {
  std::string msg = "Input should be less than or equal to " + std::to_string(max_turn);
  if (!context.empty()) msg += " (" + std::string(context) + ")";
  return make_error(422, "INVALID_FRAME",
                    {issue{json::array({"turn"}), std::move(msg), "less_than_equal", json{{"le", max_turn}}}});
}

bool valid_session_id(std::string_view s) noexcept {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '.' || ch == ':' || ch == '@' || ch == '-';
  });
}

result<frame> parse_frame(std::string_view text, std::size_t max_json_depth, json& id) {
  id = nullptr;
  json f;
  json_parse_error err;
  if (!parse_json(text, f, err, json_parse_options{max_json_depth})) {
    return make_error(400, "INVALID_JSON", "the frame is not JSON: " + err.message + " at byte " + std::to_string(err.byte));
  }
  if (!f.is_object()) return make_error(400, "INVALID_JSON", "a frame must be a JSON object");
  if (const auto it = f.find("id"); it != f.end()) id = *it;
  const auto type = f.find("type");
  if (type == f.end() || !type->is_string()) {
    return make_error(422, "UNKNOWN_TYPE", "a frame needs a \"type\": decide, tool_result, resume or ack");
  }
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "decide") return read_decide(f);
  if (t == "tool_result") return read_tool_result(f);
  if (t == "resume") return read_resume(f);
  if (t == "ack") return read_ack(f);
  return make_error(422, "UNKNOWN_TYPE", "unknown frame type \"" + t + "\" (decide, tool_result, resume or ack)");
}

json render_tool_result(const std::string& decision, const std::string& tool, tool_outcome&& o) {
  json frame = {{"type", "tool_result"}, {"decision", decision}, {"tool", tool}, {"ok", o.ok}};
  if (!o.ok) {
    frame["error_code"] = o.error_code;
    frame["detail"] = o.detail;
  }
  frame["attempts"] = o.attempts;
  frame["output"] = std::move(o.output);
  return frame;
}

}  // namespace baton::protocol
