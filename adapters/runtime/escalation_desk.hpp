// Escalations to a person (docs/escalations.md): the desk keeps the pending ones, arms their
// deadlines, tells reviewers, and resolves each exactly once, whoever asks first (a reviewer, its
// deadline, a reload it no longer fits). Every change is a row in the decision log first; memory
// only mirrors the log, and start() rebuilds it from the log after a restart. Its parts:
// escalation_rules (what an escalation and a resolution may be), resolution_delivery (the agent
// side), escalation_sync (a log other instances share) and escalation_book (what they share).
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "adapters/runtime/escalation_book.hpp"
#include "adapters/runtime/metrics.hpp"
#include "adapters/runtime/resolution_delivery.hpp"
#include "adapters/runtime/routing.hpp"
#include "core/error.hpp"

namespace baton {

class escalation_sync;

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
  // baton was down, and denies those the registry and policy served now no longer allow (waiting
  // until that is durable). Throws error_exception.
  void start();

  // An escalation's row is durable (make_escalation, escalation_rules.hpp): it is pending now,
  // reviewers hear of it, its deadline runs. One raised on a snapshot a reload has since replaced,
  // whose tool no longer fits, is resolved at once as swap_and_resolve_misfits() would.
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
  // VERSION_CHANGED (unless forced), 422 INVALID_RESOLUTION, or the log's error. `done` gets the
  // resolution object once it is durable, on an I/O thread.
  void resolve(const std::string& id, protocol::resolve_input in, const std::string& reviewer, resolved_callback done);
  // POST /v1/escalations/{id}/resolve: its body read (400 INVALID_JSON, 422 INVALID_RESOLUTION),
  // then resolve().
  void resolve_body(const std::string& id, std::string_view body, const std::string& reviewer, resolved_callback done);
  // A reviewer's frame on /v1/review: a `resolve` is answered on `l` with `resolve_result` once it
  // is durable, with an error frame when it is refused (review_protocol.hpp).
  void on_review_frame(const std::shared_ptr<review_listener>& l, std::string_view text, const std::string& reviewer);

  // A reviewer connection: gets the snapshot now, then every change.
  void add_listener(const std::shared_ptr<review_listener>& l);

  // The most escalations a list or a snapshot holds (oldest first).
  static constexpr std::size_t max_listed = 1000;
  std::size_t pending() const;
  // Whether the session has work here: an escalation pending, a resolution its agent has not
  // acknowledged, or a tool baton runs for one (its session is then evicted last: session_table).
  // Also true for a session that resumed here and has had nothing since.
  bool has_work(const std::string& session) const;
  // The pending escalations' wire objects, oldest first, at most `limit`; and one of them.
  std::vector<protocol::escalation_object> pending_objects(std::size_t limit) const;
  std::optional<protocol::escalation_object> pending_object(const std::string& id) const;

  std::shared_ptr<const routing_snapshot> routing() const { return routing_.routing.current(); }
  // Read-only, for what memory does not hold (resolved escalations). Thread-safe.
  log::log_reader& reader() noexcept { return *reader_; }
  // The agent side: attach, acknowledge, tool results.
  resolution_delivery& delivery() noexcept { return delivery_; }

  // Arms `e`'s deadline, `later` after it (escalation_sync: another instance's escalation, which
  // its own instance resolves first). With the book's lock held, or before serving.
  void arm_locked(pending_escalation& e, std::chrono::milliseconds later = {});

 private:
  // `caught_up`: a shared log was read again already for this call.
  void resolve_as(const std::string& id, protocol::resolve_input in, const std::string& reviewer, const char* by,
                  resolved_callback done, bool caught_up = false);
  // The deny of a misfit, with the book's lock held: none when it is being resolved already.
  std::optional<log::resolution_record> prepare_misfit_locked(const routing_snapshot& routing, pending_escalation& e,
                                                              const std::string& why, const std::string& reload_id);
  using snapshot = std::shared_ptr<const routing_snapshot>;
  void write_resolution(const std::string& id, log::resolution_record res, snapshot routing, resolved_callback done);
  // A misfit's deny written; `written` says whether it is durable (if not, its deadline resolves it).
  void write_misfit(const std::string& id, log::resolution_record res, snapshot routing, std::function<void(bool)> written);
  std::vector<protocol::escalation_object> pending_objects_locked(std::size_t limit) const;
  void finish(const std::string& id, log::resolution_record r, const snapshot& routing, result<void> written,
              resolved_callback done);
  void on_deadline(const std::string& id);
  // A deadline whose resolution could not be written (or waits for another's) is tried again.
  void retry_deadline_locked(pending_escalation& e);

  log::decision_log& log_;
  escalation_routing routing_;
  boost::asio::any_io_executor io_;
  std::unique_ptr<log::log_reader> reader_;
  mutable escalation_book book_;
  std::string last_reload_;  // the latest reload's id, for misfits raised after it (under the book's lock)
  // A shared log's (else null): made before delivery_, which asks it; stopped first (~escalation_desk).
  std::unique_ptr<escalation_sync> sync_;
  resolution_delivery delivery_;
};

}  // namespace baton
