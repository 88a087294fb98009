// Escalations to a person (DESIGN §5, docs/escalations.md): the desk keeps the pending ones and
// the resolutions the agents have not acknowledged, arms deadlines, tells reviewers, and sends
// resolutions to the agents' sessions. Every change is a row in the decision log first; memory
// only mirrors the log, and start() rebuilds it from the log after a restart. On a log several
// instances share (PostgreSQL), the database is the truth: each desk mirrors every instance's
// escalations and resolutions, hearing of other instances' rows as they commit (LISTEN: the
// notification names them) and reading the log again for a resume, a resolve of an id it does
// not know, and after a lost connection; the database takes one resolution per escalation,
// whichever instance writes it first.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "adapters/log/change_feed.hpp"
#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "adapters/runtime/agent_connection.hpp"
#include "adapters/runtime/metrics.hpp"
#include "adapters/runtime/routing.hpp"
#include "core/answers.hpp"
#include "core/error.hpp"
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

// What the desk needs of the serving configuration; it outlives the desk. The desk reads the
// serving snapshot whenever it prepares a resolution, so resolutions record (and are checked
// against) what serves then.
struct escalation_routing {
  routing_state& routing;  // swapped by a reload under the desk's lock (swap_and_resolve_misfits)
  std::size_t max_pending_tool_results;  // per connection (server.max_pending_tool_results)
  metrics& counters;                     // tool runs and resolutions
};

class escalation_desk {
 public:
  escalation_desk(log::decision_log& log, escalation_routing routing, boost::asio::any_io_executor io);
  ~escalation_desk();

  // At start-up, before serving: reads the pending escalations and unacknowledged resolutions
  // from the log and resolves, with their configured outcome, those whose deadline passed while
  // baton was down (waiting until that is durable). Throws error_exception.
  void start();

  // The escalation of an escalated decision (its row is written right after the decision's),
  // with the terms of `routing`'s policy (the snapshot the turn decided with).
  escalation make_escalation(const routing_snapshot& routing, const log::decision_record& d, const response* answers,
                             std::string state) const;
  // Its row is durable: it is pending now, reviewers hear of it, its deadline runs. One raised
  // on a snapshot a reload has since replaced, whose tool no longer fits, is resolved at once as
  // swap_and_resolve_misfits() would.
  void raised(const escalation& e);

  // Reload `reload_id`: swaps `next` in as the serving snapshot and then, in the same step under
  // the desk's lock (so no deadline or reviewer prepares a resolution against the old snapshot
  // after the swap without being seen here), every pending escalation raised on
  // another registry or policy whose proposed tool no longer fits the serving one (gone from the
  // registry, its arguments no longer valid, or denied by rules.deny) is denied, by "baton" as
  // its deadline would be (`by` deadline), with a reason naming the reload and what no longer
  // fits. An execute that no longer fits cannot be carried out, so a misfit is always denied.
  // `done` gets how many were resolved, once their rows are durable (on an I/O thread, or inline
  // when there are none).
  void swap_and_resolve_misfits(std::shared_ptr<const routing_snapshot> next, const std::string& reload_id,
                                std::function<void(std::size_t)> done);

  using resolved_callback = std::function<void(result<protocol::resolution_object>)>;
  // Resolves once: 404 NOT_FOUND, 409 ALREADY_RESOLVED, 409 RESOLUTION_IN_PROGRESS, 409
  // VERSION_CHANGED (unless forced), 422 INVALID_RESOLUTION, or the log's error. `done` gets the resolution object once it is
  // durable, on an I/O thread.
  void resolve(const std::string& id, protocol::resolve_input in, const std::string& reviewer, resolved_callback done);

  // POST /v1/escalations/{id}/resolve: its body read (400 INVALID_JSON, 422 INVALID_RESOLUTION),
  // then resolve().
  void resolve_body(const std::string& id, std::string_view body, const std::string& reviewer, resolved_callback done);
  // A reviewer's frame on /v1/review: a `resolve` is answered on `l` with `resolve_result` once it
  // is durable, with an error frame when it is refused (review_protocol.hpp).
  void on_review_frame(const std::shared_ptr<review_listener>& l, std::string_view text, const std::string& reviewer);

  // GET /v1/escalations: `status` pending | resolved | all. 422 for another status or limit.
  result<std::string> list_json(std::string_view status, std::size_t limit);
  // GET /v1/escalations/{id}.
  result<std::string> get_json(const std::string& id);
  // GET /v1/tools: the registry's tools and their parameters, for a reviewer's edited arguments.
  std::string tools_json() const;

  // The agent side, on the connection's strand. attach() (when one of the session's decisions
  // escalates, and on `resume`): this connection takes the session's resolutions from now on.
  // When `resend` (a `resume`), also says which of its escalations are pending and which
  // resolutions wait for the agent's acknowledgement (the caller sends them and awaits their
  // agent-run tools' results).
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
  // One tool_result per resolved decision, whichever connection (or, after a restart, process)
  // sends it: true when `decision` is not a waiting resolution's, or its agent-run tool has no
  // result yet (it is then claimed until release_tool_result, which a result the log refused
  // calls); false when it has one.
  bool claim_tool_result(const std::string& decision);
  void release_tool_result(const std::string& decision);

  // The most escalations a list or a snapshot holds (oldest first).
  static constexpr std::size_t max_listed = 1000;

  // A reviewer connection: gets the snapshot now, then every change.
  void add_listener(const std::shared_ptr<review_listener>& l);

  std::size_t pending() const;

 private:
  struct entry;
  struct waiting;
  using snapshot = std::shared_ptr<const routing_snapshot>;
  // A resolution prepared against `routing` (what serves when it is prepared), which then carries
  // it out (its executor) whatever a reload swaps in meanwhile.
  result<log::resolution_record> prepare(const routing_snapshot& routing, const entry& e, protocol::resolve_input&& in,
                                         const std::string& reviewer, const char* by) const;
  // `caught_up`: a shared log was read again already for this call.
  void resolve_as(const std::string& id, protocol::resolve_input in, const std::string& reviewer, const char* by,
                  resolved_callback done, bool caught_up = false);
  log::resolution_record prepare_deadline(const routing_snapshot& routing, const entry& e) const;
  // Why escalation `r`'s proposed tool does not fit `routing`; none when it does (or it
  // proposes none, or was raised on this very registry and policy).
  static std::optional<std::string> misfit(const routing_snapshot& routing, const log::escalation_record& r);
  // The deny of a misfit, with mutex_ held: none when it is being resolved already.
  std::optional<log::resolution_record> prepare_misfit_locked(const routing_snapshot& routing, entry& e,
                                                              const std::string& why, const std::string& reload_id);
  void write_resolution(const std::string& id, log::resolution_record res, snapshot routing, resolved_callback done);
  void finish(const std::string& id, log::resolution_record r, const snapshot& routing, result<void> written,
              resolved_callback done);
  void arm(entry& e, std::chrono::milliseconds later = {});  // its deadline, `later` after it
  void add_pending(std::unique_ptr<entry> e);  // with mutex_ held (or before serving)
  static protocol::resolve_input deadline_input(const log::escalation_record& r);
  void on_deadline(const std::string& id);
  void deliver(const waiting& w);
  void run_tool(tools::executor& ex, const log::escalation_record& e, const std::string& resolution,
                const std::string& tool, const json& arguments);
  void broadcast_locked(const std::string& frame);  // with mutex_ held
  bool acks_in_flight_locked(const std::string& session) const;  // with mutex_ held
  void forget_if_done_locked(const std::string& session);         // with mutex_ held
  // The wire view of an escalation; `tool_run`: the run of a resolved escalation's tool (none when
  // there is none, or not yet).
  static protocol::escalation_object escalation_object_of(const escalation& e,
                                                          std::optional<protocol::resolution_object> resolution = {},
                                                          std::optional<protocol::tool_run_object> tool_run = {});
  // An escalation read from the log, with its resolution and tool run when it has them.
  static protocol::escalation_object history_object(const routing_snapshot& routing, const log::escalation_history& h);
  // A row read from the log, with its evidence.
  static escalation read_back(const routing_snapshot& routing, const log::escalation_row& row);
  static protocol::resolution_object resolution_object_of(const routing_snapshot& routing, const log::resolution_record& r,
                                                          const log::escalation_record& e);
  // The executor an `execute` resolution's tool has (null for a deny, or for finish).
  static tools::executor* executor_for(const routing_snapshot& routing, const log::resolution_record& r);
  static std::string executor_kind(const routing_snapshot& routing, const std::string& tool);  // agent | http | command
  static waiting waiting_for(const routing_snapshot& routing, const log::resolution_record& r,
                             const log::escalation_record& e, const protocol::resolution_object& resolution);
  void run_if_baton_runs(const routing_snapshot& routing, const log::resolution_record& r, const log::escalation_record& e);
  // A shared log: what the log says of some escalations and resolutions, read after a point.
  struct log_view {
    std::vector<log::escalation_row> pending;             // escalations pending in the log
    std::vector<log::escalation_history> unacknowledged;  // resolutions no agent acknowledged
    std::vector<std::string> acknowledged;                // resolutions acknowledged
    std::vector<log::escalation_history> settled;         // escalations resolved, resolutions acknowledged
    // Of whose escalations it holds all there is: everyone's, one session's, or only what it names.
    enum class scope { all, session, named } whole = scope::named;
    std::string session;
  };
  // Takes in what another instance wrote: pending escalations, resolutions (delivered here when
  // their session is connected here) and acknowledgements. `started`: begin_read() before the
  // reads; what this desk settled since wins.
  void take_in(const log_view& view, std::uint64_t started);
  std::uint64_t begin_read();
  // Reads the log's pending escalations and unacknowledged resolutions (all, or `session`'s)
  // and takes them in. Blocking; does nothing on a file log.
  void catch_up(const std::optional<std::string>& session = {});
  void catch_up_later();  // from the change feed's thread: catch_up() on an I/O thread, coalesced
  // A notification's lines ("e ID", "v ID ESCALATION", "d RESOLUTION"): reads what they name
  // and takes it in. changes_later() queues a payload from the change feed's thread; they are
  // taken in on an I/O thread in the order they came (commit order).
  void take_in_named(const std::string& lines);
  void changes_later(const std::string& payload);
  // Reads the tool runs of resolutions waiting here whose tool baton runs and has not reported.
  void refresh_tool_results();
  void remove_pending_locked(std::map<std::string, std::unique_ptr<entry>>::iterator it);  // with mutex_ held

  log::decision_log& log_;
  escalation_routing routing_;
  boost::asio::any_io_executor io_;
  std::unique_ptr<log::log_reader> reader_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<entry>> pending_;  // id → pending escalation
  // The pending ones in the order they were raised (ids sort by time only to the millisecond).
  std::map<std::uint64_t, const entry*> raised_order_;
  std::uint64_t raised_count_ = 0;
  std::map<std::string, waiting> waiting_;                 // resolution id → not acknowledged yet
  // Resolved decisions whose tool has a result (reported here, or read from the log), kept after
  // the acknowledgement (the most recent max_remembered_results): a connection that resumed
  // before it may report again. With mutex_ held, or before serving.
  static constexpr std::size_t max_remembered_results = 65536;
  std::unordered_set<std::string> reported_;
  std::deque<std::string> reported_order_;
  void remember_reported(const std::string& decision);
  std::map<std::string, std::weak_ptr<agent_connection>> sessions_;  // session → its connection
  std::map<std::string, std::vector<std::function<void()>>> ack_waiters_;  // session → resumes waiting for its acks
  std::map<std::string, int> tools_running_;  // session → tools baton runs for its resolutions, not finished
  std::size_t live_mark_ = 0;  // sessions_'s size after its last sweep of closed connections
  std::vector<std::weak_ptr<review_listener>> listeners_;
  std::string last_reload_;  // the latest reload's id, for misfits raised after it
  // A shared log's catch-ups: what this desk settled itself (escalation or resolution id → the
  // catch-up count then), so that a catch-up that read the log before it does not undo it.
  const bool shared_;
  std::mutex catch_up_mutex_;
  std::uint64_t catch_ups_ = 0;
  std::map<std::string, std::uint64_t> settled_here_;
  std::atomic<bool> catch_up_queued_ = false;
  std::atomic<bool> catch_up_needed_ = false;  // a catch-up failed: again at the next tick
  std::mutex changes_mutex_;
  std::deque<std::string> changes_;  // notifications not taken in yet, oldest first
  bool draining_ = false;            // a drain of changes_ is posted or running
  std::unique_ptr<log::change_feed> feed_;  // last: stopped first
};

}  // namespace baton
