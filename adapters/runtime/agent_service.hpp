// One agent turn from frame to answer: session → schema compiler → engine scheduler →
// policy → decision log → decision frame → executor → tool_result frame. Transport-free: the
// WebSocket session hands it frames and a way back (agent_connection).
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "adapters/log/decision_log.hpp"
#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/runtime/agent_connection.hpp"
#include "adapters/runtime/escalation_desk.hpp"
#include "adapters/runtime/escalation_reads.hpp"
#include "adapters/runtime/metrics.hpp"
#include "adapters/runtime/reloader.hpp"
#include "adapters/runtime/routing.hpp"
#include "adapters/runtime/server_config.hpp"
#include "adapters/runtime/session_table.hpp"
#include "engine/decision_engine.hpp"
#include "engine/scheduler.hpp"

namespace baton {

class agent_service {
 public:
  // `fallback` (may be null): the larger engine a fallback lane asks, through its own scheduler.
  struct fallback_engine {
    decision_engine& engine;
    scheduler& sched;
    std::chrono::milliseconds timeout;
  };
  // `routing`: what serves first (load_routing). `io` runs the escalations' deadlines.
  agent_service(const server_config& config, decision_engine& engine, scheduler& scheduler, log::decision_log& log,
                metrics& m, std::shared_ptr<const routing_snapshot> routing, boost::asio::any_io_executor io,
                std::optional<fallback_engine> fallback = std::nullopt);

  // Handles one text frame on the connection's strand. False when the frame was refused at once
  // (an error frame went back), which the connection counts towards its bad-frame limit.
  bool on_frame(const std::shared_ptr<agent_connection>& c, std::string_view text);

  // A tool call the agent made itself (baton as an MCP gateway): `f.proposal` is the call,
  // {"tool", "arguments"}, and the policy judges it (policies::judge_call) where a decide frame's
  // decision chooses the tool. Everything else is a decide frame's: the session's turn, the log
  // row, the decision frame, the tool baton runs and its tool_result frame, the escalation and its
  // resolution, all sent through `c`. On `c`'s strand; the proposal's tool is one baton runs.
  void on_call(const std::shared_ptr<agent_connection>& c, json id, protocol::decide_frame&& f);
  // The MCP gateway's session `session` ends (an end frame's, which agents may not send for it).
  void on_call_end(const std::shared_ptr<agent_connection>& c, std::string session);

  // From now on decide frames get SHUTTING_DOWN; in_flight() counts down to 0.
  void drain() noexcept { draining_ = true; }
  std::size_t in_flight() const noexcept { return in_flight_.load(); }

  // GET /health.
  std::string health_json() const;

  // The escalations to a person: start() it before serving.
  escalation_desk& desk() noexcept { return *desk_; }
  // Reading them back (GET /v1/escalations).
  escalation_reads& escalations() noexcept { return *reads_; }

  // The registry, policy and executors that serve now.
  std::shared_ptr<const routing_snapshot> routing() const { return routing_.current(); }

  // The `id` of a frame refused before it is read (its rate), read as on_frame() would read it.
  json frame_id(std::string_view text) const;

  // The agent sessions (GET /metrics reads their counts).
  const session_table& sessions() const noexcept { return sessions_; }

  // Reloads of the registry and policy (SIGHUP, POST /v1/admin/reload).
  routing_reloader& reloader() noexcept { return *reloader_; }

 private:
  struct turn;
  enum class turn_phase;  // where a turn is: agent_service.cpp
  bool on_decide(const std::shared_ptr<agent_connection>& c, json id, protocol::decide_frame&& f, bool call);
  // Two-stage routing: after the first stage's answers, asks the second (true: it is asked); after
  // the second's, merges both into the turn's answers (tools::merge_stages). False: decide now.
  bool next_stage(const std::shared_ptr<turn>& t, bool fallback);
  // The policy's action on the turn's answers (none: the engine failed), or on its call.
  policies::action decided(const std::shared_ptr<turn>& t, bool fallback) const;
  bool on_tool_result(const std::shared_ptr<agent_connection>& c, json id, protocol::tool_result_frame&& f);
  bool on_resume(const std::shared_ptr<agent_connection>& c, json id, protocol::resume_frame&& f);
  bool on_ack(const std::shared_ptr<agent_connection>& c, json id, protocol::ack_frame&& f);
  bool on_end(const std::shared_ptr<agent_connection>& c, json id, protocol::end_frame&& f);
  // `ended` to every end that waited for the session's turn in flight.
  void send_pending_ends(const std::string& session);
  std::string scoped(const agent_connection& c, const std::string& session) const;
  // Hands the turn's request to `to`'s queue, its timer armed for `timeout`; its error when the
  // queue refuses it (the request then stays with the turn).
  result<void> submit(const std::shared_ptr<turn>& t, scheduler& to, std::chrono::milliseconds timeout);
  void on_engine(const std::shared_ptr<turn>& t, scheduled_result&& r);
  void on_timeout(const std::shared_ptr<turn>& t);
  // Leaves the history's oldest events out of the turn's request until the engine's window takes it.
  void fit_window(const std::shared_ptr<turn>& t, decision_engine& engine);
  // Puts the session's media the engine takes into the request (tools::attach_media: not those of
  // dropped events, the newest within its limits) and checks them as a SystemOne request's.
  result<void> attach_media(const std::shared_ptr<turn>& t, decision_engine& engine);
  void capture_state(const std::shared_ptr<turn>& t);
  // A turn refused instead of decided: the agent gets the error, the session its history as it was.
  void refuse(const std::shared_ptr<turn>& t, const error& e);
  void start_fallback(const std::shared_ptr<turn>& t);
  void arm_timer(const std::shared_ptr<turn>& t, std::chrono::milliseconds timeout);
  log::decision_record make_record(const std::shared_ptr<turn>& t, std::string id);
  void decide_and_log(const std::shared_ptr<turn>& t);
  void send_decision(const std::shared_ptr<turn>& t);
  void after_decision(const std::shared_ptr<turn>& t);
  void on_tool_done(const std::shared_ptr<turn>& t, tools::tool_outcome&& o);
  // The decision is over (answered or refused): the session goes back once no engine holds it.
  void over(const std::shared_ptr<turn>& t, turn_phase how);
  void try_hand_back(const std::shared_ptr<turn>& t);
  void hand_back(turn& t);  // its session commits (the decision went out) or aborts

  const server_config& config_;
  decision_engine& engine_;
  scheduler& scheduler_;
  log::decision_log& log_;
  metrics& metrics_;
  routing_state routing_;  // a turn takes the snapshot serving when it starts
  std::unique_ptr<escalation_desk> desk_;
  std::unique_ptr<escalation_reads> reads_;  // after desk_: its reads end before the desk goes
  std::unique_ptr<routing_reloader> reloader_;
  std::optional<fallback_engine> fallback_;
  session_table sessions_;
  // `end` frames waiting for their session's turn in flight: scoped session → (connection, id, name).
  struct pending_end {
    std::weak_ptr<agent_connection> conn;
    json id;
    std::string name;
  };
  std::mutex ends_mutex_;
  std::unordered_map<std::string, std::vector<pending_end>> pending_ends_;
  std::atomic<bool> draining_{false};
  std::atomic<std::size_t> in_flight_{0};
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  // Expires first when the service is destroyed (declared last): a turn that outlives it (a
  // handler still queued on a stopped io_context) then has no session to hand back.
  std::shared_ptr<const int> alive_ = std::make_shared<const int>(0);
};

}  // namespace baton
