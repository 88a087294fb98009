// What the escalation desk's parts share (escalation_desk, resolution_delivery, escalation_sync):
// the pending escalations, the resolutions their agents have not acknowledged, the sessions'
// connections and the reviewers listening, under one lock. One lock, so that an escalation leaves
// the pending ones and its resolution starts waiting for the agent in one step that reviewers,
// agents and the shared log's catch-ups see whole. Members named `…_locked` want it held.
#pragma once

#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "adapters/log/records.hpp"
#include "adapters/runtime/agent_connection.hpp"
#include "core/json.hpp"

namespace baton {

// An escalation as the desk shows it: its row and what made the policy escalate (not stored:
// derived from the decision's answers, escalation_evidence.hpp).
struct escalation {
  log::escalation_record row;
  json evidence;
};

// A reviewer's live connection (/v1/review). send() may be called from any thread.
class review_listener {
 public:
  virtual ~review_listener() = default;
  virtual void send(std::string frame) = 0;
};

// A pending escalation, with its deadline's timer.
struct pending_escalation {
  baton::escalation escalation;
  std::uint64_t order = 0;  // in escalation_book::raised_order
  std::unique_ptr<boost::asio::steady_timer> timer;
  bool resolving = false;  // its resolution row is on its way to the log
};

// A resolution its agent has not acknowledged.
struct waiting_resolution {
  std::string escalation;
  std::string session;
  std::string frame;     // {"type":"resolution",…}
  std::string decision;  // for an agent-run tool's tool_result
  std::string tool;      // "" unless the agent runs it
  bool acknowledged = false;  // its delivery row is being written
  std::string tool_result;    // baton's tool_result frame, once a tool it runs for this resolution ran
  bool baton_runs = false;    // its tool is one baton runs (http, command)
  bool resolved_here = false;  // this desk wrote it (and runs its tool)
  int polls = 0;               // times its tool run was looked for in a shared log
};

struct escalation_book {
  std::mutex mutex;

  using pending_map = std::map<std::string, std::unique_ptr<pending_escalation>>;
  pending_map pending;  // id → pending escalation
  // The pending ones in the order they were raised (ids sort by time only to the millisecond).
  std::map<std::uint64_t, const pending_escalation*> raised_order;
  std::map<std::string, waiting_resolution> waiting;  // resolution id → not acknowledged yet
  std::map<std::string, std::weak_ptr<agent_connection>> sessions;  // session → its connection
  std::map<std::string, int> tools_running;  // session → tools baton runs for its resolutions, not finished
  std::vector<std::weak_ptr<review_listener>> listeners;

  void add_pending_locked(std::unique_ptr<pending_escalation> e);  // (or before serving)
  void remove_pending_locked(pending_map::iterator it);            // its timer cancelled
  // The session's connection, when it has a live one here.
  std::shared_ptr<agent_connection> connection_locked(const std::string& session) const;
  // Remembers the session's connection; forgets, now and then, the connections that are gone, so
  // that the map stays the size of the live ones.
  void remember_connection_locked(const std::string& session, const std::shared_ptr<agent_connection>& c);
  // An escalation of the session pending, a resolution of it unacknowledged, or a tool baton runs
  // for one not finished (a scan of the pending and waiting ones).
  bool has_work_locked(const std::string& session) const;
  // Nothing more to send the session (no resolution to deliver, no escalation pending, no tool
  // baton runs for it still running): its connection need not be remembered.
  void forget_if_done_locked(const std::string& session);
  void broadcast_locked(const std::string& frame);  // to every reviewer listening

 private:
  std::uint64_t raised_count_ = 0;
  std::size_t live_mark_ = 0;  // sessions' size after its last sweep of closed connections
};

}  // namespace baton
