#include "adapters/protocol/agent_protocol.hpp"

#include <algorithm>

#include "adapters/protocol/frame_opener.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"

namespace baton::protocol {

namespace {

// Collects every field problem of one frame, FastAPI-style, for one INVALID_FRAME answer.
struct checker {
  const json& frame;
  std::vector<issue> issues;
  std::vector<issue> too_large;  // media items over their size limit: 413 when nothing else is wrong

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

  // An array of JSON objects, whose media items are taken out into `media`.
  void events(const char* key, json& v, const request_limits& limits, std::vector<event_item>& media) {
    if (!v.is_array()) {
      add(json::array({key}), "Input should be a valid list of event objects", "list_type");
      return;
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_object()) {
        add(json::array({key, i}), "Input should be a valid dictionary (an event object)", "dict_type");
        continue;
      }
      for (const auto& [field, lim] : {std::pair<std::string_view, const media_limits*>{"images", &limits.images},
                                       {"audio", &limits.audio},
                                       {"videos", &limits.videos}}) {
        const auto it = v[i].find(field);
        if (it == v[i].end() || it->is_null()) continue;
        // A frame with an item that does not read is refused: in one that is taken, item k is slot k.
        media_read read = read_media_array(*it, field, *lim, json::array({key, i, field}));
        for (issue& problem : read.issues) issues.push_back(std::move(problem));
        for (issue& problem : read.too_large) too_large.push_back(std::move(problem));
        for (std::size_t slot = 0; slot < read.items.size(); ++slot) {
          media.push_back(event_item{i, field, slot, std::move(read.items[slot])});
          (*it)[slot] = nullptr;  // the session puts the item's placeholder here
        }
      }
    }
  }

  bool ok() const { return issues.empty() && too_large.empty(); }
};

// Every issue in one INVALID_FRAME (the size issues last), or media sizes alone as the SystemOne
// API answers them.
result<frame> invalid(checker& c) {
  if (c.issues.empty()) return make_error(413, codes::request_too_large, std::move(c.too_large));
  for (issue& i : c.too_large) c.issues.push_back(std::move(i));
  return make_error(422, codes::invalid_frame, std::move(c.issues));
}

result<frame> read_decide(json& f, const request_limits& limits) {
  checker c{f, {}, {}};
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
  json* history = f.contains("history") ? &f["history"] : nullptr;
  json* append = f.contains("append") ? &f["append"] : nullptr;
  if (history && append) {
    c.add(json::array({"append"}), "Give either history or append, not both", "value_error");
  } else if (!history && !append) {
    c.add(json::array({"history"}), "Field required (or append)", "missing");
  } else {
    d.append = append != nullptr;
    c.events(d.append ? "append" : "history", d.append ? *append : *history, limits, d.media);
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
  if (!c.ok()) return invalid(c);
  d.events = std::move(d.append ? *append : *history);
  if (const json* p = c.get("proposal")) d.proposal = *p;
  if (const json* q = c.get("questions")) d.questions = *q;
  return frame(std::move(d));
}

result<frame> read_tool_result(const json& f) {
  checker c{f, {}, {}};
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

// A frame that names a session and nothing else: resume, end.
template <class Frame>
result<frame> read_session_frame(const json& f) {
  checker c{f, {}, {}};
  c.only({"type", "id", "session"});
  Frame r;
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
  checker c{f, {}, {}};
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
  return make_error(422, codes::invalid_frame,
                    {issue{json::array({"turn"}), std::move(msg), "less_than_equal", json{{"le", max_turn}}}});
}

bool valid_session_id(std::string_view s) noexcept {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '.' || ch == ':' || ch == '@' || ch == '-';
  });
}

result<frame> parse_frame(std::string_view text, const request_limits& limits, json& id) {
  auto opened = open_frame(text, limits.max_json_depth, id);
  if (!opened) return opened.error();
  json& f = *opened;
  const auto type = f.find("type");
  if (type == f.end() || !type->is_string()) {
    return make_error(422, codes::unknown_type, "a frame needs a \"type\": decide, tool_result, resume, ack or end");
  }
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "decide") return read_decide(f, limits);
  if (t == "tool_result") return read_tool_result(f);
  if (t == "resume") return read_session_frame<resume_frame>(f);
  if (t == "ack") return read_ack(f);
  if (t == "end") return read_session_frame<end_frame>(f);
  return make_error(422, codes::unknown_type, "unknown frame type \"" + t + "\" (decide, tool_result, resume, ack or end)");
}

namespace {

// The client frames' common head: the type, then the id when there is one.
json client_frame(const char* type, const json& id) {
  json out = {{"type", type}};
  if (!id.is_null()) out["id"] = id;
  return out;
}

}  // namespace

std::string render(const decide_frame& f, const json& id) {
  json out = client_frame("decide", id);
  out["session"] = f.session;
  if (f.turn) out["turn"] = *f.turn;
  json& events = out[f.append ? "append" : "history"] = f.events;
  for (const event_item& m : f.media) events[m.event][std::string(m.field)][m.slot] = media_item_json(m.item);
  if (!f.proposal.is_null()) out["proposal"] = f.proposal;
  if (!f.questions.is_null()) out["questions"] = f.questions;
  return render_json(out, false);
}

std::string render(const tool_result_frame& f, const json& id) {
  json out = client_frame("tool_result", id);
  out["decision"] = f.decision;
  out["ok"] = f.ok;
  out["output"] = f.output;
  return render_json(out, false);
}

std::string render(const resume_frame& f, const json& id) {
  json out = client_frame("resume", id);
  out["session"] = f.session;
  return render_json(out, false);
}

std::string render(const end_frame& f, const json& id) {
  json out = client_frame("end", id);
  out["session"] = f.session;
  return render_json(out, false);
}

std::string render(const ack_frame& f, const json& id) {
  json out = client_frame("ack", id);
  out["resolution"] = f.resolution;
  return render_json(out, false);
}

namespace {

void put_ms(std::string& out, const char* key, double ms) {
  out += '"';
  out += key;
  out += "\":";
  render_rounded(ms, 3, out);
}

}  // namespace

// Written by hand, not through json: the numbers are Python's repr of the rounded values, and the
// answers render_answers' text.
std::string render(const decision_frame& f) {
  std::string out = "{\"type\":\"decision\",\"id\":";
  render_json(f.id, out, false);
  out += ",\"decision\":";
  render_string(f.decision, out);
  out += ",\"session\":";
  render_string(f.session, out);
  out += ",\"turn\":";
  out += std::to_string(f.turn);
  out += ",\"action\":";
  render_string(f.action, out);
  out += ",\"tool\":";
  if (f.tool.empty()) {
    out += "null";
  } else {
    render_string(f.tool, out);
  }
  out += ",\"arguments\":";
  render_json(f.arguments, out, false);
  out += ",\"lane\":";
  render_string(f.lane, out);
  out += ",\"confidence\":";
  render_rounded(f.confidence, 4, out);
  out += ",\"executor\":";
  if (f.executor) {
    render_string(*f.executor, out);
  } else {
    out += "null";
  }
  out += ",\"answers\":";
  if (f.answers) {
    render_answers(*f.answers, out, 4);
  } else {
    out += "null";
  }
  out += ",\"model\":";
  render_string(f.model, out);
  out += ",\"usage\":{\"input_tokens\":";
  out += std::to_string(f.usage.input_tokens);
  out += ",\"cached_tokens\":";
  out += std::to_string(f.usage.cached_tokens);
  out += ",\"state_truncated\":";
  out += f.usage.state_truncated ? "true" : "false";
  out += ",\"events_dropped\":";
  out += std::to_string(f.usage.events_dropped);
  out += ",\"media_dropped\":";
  out += std::to_string(f.usage.media_dropped);
  out += '}';
  if (!f.error_code.empty()) {
    out += ",\"error_code\":";
    render_string(f.error_code, out);
  }
  if (!f.fallback_of.empty()) {
    out += ",\"fallback_of\":";
    render_string(f.fallback_of, out);
  }
  if (f.escalation) {
    out += ",\"escalation\":";
    render_string(f.escalation->id, out);
    out += ",\"deadline_at\":";
    render_string(iso_utc(f.escalation->deadline_ms), out);
  }
  out += ",\"timings_ms\":{";
  put_ms(out, "queue", f.timings_ms.queue);
  out += ',';
  put_ms(out, "compile", f.timings_ms.compile);
  out += ',';
  put_ms(out, "engine", f.timings_ms.engine);
  out += ',';
  put_ms(out, "policy", f.timings_ms.policy);
  out += ',';
  put_ms(out, "log", f.timings_ms.log);
  out += ',';
  put_ms(out, "total", f.timings_ms.total);
  out += "}}";
  return out;
}

std::string render(const tool_outcome_frame& f) {
  const tool_outcome& o = f.outcome;
  json frame = {{"type", "tool_result"}, {"decision", f.decision}, {"tool", f.tool}, {"ok", o.ok}};
  if (!o.ok) {
    frame["error_code"] = o.error_code;
    frame["detail"] = o.detail;
  }
  frame["attempts"] = o.attempts;
  frame["output"] = o.output;
  if (f.event) frame["event"] = *f.event;
  return render_json(frame, false);
}

std::string render(const resumed_frame& f) {
  return render_json(json{{"type", "resumed"},
                          {"ref", f.ref},
                          {"session", f.session},
                          {"pending", f.pending},
                          {"resolutions", f.resolutions}},
                     false);
}

std::string render(const ended_frame& f) {
  return render_json(json{{"type", "ended"}, {"ref", f.ref}, {"session", f.session}}, false);
}

std::string render(const tool_result_ack_frame& f) {
  std::string out = "{\"type\":\"ack\",\"ref\":";
  render_json(f.ref, out, false);
  out += ",\"decision\":";
  render_string(f.decision, out);
  out += '}';
  return out;
}

std::string render(const resolution_frame& f) {
  return "{\"type\":\"resolution\",\"resolution\":" + render(f.resolution) + "}";
}

}  // namespace baton::protocol
