#include "support/protocol_readback.hpp"

#include "adapters/protocol/frame_opener.hpp"
#include "support/protocol_fields.hpp"

namespace baton::protocol {

namespace {

// A server's frame that is not JSON is the server's fault, as a client sees it.
result<json> server_json(std::string_view text, std::size_t max_json_depth) {
  auto read = read_json(text, "frame", max_json_depth);
  if (!read) return make_error(502, "BAD_UPSTREAM_RESPONSE", read.error().message);
  return read;
}

result<std::vector<escalation_object>> parse_escalations(fields& f, const char* key) {
  const json list = f.value(key);
  if (f.ok() && !list.is_array()) f.fail(ticked(key) + " is not a list");
  if (!f.ok()) return f.failure();
  std::vector<escalation_object> out;
  for (const json& item : list) {
    auto e = parse_escalation(item);
    if (!e) return e.error();
    out.push_back(std::move(*e));
  }
  return out;
}

}  // namespace

result<error_frame> parse_error_frame(const json& frame) {
  fields f(frame, "error frame");
  error_frame out;
  out.ref = f.value("ref");
  int status = 0;
  if (const json* retry = f.find("retry_after_ms")) {
    if (*retry == 1000) {
      status = 429;
    } else if (*retry == 100) {
      status = 503;
    } else {
      f.fail("`retry_after_ms` is neither 1000 (429) nor 100 (503)");
    }
  }
  if (!f.ok()) return f.failure();
  auto e = error_from_json(frame, status);
  if (!e) return e.error();
  out.error = std::move(*e);
  return out;
}

result<tool_run_object> parse_tool_run(const json& body) {
  fields f(body, "tool run");
  tool_run_object r;
  r.id = f.text("id");
  r.tool = f.text("tool");
  r.executor = f.text("executor");
  r.ok = f.boolean("ok");
  if (r.ok) {
    if (const json* code = f.find("error_code"); !code || !code->is_null()) f.fail("`error_code` is not null, but the run is ok");
  } else {
    r.error_code = f.text("error_code");
  }
  r.detail = f.text("detail");
  r.output = f.value("output");
  r.attempts = static_cast<int>(f.integer("attempts"));
  r.duration_ms = f.number("duration_ms");
  r.created_ms = f.time("created_ms", "created_at");
  if (!f.ok()) return f.failure();
  return r;
}

result<resolution_object> parse_resolution(const json& body) {
  fields f(body, "resolution");
  resolution_object r;
  r.id = f.text("id");
  r.escalation = f.text("escalation");
  r.decision = f.text("decision");
  r.session = f.text("session");
  r.turn = f.integer("turn");
  r.outcome = f.text("outcome");
  r.tool = f.text_or_null("tool");
  r.arguments = f.value("arguments");
  r.reason = f.text("reason");
  r.reviewer = f.text("reviewer");
  r.by = f.text("by");
  r.forced = f.boolean("forced");
  r.created_ms = f.time("created_ms", "created_at");
  r.executor = f.optional_text("executor");
  if (!f.ok()) return f.failure();
  return r;
}

result<escalation_object> parse_escalation(const json& body) {
  fields f(body, "escalation");
  escalation_object e;
  e.id = f.text("id");
  const std::string status = f.text("status");
  e.decision = f.text("decision");
  e.session = f.text("session");
  e.turn = f.integer("turn");
  e.created_ms = f.time("created_ms", "created_at");
  e.deadline_ms = f.time("deadline_ms", "deadline_at");
  e.on_deadline = f.text("on_deadline");
  e.reason = f.text("reason");
  e.question = f.text("question");
  e.tool = f.text_or_null("tool");
  e.arguments = f.value("arguments");
  e.confidence = f.number("confidence");
  e.candidates = f.value("candidates");
  e.state = f.value("state");
  e.evidence = f.value("evidence");
  e.registry_hash = f.text("registry_hash");
  e.policy_hash = f.text("policy_hash");
  const json resolution = f.value("resolution");
  if (!f.ok()) return f.failure();
  if (!resolution.is_null()) {
    auto r = parse_resolution(resolution);
    if (!r) return r.error();
    e.resolution = std::move(*r);
    if (const auto run = resolution.find("tool_run"); run != resolution.end() && !run->is_null()) {
      auto t = parse_tool_run(*run);
      if (!t) return t.error();
      e.tool_run = std::move(*t);
    }
  }
  if (status != (e.resolution ? "resolved" : "pending")) {
    f.fail("`status` is " + status + ", but the resolution is " + (e.resolution ? "there" : "null"));
    return f.failure();
  }
  return e;
}

result<escalation_list> parse_escalation_list(const json& body) {
  fields f(body, "escalation list");
  auto list = parse_escalations(f, "escalations");
  if (!list) return list.error();
  return escalation_list{std::move(*list)};
}

result<tools_list> parse_tools_list(const json& body) {
  fields f(body, "tools list");
  tools_list out;
  const json tools = f.value("tools");
  out.finish = f.optional_text("finish");
  out.registry_hash = f.text("registry_hash");
  if (f.ok() && !tools.is_array()) f.fail("`tools` is not a list");
  for (const json& t : f.ok() ? tools : json::array()) {
    fields tf(t, "tools list: tool");
    tool_entry entry;
    entry.id = tf.text("id");
    entry.description = tf.text("description");
    entry.risk = tf.text("risk");
    entry.executor = tf.text("executor");
    const json parameters = tf.value("parameters");
    if (tf.ok() && !parameters.is_array()) tf.fail("`parameters` is not a list");
    for (const json& p : tf.ok() ? parameters : json::array()) {
      fields pf(p, "tools list: parameter");
      tool_parameter param;
      param.name = pf.text("name");
      param.type = pf.text("type");
      param.instructions = pf.text("instructions");
      const json values = pf.value("values");
      param.fixed = pf.optional_text("fixed");
      if (pf.ok() && !values.is_array()) pf.fail("`values` is not a list");
      for (const json& v : pf.ok() ? values : json::array()) {
        fields vf(v, "tools list: value");
        tool_parameter_value value{vf.text("value"), vf.text("description")};
        if (!vf.ok()) return vf.failure();
        param.values.push_back(std::move(value));
      }
      if (!pf.ok()) return pf.failure();
      entry.parameters.push_back(std::move(param));
    }
    if (!tf.ok()) return tf.failure();
    out.tools.push_back(std::move(entry));
  }
  if (!f.ok()) return f.failure();
  return out;
}

result<review_server_frame> parse_review_server_frame(std::string_view text, std::size_t max_json_depth) {
  auto read = server_json(text, max_json_depth);
  if (!read) return read.error();
  const json& frame = *read;
  fields f(frame, "review frame");
  const std::string type = f.text("type");
  if (!f.ok()) return f.failure();
  if (type == "snapshot") {
    auto list = parse_escalations(f, "escalations");
    if (!list) return list.error();
    return review_server_frame(snapshot_frame{std::move(*list)});
  }
  if (type == "escalation" || type == "resolved") {
    auto e = parse_escalation(f.value("escalation"));
    if (!e) return e.error();
    if (type == "resolved") return review_server_frame(resolved_frame{std::move(*e)});
    return review_server_frame(escalation_frame{std::move(*e)});
  }
  if (type == "tool_run") {
    tool_run_frame out;
    out.escalation = f.text("escalation");
    const json run = f.value("tool_run");
    if (!f.ok()) return f.failure();
    auto r = parse_tool_run(run);
    if (!r) return r.error();
    out.tool_run = std::move(*r);
    return review_server_frame(std::move(out));
  }
  if (type == "resolve_result") {
    resolve_result_frame out;
    out.ref = f.value("ref");
    const json resolution = f.value("resolution");
    if (!f.ok()) return f.failure();
    auto r = parse_resolution(resolution);
    if (!r) return r.error();
    out.resolution = std::move(*r);
    return review_server_frame(std::move(out));
  }
  if (type == "error") {
    auto e = parse_error_frame(frame);
    if (!e) return e.error();
    return review_server_frame(std::move(*e));
  }
  f.fail("unknown type \"" + type + "\"");
  return f.failure();
}

namespace {

result<server_frame> read_decision(const json& frame) {
  fields f(frame, "decision frame");
  decision_frame d;
  d.id = f.value("id");
  d.decision = f.text("decision");
  d.session = f.text("session");
  d.turn = f.integer("turn");
  d.action = f.text("action");
  d.tool = f.text_or_null("tool");
  d.arguments = f.value("arguments");
  d.lane = f.text("lane");
  d.confidence = f.number("confidence");
  d.executor = f.optional_text("executor");
  const json answers = f.value("answers");
  d.model = f.text("model");
  const json usage = f.value("usage");
  if (f.find("error_code")) d.error_code = f.text("error_code");
  if (f.find("fallback_of")) d.fallback_of = f.text("fallback_of");
  if (f.find("escalation") || f.find("deadline_at")) {
    d.escalation.emplace();
    d.escalation->id = f.text("escalation");
    d.escalation->deadline_ms = f.iso_time("deadline_at");
  }
  const json timings = f.value("timings_ms");
  if (!f.ok()) return f.failure();
  fields t(timings, "decision frame: timings_ms");
  d.timings_ms.queue = t.number("queue");
  d.timings_ms.compile = t.number("compile");
  d.timings_ms.engine = t.number("engine");
  d.timings_ms.policy = t.number("policy");
  d.timings_ms.log = t.number("log");
  d.timings_ms.total = t.number("total");
  if (!t.ok()) return t.failure();
  fields u(usage, "decision frame: usage");
  d.usage.input_tokens = u.integer("input_tokens");
  d.usage.cached_tokens = u.integer("cached_tokens");
  d.usage.state_truncated = u.boolean("state_truncated");
  d.usage.events_dropped = u.integer("events_dropped");
  d.usage.media_dropped = u.integer("media_dropped");
  if (!u.ok()) return u.failure();
  if (!answers.is_null()) {
    // The wire has the answers alone: the response around them is the frame's model and no usage.
    auto r = response_from_json(
        json{{"model", d.model}, {"answers", answers}, {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}});
    if (!r) return r.error();
    d.answers = std::move(*r);
  }
  return server_frame(std::move(d));
}

result<server_frame> read_tool_outcome(const json& frame) {
  fields f(frame, "tool_result frame");
  tool_outcome_frame r;
  r.decision = f.text("decision");
  r.tool = f.text("tool");
  r.outcome.ok = f.boolean("ok");
  if (!r.outcome.ok) {
    r.outcome.error_code = f.text("error_code");
    r.outcome.detail = f.text("detail");
  }
  r.outcome.attempts = static_cast<int>(f.integer("attempts"));
  r.outcome.output = f.value("output");
  if (f.find("event")) r.event = f.value("event");
  if (!f.ok()) return f.failure();
  return server_frame(std::move(r));
}

result<server_frame> read_resumed(const json& frame) {
  fields f(frame, "resumed frame");
  resumed_frame r;
  r.ref = f.value("ref");
  r.session = f.text("session");
  const json pending = f.value("pending");
  const std::int64_t resolutions = f.integer("resolutions");
  if (f.ok() && resolutions < 0) f.fail("`resolutions` is negative");
  if (f.ok() && !pending.is_array()) f.fail("`pending` is not a list");
  for (const json& e : f.ok() ? pending : json::array()) {
    if (!e.is_string()) {
      f.fail("`pending` holds something other than escalation ids");
      break;
    }
    r.pending.push_back(e.get<std::string>());
  }
  if (!f.ok()) return f.failure();
  r.resolutions = static_cast<std::size_t>(resolutions);
  return server_frame(std::move(r));
}

result<server_frame> read_tool_result_ack(const json& frame) {
  fields f(frame, "ack frame");
  tool_result_ack_frame a;
  a.ref = f.value("ref");
  a.decision = f.text("decision");
  if (!f.ok()) return f.failure();
  return server_frame(std::move(a));
}

result<server_frame> read_resolution(const json& frame) {
  fields f(frame, "resolution frame");
  const json resolution = f.value("resolution");
  if (!f.ok()) return f.failure();
  auto r = parse_resolution(resolution);
  if (!r) return r.error();
  return server_frame(resolution_frame{std::move(*r)});
}

}  // namespace

result<server_frame> parse_server_frame(std::string_view text, std::size_t max_json_depth) {
  auto read = server_json(text, max_json_depth);
  if (!read) return read.error();
  const json& frame = *read;
  fields f(frame, "agent frame");
  const std::string type = f.text("type");
  if (!f.ok()) return f.failure();
  if (type == "decision") return read_decision(frame);
  if (type == "tool_result") return read_tool_outcome(frame);
  if (type == "resumed") return read_resumed(frame);
  if (type == "ack") return read_tool_result_ack(frame);
  if (type == "resolution") return read_resolution(frame);
  if (type == "error") {
    auto e = parse_error_frame(frame);
    if (!e) return e.error();
    return server_frame(std::move(*e));
  }
  f.fail("unknown type \"" + type + "\"");
  return f.failure();
}

}  // namespace baton::protocol
