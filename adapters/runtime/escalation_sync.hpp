// The escalation desk on a log several instances share (PostgreSQL): the database is the truth.
// Each desk mirrors every instance's escalations and resolutions, hearing of other instances' rows
// as they commit (LISTEN: the notification names them), reading the log again for a resume, a
// resolve of an id it does not know, and after a lost connection, and asking every 2 s for the
// runs of tools other instances ran for resolutions waiting here (no notification names them).
// The database takes one resolution per escalation, whichever instance writes it first.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "adapters/log/change_feed.hpp"
#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "adapters/runtime/escalation_book.hpp"
#include "adapters/runtime/routing.hpp"

namespace baton {

class escalation_desk;
class resolution_delivery;

class escalation_sync {
 public:
  // Keeps references to all of these; used only once start() is called.
  escalation_sync(escalation_book& book, escalation_desk& desk, resolution_delivery& delivery, log::decision_log& log,
                  log::log_reader& reader, boost::asio::any_io_executor io);
  ~escalation_sync();

  // Listens for other instances' rows (after the desk has read the log at start-up).
  void start();

  // Reads the log's pending escalations and unacknowledged resolutions (all, or `session`'s) and
  // takes in what other instances wrote. Blocking.
  void catch_up(const std::optional<std::string>& session = {});
  // Reads escalation `id` (with its resolution) and takes it in: raised or resolved elsewhere a
  // moment ago, its notification not here yet.
  void take_in_escalation(const std::string& id);
  // The same for the escalation of resolution `id`.
  void take_in_resolution(const std::string& id);
  // This desk settled `id` (an escalation or resolution it raised, resolved or saw acknowledged):
  // a catch-up that read the log before it does not undo it. With the book's lock held.
  void settled_here_locked(const std::string& id);

 private:
  // What the log says of some escalations and resolutions, read after a point.
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
  // Its steps, with the book's lock held: escalations raised elsewhere; resolutions made
  // elsewhere (delivered here when their session is connected here); acknowledgements, and what
  // a whole view no longer holds.
  struct intake;
  void take_in_pending_locked(intake& in);
  void take_in_resolutions_locked(intake& in);
  void take_in_acknowledgements_locked(intake& in);
  // Whether this desk settled `id` after the reads that began at `started`: then it knows better.
  bool settled_since_locked(const std::string& id, std::uint64_t started) const;
  static std::string resolved_frame(const routing_snapshot& routing, const pending_escalation& p,
                                    const log::resolution_record& res);
  std::uint64_t begin_read();
  void catch_up_later();  // from the change feed's thread: catch_up() on an I/O thread, coalesced
  // A notification's lines ("e ID", "v ID ESCALATION", "d RESOLUTION"): reads what they name
  // and takes it in. changes_later() queues a payload from the change feed's thread; they are
  // taken in on an I/O thread in the order they came (commit order).
  void take_in_named(const std::string& lines);
  void changes_later(const std::string& payload);
  // Reads the tool runs of resolutions waiting here whose tool baton runs and has not reported.
  void refresh_tool_results();

  escalation_book& book_;
  escalation_desk& desk_;
  resolution_delivery& delivery_;
  log::decision_log& log_;
  log::log_reader& reader_;
  boost::asio::any_io_executor io_;
  std::mutex catch_up_mutex_;  // one read at a time
  // Under the book's lock: the catch-ups begun, and what this desk settled (id → the count then).
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
