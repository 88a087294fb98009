#include "adapters/runtime/resolution_delivery.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/protocol/escalation_views.hpp"
#include "adapters/runtime/escalation_rules.hpp"
#include "adapters/runtime/escalation_sync.hpp"
#include "adapters/runtime/tool_runs.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"

namespace baton {

namespace {

// The API key a logged session belongs to: "KEY/SESSION" (a session id holds no '/', a key name
// may), "" without keys.
std::string_view owner_of(std::string_view session) {
  const auto slash = session.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : session.substr(0, slash);
}

}  // namespace

resolution_delivery::resolution_delivery(escalation_book& book, log::decision_log& log, log::log_reader& reader,
                                         metrics& counters, std::size_t max_pending_tool_results,
                                         boost::asio::any_io_executor io, escalation_sync* sync)
    : book_(book), log_(log), reader_(reader), counters_(counters), max_pending_tool_results_(max_pending_tool_results),
      io_(std::move(io)), sync_(sync) {}

waiting_resolution resolution_delivery::waiting_for(const routing_snapshot& routing, const log::resolution_record& r,
                                                    const log::escalation_record& e,
                                                    const protocol::resolution_object& resolution) {
  waiting_resolution w;
  w.escalation = e.id;
  w.session = e.session;
  w.decision = e.decision;
  w.frame = protocol::render(protocol::resolution_frame{resolution});
  if (const tools::executor* ex = executor_for(routing, r)) {
    if (ex->agent_runs()) {
      w.tool = r.tool;
    } else {
      w.baton_runs = true;
    }
  }
  return w;
}

void resolution_delivery::deliver(const waiting_resolution& w) {
  std::shared_ptr<agent_connection> c;
  {
    std::lock_guard lock(book_.mutex);
    c = book_.connection_locked(w.session);
  }
  if (!c) return;  // sent when the agent resumes the session
  boost::asio::post(c->strand(), [c, w, max = max_pending_tool_results_] {
    c->send(w.frame);
    if (!w.tool.empty()) c->await_tool(w.decision, w.tool, max);
    // The run of a tool baton ran, when it ran before this desk delivered (another instance's).
    if (!w.tool_result.empty()) c->send(w.tool_result);
  });
}

void resolution_delivery::run_if_baton_runs(const routing_snapshot& routing, const log::resolution_record& r,
                                            const log::escalation_record& e) {
  if (tools::executor* ex = executor_for(routing, r); ex && !ex->agent_runs()) run_tool(*ex, e, r.id, r.tool, r.arguments);
}

void resolution_delivery::run_tool(tools::executor& ex, const log::escalation_record& e, const std::string& resolution,
                                   const std::string& tool, const json& arguments) {
  {
    // The session's connection is kept until the run's frame is sent, even when the agent
    // acknowledges the resolution first.
    std::lock_guard lock(book_.mutex);
    ++book_.tools_running[e.session];
  }
  tools::tool_call call{e.decision, tool, arguments};
  // The session's connection hears how far the run is, when it has one here (an MCP gateway call).
  call.progress = [this, session = e.session, decision = e.decision](json params) {
    std::shared_ptr<agent_connection> c;
    {
      std::lock_guard lock(book_.mutex);
      c = book_.connection_locked(session);
    }
    if (c) c->tool_progress(decision, std::move(params));
  };
  ex.run(std::move(call),
         [this, escalation = e.id, decision = e.decision, session = e.session, resolution, tool,
          kind = std::string(ex.kind())](tools::tool_outcome o) {
           counters_.tool_run(tool, o.ok);
           log::tool_run_record run = tool_run_of(decision, tool, kind, o);
           // Reviewers hear of the run once it is in the log, so that GET /v1/escalations/{id} agrees.
           const std::string frame = protocol::render(protocol::tool_run_frame{escalation, protocol::tool_run_view(run)});
           auto report = [this, decision, frame](result<void> ok) {
             if (!ok) {
               spdlog::error("the tool run of decision {} is not in the log: {}", decision, ok.error().message);
               return;
             }
             std::lock_guard lock(book_.mutex);
             book_.broadcast_locked(frame);
           };
           if (auto queued = log_.append(std::move(run), report); !queued) report(queued.error());
           std::string result = protocol::render(protocol::tool_outcome_frame{decision, tool, wire_outcome(std::move(o)), {}});
           std::shared_ptr<agent_connection> c;
           {
             std::lock_guard lock(book_.mutex);
             c = book_.connection_locked(session);
             // Sent again with the resolution on a resume until the agent acknowledges it.
             if (const auto w = book_.waiting.find(resolution); w != book_.waiting.end()) w->second.tool_result = result;
             if (const auto r = book_.tools_running.find(session); r != book_.tools_running.end() && --r->second == 0) {
               book_.tools_running.erase(r);
             }
             book_.forget_if_done_locked(session);
           }
           // A connected session hears of it now; the run is in the log either way.
           if (c) {
             boost::asio::post(c->strand(), [c, result = std::move(result)]() mutable { c->send(std::move(result)); });
           }
         });
}

void resolution_delivery::remember_reported_locked(const std::string& decision) {
  if (!reported_.insert(decision).second) return;
  reported_order_.push_back(decision);
  if (reported_order_.size() > max_remembered_results) {
    reported_.erase(reported_order_.front());
    reported_order_.pop_front();
  }
}

bool resolution_delivery::claim_tool_result(const std::string& decision) {
  std::lock_guard lock(book_.mutex);
  // Reported already (here, or in the log), its resolution perhaps acknowledged since: a
  // connection that resumed before the acknowledgement still awaits it.
  if (reported_.contains(decision)) return false;
  const bool resolved = std::any_of(book_.waiting.begin(), book_.waiting.end(), [&](const auto& w) {
    return w.second.decision == decision && !w.second.tool.empty();
  });
  if (resolved) remember_reported_locked(decision);  // else no resolution's: the connection's own record decides
  return true;
}

void resolution_delivery::release_tool_result(const std::string& decision) {
  std::lock_guard lock(book_.mutex);
  if (reported_.erase(decision) == 0) return;
  // The log refused it (rare): its order entry goes too, so that a later claim is kept its time.
  const auto at = std::find(reported_order_.rbegin(), reported_order_.rend(), decision);
  if (at != reported_order_.rend()) reported_order_.erase(std::next(at).base());
}

resolution_delivery::attached resolution_delivery::attach(const std::string& session,
                                                          const std::shared_ptr<agent_connection>& c, bool resend) {
  // A resume may come to this instance after its session was served by another.
  if (resend && sync_) sync_->catch_up(session);
  attached a;
  std::lock_guard lock(book_.mutex);
  book_.remember_connection_locked(session, c);
  if (resend) {
    for (const auto& [order, e] : book_.raised_order) {
      if (e->escalation.row.session == session) a.pending.push_back(e->escalation.row.id);
    }
    for (const auto& [id, w] : book_.waiting) {
      if (w.session != session || w.acknowledged) continue;
      a.frames.push_back(w.frame);
      if (!w.tool.empty()) a.awaited.emplace_back(w.decision, w.tool);
      if (!w.tool_result.empty()) a.tool_results.push_back(w.tool_result);
    }
  }
  return a;
}

result<void> resolution_delivery::acknowledge(const std::string& resolution, const std::string& owner) {
  if (sync_) {
    // Delivered by another instance (one this agent was connected to before): its rows are read here.
    std::unique_lock lock(book_.mutex);
    const bool known = book_.waiting.contains(resolution);
    lock.unlock();
    if (!known) sync_->take_in_resolution(resolution);
  }
  bool waiting_here = false;
  {
    std::lock_guard lock(book_.mutex);
    const auto it = book_.waiting.find(resolution);
    if (it != book_.waiting.end() && owner_of(it->second.session) == owner) {
      if (it->second.acknowledged) return {};  // its delivery row is on its way
      it->second.acknowledged = true;
      waiting_here = true;
    }
  }
  if (waiting_here) {
    auto written = [this, resolution](result<void> ok) {
      // Acknowledged already (through another instance, or a second ack racing the first).
      if (!ok && ok.error().code == codes::duplicate_row) ok = result<void>();
      boost::asio::post(io_, [this, resolution, ok] { on_acknowledgement_written(resolution, ok); });
    };
    if (auto queued = log_.append(log::delivery_record{resolution, unix_ms()}, written); !queued) written(queued.error());
    return {};
  }
  // Delivery is at least once: acknowledging again what is acknowledged is no error.
  const auto session = reader_.acknowledged_session(resolution);
  if (!session) return session.error();
  if (*session && owner_of(**session) == owner) return {};
  return make_error(404, codes::unknown_resolution,
                    "resolution `" + resolution + "` is not one of this key's sessions' resolutions");
}

void resolution_delivery::on_acknowledgement_written(const std::string& resolution, result<void> ok) {
  std::vector<std::function<void()>> resumes;
  {
    std::lock_guard lock(book_.mutex);
    const auto it = book_.waiting.find(resolution);
    if (it == book_.waiting.end()) return;
    const std::string session = it->second.session;
    if (!ok) {
      // Sent again on the next resume, and acknowledged again.
      spdlog::error("the acknowledgement of resolution {} is not in the log: {}", resolution, ok.error().message);
      it->second.acknowledged = false;
    } else {
      book_.waiting.erase(it);
      if (sync_) sync_->settled_here_locked(resolution);
      book_.forget_if_done_locked(session);
    }
    if (!acks_in_flight_locked(session)) {
      if (const auto w = ack_waiters_.find(session); w != ack_waiters_.end()) {
        resumes = std::move(w->second);
        ack_waiters_.erase(w);
      }
    }
  }
  for (auto& resume : resumes) resume();
}

bool resolution_delivery::acks_in_flight_locked(const std::string& session) const {
  return std::any_of(book_.waiting.begin(), book_.waiting.end(),
                     [&](const auto& w) { return w.second.session == session && w.second.acknowledged; });
}

bool resolution_delivery::defer_until_acks_written(const std::string& session, std::function<void()> then) {
  std::lock_guard lock(book_.mutex);
  if (!acks_in_flight_locked(session)) return false;
  ack_waiters_[session].push_back(std::move(then));
  return true;
}

}  // namespace baton
