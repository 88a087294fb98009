#include "adapters/runtime/mcp_gateway.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "adapters/runtime/handler_guard.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"
#include "core/sha256.hpp"
#include "tools/arguments.hpp"
#include "tools/mcp_client.hpp"

#ifndef BATON_VERSION
#define BATON_VERSION "0"
#endif

namespace baton {

namespace {

namespace net = boost::asio;


std::string text_of(const json& frame, const char* key) {
  const auto v = frame.find(key);
  return v != frame.end() && v->is_string() ? v->get<std::string>() : std::string();
}

// JSON-RPC's own codes, and the one baton answers its own refusals with (the error body in `data`).
constexpr int parse_error = -32700, invalid_request = -32600, method_not_found = -32601, invalid_params = -32602,
              server_error = -32000;

std::string rpc_result(const json& id, json result) {
  return render_json(json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}, false);
}

std::string rpc_error(const json& id, int code, const std::string& message, json data = nullptr) {
  json e = {{"code", code}, {"message", message}};
  if (!data.is_null()) e["data"] = std::move(data);
  return render_json(json{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(e)}}, false);
}

// baton's error body ({"error","code","detail"}) as a JSON-RPC error: its sentence the message.
std::string rpc_error(const json& id, json body) {
  const std::string message = text_of(body, "error");
  return rpc_error(id, server_error, message.empty() ? "error" : message, std::move(body));
}

std::string rpc_error(const json& id, const error& e) { return rpc_error(id, parse_json_or_null(render_error(e))); }

// A tool's result the client reads as failed: its text, and what baton decided in _meta.
json failed_result(const std::string& text, json meta) {
  return {{"content", json::array({json{{"type", "text"}, {"text", text}}})}, {"isError", true}, {"_meta", std::move(meta)}};
}

// The inputSchema an MCP client sees: an MCP tool's own, else one made of the registry parameters
// (choices as enums, booleans, the rest strings; fixed ones left out, baton sets them).
json input_schema_of(const tools::tool& t) {
  if (t.executor.value("type", "") == "mcp") {
    const auto s = t.executor.find("input_schema");
    if (s != t.executor.end() && s->is_object()) return *s;
  }
  json props = json::object();
  for (const tools::parameter& p : t.parameters) {
    json s = json::object();
    if (p.type == tools::parameter_type::choice) {
      s["type"] = "string";
      json values = json::array();
      for (const auto& [label, description] : p.values.items()) values.push_back(label);
      s["enum"] = std::move(values);
    } else if (p.type == tools::parameter_type::boolean) {
      s["type"] = "boolean";
    } else {
      if (p.value) continue;
      s["type"] = "string";
    }
    if (!p.instructions.empty()) s["description"] = p.instructions;
    props[p.name] = std::move(s);
  }
  return {{"type", "object"}, {"properties", std::move(props)}};
}

// A session id nobody can guess from the others (MCP asks for a secure one): 128 bits of the
// system's random source.
std::string random_session_id() {
  std::random_device random;
  std::string id;
  for (std::size_t i = 0; i < mcp_gateway_session_digits / 8; ++i) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(random()));
    id += part;
  }
  return id;
}

// An event's id in its session: its stream's number, then its own ("3-0" primes stream 3).
std::string event_id(std::uint64_t stream, std::uint64_t n) { return std::to_string(stream) + "-" + std::to_string(n); }

// Reads an event_id; nullopt for anything else.
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_event_id(std::string_view id) {
  const auto dash = id.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::uint64_t stream = 0, n = 0;
  const auto whole = [](std::string_view part, std::uint64_t& v) {
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    return !part.empty() && ec == std::errc() && end == part.data() + part.size();
  };
  if (!whole(id.substr(0, dash), stream) || !whole(id.substr(dash + 1), n) || stream == 0) return std::nullopt;
  return std::pair{stream, n};
}

// The tool `name` when baton runs it (an MCP client cannot run an agent's own tool): null otherwise.
const tools::tool* offered(const routing_snapshot& routing, std::string_view name) {
  const auto ex = routing.executors.find(std::string(name));
  if (ex == routing.executors.end() || ex->second->agent_runs()) return nullptr;
  return tools::find_tool(routing.registry, name);
}

}  // namespace

// One MCP session: an agent connection whose frames become the answers to its calls. Its calls
// are decided one at a time, in the order they came (one turn of the agent session at a time);
// a call that waits for a person no longer holds the session.
class mcp_gateway::session final : public agent_connection, public guard_target, public std::enable_shared_from_this<session> {
 public:
  // One tools/call, from its request to its answer.
  struct call {
    json rpc_id;
    std::shared_ptr<mcp_reply> reply;
    bool streams = true;
    std::string tool;
    json arguments;
    json events;                   // what the call adds to the session's history
    json progress_token;           // null: the client asked for no progress
    std::string key;               // the decide frame's id
    std::string decision, escalation, resolution;
    std::string ran;               // the tool a person chose instead, when another
    std::string waiting;           // what a progress notification says
    bool escalated = false;        // its turn ended with the escalation
    bool retried = false;          // its agent session begun again once (ended, evicted or full)
    bool cancelled = false;
    bool answered = false;         // its reply got its answer (or its end)
    // The last progress value the client heard, and what the tool's own values are put after
    // (baton's while a person decided came first: the values keep rising, as MCP asks).
    std::optional<double> last_progress, progress_base;
    std::unique_ptr<net::steady_timer> timer;
    // Its event stream's number in the session (0: answered in one body), and its latest events
    // (each with its number in the stream), for a client that lost the stream (resume).
    std::uint64_t stream = 0;
    std::deque<std::pair<std::uint64_t, std::string>> sent;
  };

  // `version`: the protocol version initialize agreed on; `kept`: the bytes of answered streams
  // every session keeps (the gateway's, shared: a session may outlive it).
  session(agent_service& agents, net::any_io_executor io, std::string id, std::string owner, std::string caller,
          std::string version, std::shared_ptr<std::atomic<std::size_t>> kept)
      : agents_(agents), strand_(net::make_strand(io)), id_(std::move(id)),
        name_(std::string(mcp_gateway_session_prefix) + id_), version_(std::move(version)), kept_(std::move(kept)) {
    owner_ = std::move(owner);
    caller_ = std::move(caller);
    touch();
  }

  // Its handlers, and agent_service's for its calls, run guarded: one that throws fails this
  // session (handler_failed), not the others, and leaves no call unanswered.
  net::any_io_executor strand() override { return guarded_executor(strand_, weak_from_this()); }

  // A handler of this session threw (logged, on the strand): whatever state it left is not to be
  // trusted, so every call is answered INTERNAL now and the session ends (its next request 404:
  // the client initializes again). A call under way is then as one its client cancelled: what
  // comes of it is still logged, an escalation withdrawn (now, or when its decision comes), a
  // resolution acknowledged when it comes.
  void handler_failed() noexcept override {
    try {
      failed_ = true;
      ended_ = true;
      clear_finished();
      const error internal = make_error(500, codes::internal, "baton failed on this MCP session (its log says why); initialize again");
      auto queued = std::move(queue_);
      queue_.clear();
      for (const auto& c : queued) {
        answer(*c, rpc_error(c->rpc_id, internal));
        forget(*c);
      }
      for (const auto* under_way : {&by_key_, &by_decision_}) {
        for (const auto& [key, c] : *under_way) {
          answer(*c, rpc_error(c->rpc_id, internal));
          if (c->cancelled) continue;
          c->cancelled = true;
          if (c->escalated && c->resolution.empty()) withdraw(*c, "baton failed on the MCP session");
        }
      }
      agents_.on_call_end(shared_from_this(), name_);
    } catch (const std::exception& e) {
      spdlog::error("MCP session {}: failing its calls threw too: {}", id_, e.what());
    } catch (...) {
      spdlog::error("MCP session {}: failing its calls threw too", id_);
    }
  }
  bool failed() const noexcept { return failed_.load(); }

  const std::string& id() const noexcept { return id_; }
  const std::string& owner() const noexcept { return owner_; }
  bool busy() const noexcept { return calls_.load() > 0; }
  std::int64_t used_ms() const noexcept { return used_ms_.load(); }
  void touch() noexcept { used_ms_ = unix_ms(); }

  // A tools/call: decided after those before it. The session holds itself while it has calls, so
  // that a call waiting for a person gets its answer (and its resolution its acknowledgement) after
  // the gateway has let the session go.
  void add(std::shared_ptr<call> c) {
    ++calls_;
    net::post(strand(), [self = shared_from_this(), c = std::move(c)]() mutable {
      self->keep_ = self;
      if (c->streams) c->stream = ++self->streams_;
      if (self->ended_) {
        self->answer(*c, rpc_error(c->rpc_id, server_error, "the MCP session has ended"));
        return self->forget(*c);
      }
      // Its stream can be resumed from the start: 2025-11-25 clients are told where (a priming
      // event); the others resume from the first message's id.
      if (c->streams && self->version_ >= "2025-11-25") c->reply->event({event_id(c->stream, 0), {}, resume_after});
      self->queue_.push_back(std::move(c));
      if (!self->turn_out_) self->start_next();
    });
  }

  // notifications/cancelled: the call gets no answer. A decision under way still goes to the log;
  // an escalation is withdrawn (denied, by the client's key), so that an approval cannot run a
  // call nobody waits for.
  void cancel(json request_id) {
    net::post(strand(), [self = shared_from_this(), request_id = std::move(request_id)] {
      for (auto it = self->queue_.begin(); it != self->queue_.end(); ++it) {
        if ((*it)->rpc_id == request_id) {
          std::shared_ptr<call> c = *it;
          self->queue_.erase(it);
          c->cancelled = true;
          self->close(*c);
          return self->forget(*c);
        }
      }
      for (auto* calls : {&self->by_key_, &self->by_decision_}) {
        for (auto& [key, c] : *calls) {
          if (c->rpc_id != request_id || c->cancelled) continue;
          c->cancelled = true;
          self->close(*c);
          if (c->escalated && c->resolution.empty()) self->withdraw(*c, "the MCP client cancelled the call");
          return;
        }
      }
    });
  }

  // DELETE: the agent session ends with it, and what waits is answered now: a queued call, and a
  // call waiting for a person (its escalation withdrawn).
  void end() {
    net::post(strand(), [self = shared_from_this()] {
      self->ended_ = true;
      self->clear_finished();
      auto queued = std::move(self->queue_);
      self->queue_.clear();
      for (const auto& c : queued) {
        self->answer(*c, rpc_error(c->rpc_id, server_error, "the MCP session has ended"));
        self->forget(*c);
      }
      for (auto& [decision, c] : self->by_decision_) {
        if (!c->escalated || c->answered) continue;
        self->answer(*c, rpc_error(c->rpc_id, server_error, "the MCP session has ended"));
        if (c->resolution.empty()) self->withdraw(*c, "the MCP session ended");
      }
      self->agents_.on_call_end(self, self->name_);
    });
  }

  // The server stops: what waits for a person is answered now, and its escalation withdrawn
  // (nobody will wait for it; what the stop leaves pending, the restart denies).
  void drain() {
    net::post(strand(), [self = shared_from_this()] {
      self->draining_ = true;
      for (auto& [decision, c] : self->by_decision_) {
        if (!c->escalated || c->answered) continue;
        self->answer(*c, rpc_error(c->rpc_id, self->shutting_down(*c)));
        if (c->resolution.empty()) self->withdraw(*c, "baton stopped while the MCP call waited");
      }
    });
  }

  // GET with Last-Event-ID: the stream `stream` goes on on `reply`, from after event `after`.
  void resume(std::uint64_t stream, std::uint64_t after, std::shared_ptr<mcp_reply> reply) {
    net::post(strand(), [self = shared_from_this(), stream, after, reply = std::move(reply)]() mutable {
      if (std::shared_ptr<call> c = self->live(stream)) {
        // A client reconnects when it lost the stream: the old response ends, the new one goes on.
        std::swap(c->reply, reply);
        reply->open();  // a POST whose stream had not begun still answers as a stream, never 202
        reply->end();
        return replay(*c->reply, stream, c->sent, after);
      }
      self->expire_finished();
      for (const finished& f : self->finished_) {
        if (f.stream != stream) continue;
        replay(*reply, stream, f.sent, after);
        return reply->end();
      }
      reply->answer(400, rpc_error(nullptr, invalid_request, "Bad Request: no stream of this session to resume at Last-Event-ID " +
                                                                 event_id(stream, after) + " (its answer is no longer kept)"), {});
    });
  }

  // The tool baton runs for a call said how far it is: the client hears it, when it asked for
  // progress, as the call's own.
  void tool_progress(const std::string& decision, json params) override {
    net::post(strand(), [self = shared_from_this(), decision, params = std::move(params)] {
      std::shared_ptr<call> c = self->by_decision(decision);
      if (!c || c->cancelled || c->answered || c->progress_token.is_null() || !c->streams) return;
      if (!params.is_object() || !params.contains("progress") || !params["progress"].is_number()) return;
      if (!c->progress_base) c->progress_base = c->last_progress ? *c->last_progress + 1 : 0;
      const double value = *c->progress_base + params["progress"].get<double>();
      if (c->last_progress && value <= *c->last_progress) return;
      json out = json::object();
      if (const auto total = params.find("total"); total != params.end() && total->is_number()) {
        out["total"] = *c->progress_base + total->get<double>();
      }
      if (const auto message = params.find("message"); message != params.end() && message->is_string()) out["message"] = *message;
      self->notify_progress(*c, value, std::move(out));
    });
  }

  // The frames agent_service sends for this session's calls, on the strand.
  void send(std::string frame) override {
    const json f = parse_json_or_null(frame);
    if (!f.is_object()) return;
    const std::string type = text_of(f, "type");
    if (type == "decision") return on_decision(f);
    if (type == "tool_result") return on_tool_result(f);
    if (type == "resolution") return on_resolution(f.value("resolution", json::object()));
    if (type == "error") return on_error(f);
    // ended, resumed, ack: nothing waits for them.
  }

 private:
  void start_next() {
    if (queue_.empty() || ended_) return;
    std::shared_ptr<call> c = queue_.front();
    queue_.pop_front();
    turn_out_ = true;
    c->key = new_id('m');
    by_key_[c->key] = c;
    protocol::decide_frame f;
    f.session = name_;
    f.append = started_;
    f.events = c->events;
    f.proposal = {{"tool", c->tool}, {"arguments", c->arguments}};
    agents_.on_call(shared_from_this(), c->key, std::move(f));
  }

  // The turn of `c` is over: the next call may go.
  void turn_over() {
    turn_out_ = false;
    net::post(strand(), [self = shared_from_this()] {
      if (!self->turn_out_) self->start_next();
    });
  }

  std::shared_ptr<call> by_key(const json& id) {
    if (!id.is_string()) return nullptr;
    const auto it = by_key_.find(id.get<std::string>());
    return it == by_key_.end() ? nullptr : it->second;
  }
  std::shared_ptr<call> by_decision(const std::string& decision) {
    const auto it = by_decision_.find(decision);
    return it == by_decision_.end() ? nullptr : it->second;
  }

  json meta(const call& c) const {
    json m = {{"baton/decision", c.decision},
              {"baton/arguments_hash", sha256_hex(render_json(c.arguments, true))}};
    if (!c.escalation.empty()) m["baton/escalation"] = c.escalation;
    if (!c.ran.empty()) m["baton/tool"] = c.ran;
    return m;
  }

  void on_decision(const json& f) {
    std::shared_ptr<call> c = by_key(f.value("id", json()));
    if (!c) return;
    c->decision = text_of(f, "decision");
    by_decision_[c->decision] = c;
    started_ = true;
    const std::string action = text_of(f, "action"), lane = text_of(f, "lane");
    const double confidence = f.value("confidence", 0.0);
    const std::string why = "lane " + lane + ", confidence " + render_json(json(confidence), false);
    if (action == "execute") {
      const auto ex = f.find("executor");
      if (ex != f.end() && ex->is_string() && *ex != "agent") return;  // its tool_result answers
      return finish(*c, failed_result("baton decided to run `" + c->tool + "`, which its agent runs: not an MCP tool", meta(*c)), true);
    }
    if (action == "escalate") {
      c->escalated = true;
      c->escalation = text_of(f, "escalation");
      c->waiting = "waiting for a person to decide (escalation " + c->escalation + ", deadline " +
                   text_of(f, "deadline_at") + ", " + why + ")";
      turn_over();
      if (draining_) {
        // Decided while baton stops: answered as drain() answers the others, and withdrawn.
        answer(*c, rpc_error(c->rpc_id, shutting_down(*c)));
        return withdraw(*c, "baton stopped while the MCP call waited");
      }
      if (c->cancelled || ended_) {
        // Nobody waits for it: withdrawn, its resolution acknowledged when it comes.
        answer(*c, rpc_error(c->rpc_id, server_error, "the MCP session has ended"));
        return withdraw(*c, c->cancelled ? "the MCP client cancelled the call" : "the MCP session ended");
      }
      progress(c);
      return;
    }
    if (action == "deny") return finish(*c, failed_result("baton's policy denied the call (" + why + ")", meta(*c)), true);
    if (action == "fallback") {
      return finish(*c, failed_result("baton's policy asks a larger model to decide this call (" + why +
                                          "), and this server has none (engine fallback)", meta(*c)), true);
    }
    finish(*c, failed_result("baton decided `" + action + "` (" + why + ")", meta(*c)), true);
  }

  void on_tool_result(const json& f) {
    std::shared_ptr<call> c = by_decision(text_of(f, "decision"));
    if (!c) return;
    const json output = f.value("output", json());
    json result;
    const bool mcp_shaped = output.is_object() && output.contains("content") && output["content"].is_array();
    if (f.value("ok", false)) {
      result = mcp_shaped ? output : json{{"content", json::array({json{{"type", "text"}, {"text", render_json(output, false)}}})}};
      result["_meta"] = meta(*c);
    } else {
      result = failed_result(text_of(f, "error_code") + ": " + text_of(f, "detail"), meta(*c));
      if (mcp_shaped && !output["content"].empty()) result["content"] = output["content"];
      if (mcp_shaped && output.contains("structuredContent")) result["structuredContent"] = output["structuredContent"];
    }
    finish(*c, std::move(result), !c->escalated);
  }

  void on_resolution(const json& r) {
    std::shared_ptr<call> c = by_decision(text_of(r, "decision"));
    if (!c) {
      // This session's, from before its call was forgotten: nobody else will take it.
      if (const std::string id = text_of(r, "id"); !id.empty()) (void)agents_.desk().delivery().acknowledge(id, owner_);
      return;
    }
    c->resolution = text_of(r, "id");
    if (text_of(r, "outcome") == "execute") {
      // What runs is what the person approved: the hash in the answer is of these.
      if (const auto a = r.find("arguments"); a != r.end() && a->is_object()) c->arguments = *a;
      if (const std::string tool = text_of(r, "tool"); tool != c->tool) c->ran = tool;
      const auto ex = r.find("executor");
      if (ex != r.end() && ex->is_string() && *ex != "agent") {
        c->waiting = "approved; the tool runs";
        return;  // the tool baton runs for it answers
      }
      return finish(*c, failed_result("a person chose `" + c->ran + "` instead, which its agent runs, not baton", meta(*c)), false);
    }
    const std::string by = text_of(r, "by") == "deadline" ? "nobody decided by the deadline" : "a person denied the call";
    const std::string reason = text_of(r, "reason");
    finish(*c, failed_result(by + (reason.empty() ? std::string() : ": " + reason), meta(*c)), false);
  }

  // Denies `c`'s pending escalation in the client's name: nobody waits for it any more.
  void withdraw(const call& c, const std::string& why) {
    protocol::resolve_input deny;
    deny.reason = why;
    agents_.desk().resolve(c.escalation, std::move(deny), caller_, [](result<protocol::resolution_object>) {});
  }

  void on_error(const json& f) {
    std::shared_ptr<call> c = by_key(f.value("ref", json()));
    if (!c || !c->decision.empty()) return;  // after its decision: its tool_result follows
    const std::string code = text_of(f, "code");
    by_key_.erase(c->key);
    if (c->cancelled) {
      forget(*c);
      return turn_over();
    }
    if ((code == codes::unknown_session || code == codes::history_too_large) && started_ && !c->retried) {
      // The agent session ended, was evicted or is full: the call begins it again, from itself.
      c->retried = true;
      started_ = false;
      queue_.push_front(c);
      turn_out_ = false;
      return start_next();
    }
    if (code == codes::session_busy) {
      // A decision past its engine timeout holds the agent session until the engine answers.
      queue_.push_front(c);
      auto timer = std::make_shared<net::steady_timer>(strand(), std::chrono::milliseconds(100));
      timer->async_wait([self = shared_from_this(), timer](boost::system::error_code) {
        self->turn_out_ = false;
        self->start_next();
      });
      return;
    }
    json body = f;
    body.erase("type");
    body.erase("ref");
    answer(*c, rpc_error(c->rpc_id, std::move(body)));
    forget(*c);
    turn_over();
  }

  // Tells the client that `c` still waits, now and each progress_every, when it asked for progress.
  void progress(const std::shared_ptr<call>& c) {
    if (c->cancelled || c->progress_token.is_null() || !c->streams) return;
    notify_progress(*c, c->last_progress ? std::floor(*c->last_progress) + 1 : 1, {{"message", c->waiting}});
    if (!c->timer) c->timer = std::make_unique<net::steady_timer>(strand());
    c->timer->expires_after(progress_every);
    c->timer->async_wait([self = shared_from_this(), weak = std::weak_ptr<call>(c)](boost::system::error_code ec) {
      if (ec) return;
      if (auto c = weak.lock(); c && self->by_decision_.contains(c->decision)) self->progress(c);
    });
  }

  void finish(call& c, json result, bool ends_turn) {
    answer(c, rpc_result(c.rpc_id, std::move(result)));
    if (!c.resolution.empty()) (void)agents_.desk().delivery().acknowledge(c.resolution, owner_);
    forget(c);
    if (ends_turn) turn_over();
  }

  void answer(call& c, std::string message) {
    if (c.timer) c.timer->cancel();
    if (c.cancelled || c.answered) return;
    c.answered = true;
    if (c.streams) {
      emit(c, std::move(message));
      c.reply->end();
      keep_finished(c);
    } else {
      c.reply->answer(200, std::move(message), {});
    }
  }

  // What a call waiting for a person hears when baton stops.
  static error shutting_down(const call& c) {
    const std::string what = c.resolution.empty()
                                 ? " is withdrawn (unless a person decided it first: its resolution says)"
                                 : " was approved and its tool runs (its run is in the log under decision " + c.decision + ")";
    return make_error(503, codes::shutting_down,
                      "baton is shutting down; escalation " + c.escalation + what + ", and a call after the restart is a new decision");
  }

  // One message of `c`'s stream, kept for a client that resumes it: the last 8 (the progress
  // notifications before them say nothing the later ones do not).
  void emit(call& c, std::string message) {
    const std::uint64_t n = c.sent.empty() ? 1 : c.sent.back().first + 1;
    c.sent.emplace_back(n, message);
    if (c.sent.size() > 8) c.sent.pop_front();
    c.reply->event({event_id(c.stream, n), std::move(message), {}});
  }

  // A resumed stream: it opens on `to` with the events of `sent` after `after`.
  static void replay(mcp_reply& to, std::uint64_t stream, const std::deque<std::pair<std::uint64_t, std::string>>& sent,
                     std::uint64_t after) {
    to.open();
    for (const auto& [n, message] : sent) {
      if (n > after) to.event({event_id(stream, n), message, {}});
    }
  }

  // A notifications/progress of `c` with `params` (its progressToken added), the value the last.
  void notify_progress(call& c, double value, json params) {
    c.last_progress = value;
    params["progressToken"] = c.progress_token;
    params["progress"] = value;
    emit(c, render_json(json{{"jsonrpc", "2.0"}, {"method", "notifications/progress"}, {"params", std::move(params)}}, false));
  }

  // An answered stream stays resumable for a while (finished_for): the session's last 8, up to
  // 1 MiB, within the gateway's kept_total; not once the session has ended.
  void keep_finished(call& c) {
    expire_finished();
    if (ended_) return;
    finished f{c.stream, std::move(c.sent), 0, std::chrono::steady_clock::now()};
    for (const auto& [n, message] : f.sent) f.bytes += message.size();
    if (f.bytes > max_finished_bytes) return;
    if (kept_->fetch_add(f.bytes) + f.bytes > max_kept_total) {
      *kept_ -= f.bytes;
      return;
    }
    finished_bytes_ += f.bytes;
    finished_.push_back(std::move(f));
    while (finished_.size() > 8 || finished_bytes_ > max_finished_bytes) drop_finished();
  }
  void expire_finished() {
    const auto now = std::chrono::steady_clock::now();
    while (!finished_.empty() && now - finished_.front().at > finished_for) drop_finished();
  }
  void drop_finished() {
    finished_bytes_ -= finished_.front().bytes;
    *kept_ -= finished_.front().bytes;
    finished_.pop_front();
  }
  void clear_finished() {
    while (!finished_.empty()) drop_finished();
  }

  // The call under way whose stream is `stream`.
  std::shared_ptr<call> live(std::uint64_t stream) const {
    if (stream == 0) return nullptr;
    for (const auto* calls : {&by_key_, &by_decision_}) {
      for (const auto& [key, c] : *calls) {
        if (c->stream == stream && !c->answered) return c;
      }
    }
    for (const auto& c : queue_) {
      if (c->stream == stream) return c;
    }
    return nullptr;
  }

  // A call that gets no answer (cancelled): its response ends, once.
  void close(call& c) {
    if (c.timer) c.timer->cancel();
    if (c.answered) return;
    c.answered = true;
    c.reply->end();
  }

  // Done with `c`; with the last call the session no longer holds itself (later, on the strand:
  // the caller may still be in one of its members).
  void forget(call& c) {
    by_key_.erase(c.key);
    if (!c.decision.empty()) by_decision_.erase(c.decision);
    touch();
    if (--calls_ == 0 && keep_) net::post(strand(), [hold = std::move(keep_)] {});
  }

  static constexpr std::size_t max_finished_bytes = 1 << 20;
  static constexpr std::chrono::minutes finished_for{5};
  struct finished {
    std::uint64_t stream;
    std::deque<std::pair<std::uint64_t, std::string>> sent;
    std::size_t bytes;
    std::chrono::steady_clock::time_point at;
  };

  agent_service& agents_;
  net::strand<net::any_io_executor> strand_;
  const std::string id_;
  const std::string name_;  // the agent session's
  const std::string version_;
  const std::shared_ptr<std::atomic<std::size_t>> kept_;
  std::atomic<std::size_t> calls_{0};  // queued or under way
  std::atomic<std::int64_t> used_ms_{0};
  std::atomic<bool> failed_{false};  // a handler threw: the gateway forgets it
  // On the strand:
  std::deque<std::shared_ptr<call>> queue_;
  bool turn_out_ = false;   // a call's turn is with agent_service
  bool started_ = false;    // the agent session has a history
  std::map<std::string, std::shared_ptr<call>> by_key_;       // under way, by the decide frame's id
  std::map<std::string, std::shared_ptr<call>> by_decision_;  // decided, waiting for a result or a person
  bool ended_ = false;              // DELETE (or eviction): no call starts any more
  bool draining_ = false;           // baton stops: a call that escalates now is answered at once
  std::shared_ptr<session> keep_;   // itself, while it has calls
  std::uint64_t streams_ = 0;       // the calls' event streams so far
  std::deque<finished> finished_;   // answered streams a client may still resume
  std::size_t finished_bytes_ = 0;

 public:
  ~session() { *kept_ -= finished_bytes_; }
};

mcp_gateway::mcp_gateway(const server_config& config, agent_service& agents, net::any_io_executor io)
    : config_(config), agents_(agents), io_(std::move(io)) {}

mcp_gateway::~mcp_gateway() = default;

void mcp_gateway::drain() {
  std::lock_guard lock(mutex_);
  for (const auto& [id, s] : sessions_) s->drain();
}

std::size_t mcp_gateway::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

std::shared_ptr<mcp_gateway::session> mcp_gateway::find(const std::string& id, const std::string& owner) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->owner() != owner) return nullptr;
  if (it->second->failed()) {
    sessions_.erase(it);
    return nullptr;
  }
  it->second->touch();
  return it->second;
}

bool mcp_gateway::make_room() {
  const std::int64_t now = unix_ms();
  const std::int64_t idle_ms = std::chrono::duration_cast<std::chrono::milliseconds>(config_.server.session_idle).count();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second->failed()) {
      it = sessions_.erase(it);
    } else if (!it->second->busy() && now - it->second->used_ms() > idle_ms) {
      it->second->end();
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  if (sessions_.size() < config_.server.max_sessions) return true;
  auto oldest = sessions_.end();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (!it->second->busy() && (oldest == sessions_.end() || it->second->used_ms() < oldest->second->used_ms())) oldest = it;
  }
  if (oldest == sessions_.end()) return false;
  oldest->second->end();
  sessions_.erase(oldest);
  return true;
}

void mcp_gateway::post(mcp_post p, std::shared_ptr<mcp_reply> reply) {
  json msg;
  json_parse_error perr;
  if (!parse_json(p.body, msg, perr)) {
    return reply->answer(400, rpc_error(nullptr, parse_error, "Parse error: " + perr.message), {});
  }
  if (msg.is_array()) {
    return reply->answer(400, rpc_error(nullptr, invalid_request, "Invalid Request: baton takes one message per POST, not a batch"), {});
  }
  const json id = msg.is_object() && msg.contains("id") ? msg["id"] : json();
  const bool has_id = msg.is_object() && msg.contains("id");
  if (!msg.is_object() || msg.value("jsonrpc", json()) != "2.0" || (has_id && !id.is_string() && !id.is_number_integer())) {
    return reply->answer(400, rpc_error(nullptr, invalid_request, "Invalid Request: not a JSON-RPC 2.0 message"), {});
  }
  const auto method_it = msg.find("method");
  if (method_it == msg.end()) {
    // A response to a request of ours: baton sends none, so there is nothing to match it with.
    if (has_id && (msg.contains("result") || msg.contains("error"))) return reply->answer(202, {}, {});
    return reply->answer(400, rpc_error(id, invalid_request, "Invalid Request: no method"), {});
  }
  if (!method_it->is_string()) return reply->answer(400, rpc_error(id, invalid_request, "Invalid Request: the method is not a string"), {});
  const std::string method = method_it->get<std::string>();
  const json params = msg.value("params", json::object());
  if (!params.is_object()) {
    if (!has_id) return reply->answer(202, {}, {});  // a notification is not answered, even a wrong one
    return reply->answer(200, rpc_error(id, invalid_params, "Invalid params: params must be an object"), {});
  }

  if (method == "initialize") {
    if (!has_id) return reply->answer(400, rpc_error(nullptr, invalid_request, "Invalid Request: initialize is a request"), {});
    const std::string asked = text_of(params, "protocolVersion");
    const auto& versions = tools::mcp_protocol_versions();
    const std::string version = std::find(versions.begin(), versions.end(), asked) != versions.end() ? asked : versions.front();
    auto s = std::make_shared<session>(agents_, io_, random_session_id(), p.owner, p.caller, version, kept_);
    {
      std::lock_guard lock(mutex_);
      if (!make_room()) {
        return reply->answer(200, rpc_error(id, make_error(503, codes::too_many_sessions,
                                                           "every MCP session has a call under way (server.max_sessions)")), {});
      }
      sessions_[s->id()] = s;
    }
    json result = {{"protocolVersion", version},
                   {"capabilities", {{"tools", {{"listChanged", false}}}}},
                   {"serverInfo", {{"name", "baton"}, {"version", BATON_VERSION}}},
                   {"instructions", "Every tool call is decided by baton's policy first: it runs, is denied, or waits "
                                    "for a person to approve it."}};
    return reply->answer(200, rpc_result(id, std::move(result)), s->id());
  }

  if (p.session.empty()) {
    return reply->answer(400, rpc_error(id, invalid_request, "Bad Request: no Mcp-Session-Id header (initialize first)"), {});
  }
  std::shared_ptr<session> s = find(p.session, p.owner);
  if (!s) return reply->answer(404, rpc_error(id, invalid_request, "Session not found: initialize again"), {});
  if (!p.protocol.empty()) {
    const auto& versions = tools::mcp_protocol_versions();
    if (std::find(versions.begin(), versions.end(), p.protocol) == versions.end()) {
      return reply->answer(400, rpc_error(id, invalid_request, "Bad Request: unsupported MCP-Protocol-Version " + p.protocol), {});
    }
  }

  if (!has_id) {  // a notification
    if (method == "notifications/cancelled" && params.contains("requestId")) s->cancel(params["requestId"]);
    return reply->answer(202, {}, {});
  }
  if (method == "ping") return reply->answer(200, rpc_result(id, json::object()), {});
  if (method == "tools/list") {
    const std::shared_ptr<const routing_snapshot> routing = agents_.routing();
    json list = json::array();
    for (const tools::tool& t : routing->registry.tools) {
      if (!offered(*routing, t.id)) continue;
      list.push_back({{"name", t.id}, {"description", t.description}, {"inputSchema", input_schema_of(t)}});
    }
    return reply->answer(200, rpc_result(id, {{"tools", std::move(list)}}), {});
  }
  if (method != "tools/call") return reply->answer(200, rpc_error(id, method_not_found, "Method not found: " + method), {});

  const std::shared_ptr<const routing_snapshot> routing = agents_.routing();
  const std::string name = text_of(params, "name");
  const tools::tool* t = offered(*routing, name);
  if (!t) {
    return reply->answer(200, rpc_error(id, invalid_params, "Unknown tool: " + name), {});
  }
  const json arguments = params.value("arguments", json::object());
  if (!arguments.is_object()) return reply->answer(200, rpc_error(id, invalid_params, "Invalid params: arguments must be an object"), {});
  // Arguments the tool cannot run with are the caller's to mend: no decision is asked of them.
  if (const auto missing = tools::missing_required_argument(*t, arguments)) {
    return reply->answer(200, rpc_result(id, failed_result("missing required argument `" + *missing + "` of `" + name + "`",
                                                           json::object())), {});
  }
  // An http or command tool runs with its registry parameters only, each of its type.
  if (t->executor.value("type", "") != "mcp") {
    json checked = arguments;
    if (const auto issues = tools::complete_arguments(*t, checked); !issues.empty()) {
      return reply->answer(200, rpc_error(id, invalid_params, "Invalid params: " + issues_message(issues)), {});
    }
  }
  auto c = std::make_shared<session::call>();
  c->rpc_id = id;
  c->reply = std::move(reply);
  c->streams = p.streams;
  c->tool = name;
  c->arguments = arguments;
  c->events = json::array();
  const json meta = params.value("_meta", json::object());
  if (meta.is_object()) {
    if (const auto token = meta.find("progressToken"); token != meta.end() && (token->is_string() || token->is_number_integer())) {
      c->progress_token = *token;
    }
    // What the client adds to the state: a sentence, or events of its own.
    if (const auto context = meta.find("baton/context"); context != meta.end()) {
      if (context->is_string()) {
        c->events.push_back({{"role", "user"}, {"content", *context}});
      } else if (context->is_array() && std::all_of(context->begin(), context->end(), [](const json& e) { return e.is_object(); })) {
        for (const json& e : *context) c->events.push_back(e);
      } else {
        return c->reply->answer(200, rpc_error(id, invalid_params, "Invalid params: _meta[\"baton/context\"] must be a string or an array of events"), {});
      }
    }
  }
  c->events.push_back({{"role", "assistant"}, {"tool_call", {{"tool", name}, {"arguments", arguments}}}});
  s->add(std::move(c));
}

void mcp_gateway::resume(const std::string& id, const std::string& owner, const std::string& last_event, bool streams,
                         std::shared_ptr<mcp_reply> reply) {
  if (!streams) return reply->answer(400, rpc_error(nullptr, invalid_request, "Bad Request: resuming a stream needs HTTP/1.1"), {});
  if (id.empty()) return reply->answer(400, rpc_error(nullptr, invalid_request, "Bad Request: no Mcp-Session-Id header"), {});
  std::shared_ptr<session> s = find(id, owner);
  if (!s) return reply->answer(404, rpc_error(nullptr, invalid_request, "Session not found"), {});
  const auto at = parse_event_id(last_event);
  if (!at) return reply->answer(400, rpc_error(nullptr, invalid_request, "Bad Request: Last-Event-ID " + last_event + " is not one of baton's"), {});
  s->resume(at->first, at->second, std::move(reply));
}

void mcp_gateway::remove(const std::string& id, const std::string& owner, std::shared_ptr<mcp_reply> reply) {
  if (id.empty()) return reply->answer(400, rpc_error(nullptr, invalid_request, "Bad Request: no Mcp-Session-Id header"), {});
  std::shared_ptr<session> s;
  {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second->owner() == owner) {
      s = it->second;
      sessions_.erase(it);
    }
  }
  if (!s) return reply->answer(404, rpc_error(nullptr, invalid_request, "Session not found"), {});
  s->end();
  reply->answer(204, {}, {});
}

}  // namespace baton
