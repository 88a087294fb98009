// Resolutions on their way to the agents (docs/escalations.md, "Delivery"): each resolution waits,
// in the escalation book, until its agent acknowledges it. It goes to the session's connection at
// once when there is one, and again with every `resume` until acknowledged; a tool baton runs for
// it runs here, and its tool_result frame follows the resolution. One tool_result per resolved
// decision whose tool the agent runs, whichever connection (or, after a restart, process) sends it.
// The agent side's calls run on the connection's strand.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "adapters/runtime/agent_connection.hpp"
#include "adapters/runtime/escalation_book.hpp"
#include "adapters/runtime/metrics.hpp"
#include "adapters/runtime/routing.hpp"
#include "core/error.hpp"

namespace baton {

class escalation_sync;

class resolution_delivery {
 public:
  // `sync` (null on a log no other instance writes): asked to read the shared log first where
  // another instance may have written what is asked for. `max_pending_tool_results`: per
  // connection (server.max_pending_tool_results).
  resolution_delivery(escalation_book& book, log::decision_log& log, log::log_reader& reader, metrics& counters,
                      std::size_t max_pending_tool_results, boost::asio::any_io_executor io, escalation_sync* sync);

  // What a resolution `r` of `e` waits as: its frame, and the tool its agent runs, if any.
  static waiting_resolution waiting_for(const routing_snapshot& routing, const log::resolution_record& r,
                                        const log::escalation_record& e, const protocol::resolution_object& resolution);

  // Sends `w` to its session's connection, when it has one here (else it goes with a resume).
  void deliver(const waiting_resolution& w);
  // An execute whose tool baton runs (http, command) runs it now; the agent runs its own once it
  // has the resolution. The run's row goes to the log, reviewers and the session hear of it.
  void run_if_baton_runs(const routing_snapshot& routing, const log::resolution_record& r, const log::escalation_record& e);
  // A run of the decision's tool is known (reported here, or read from a log): the agent's next
  // tool_result for it is a second. With the book's lock held, or before serving.
  void remember_reported_locked(const std::string& decision);

  // This connection takes the session's resolutions from now on (when one of its decisions
  // escalates, and on `resume`). When `resend` (a `resume`), also says which of its escalations
  // are pending and which resolutions wait for the agent's acknowledgement (the caller sends them
  // and awaits their agent-run tools' results).
  struct attached {
    std::vector<std::string> pending;
    std::vector<std::string> frames;                            // {"type":"resolution",…}
    std::vector<std::pair<std::string, std::string>> awaited;  // decision → agent-run tool
    // baton's tool_result frames of the tools it ran for those resolutions (sent after them): an
    // agent that was not connected when the tool ran hears of it here.
    std::vector<std::string> tool_results;
  };
  attached attach(const std::string& session, const std::shared_ptr<agent_connection>& c, bool resend);
  // The agent acknowledged a resolution of one of its sessions (`owner` scopes them, as in the
  // session table). Acknowledging one again is no error; 404 UNKNOWN_RESOLUTION for one that is
  // not this owner's.
  result<void> acknowledge(const std::string& resolution, const std::string& owner);
  // Whether an acknowledgement of `session`'s resolutions is still on its way to the log; if so,
  // `then` runs (on an I/O thread) once none is, written or failed. A `resume` is answered after
  // it: the client that sends `ack` then `resume` knows from the answer that the ack is durable.
  bool defer_until_acks_written(const std::string& session, std::function<void()> then);
  // One tool_result per resolved decision: true when `decision` is not a waiting resolution's, or
  // its agent-run tool has no result yet (it is then claimed until release_tool_result, which a
  // result the log refused calls); false when it has one.
  bool claim_tool_result(const std::string& decision);
  void release_tool_result(const std::string& decision);

 private:
  void run_tool(tools::executor& ex, const log::escalation_record& e, const std::string& resolution,
                const std::string& tool, const json& arguments);
  void on_acknowledgement_written(const std::string& resolution, result<void> ok);  // on an I/O thread
  bool acks_in_flight_locked(const std::string& session) const;

  escalation_book& book_;
  log::decision_log& log_;
  log::log_reader& reader_;
  metrics& counters_;
  std::size_t max_pending_tool_results_;
  boost::asio::any_io_executor io_;
  escalation_sync* sync_;
  // Under the book's lock:
  std::map<std::string, std::vector<std::function<void()>>> ack_waiters_;  // session → resumes waiting for its acks
  // Resolved decisions whose tool has a result (reported here, or read from the log), kept after
  // the acknowledgement (the most recent max_remembered_results): a connection that resumed
  // before it may report again.
  static constexpr std::size_t max_remembered_results = 65536;
  std::unordered_set<std::string> reported_;
  std::deque<std::string> reported_order_;
};

}  // namespace baton
