#include "adapters/runtime/escalation_sync.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <set>

#include "adapters/protocol/escalation_views.hpp"
#include "adapters/runtime/escalation_desk.hpp"
#include "adapters/runtime/escalation_rules.hpp"
#include "adapters/runtime/resolution_delivery.hpp"
#include "adapters/runtime/tool_runs.hpp"

namespace baton {

escalation_sync::escalation_sync(escalation_book& book, escalation_desk& desk, resolution_delivery& delivery,
                                 log::decision_log& log, log::log_reader& reader, boost::asio::any_io_executor io)
    : book_(book), desk_(desk), delivery_(delivery), log_(log), reader_(reader), io_(std::move(io)) {}

escalation_sync::~escalation_sync() = default;

void escalation_sync::start() {
  // Other instances' rows as they commit; all of it again after a lost connection; every 2 s the
  // runs of tools other instances ran for resolutions waiting here.
  feed_ = log::change_feed::start(
      log_.options(),
      [this](log::change_feed::event e, const std::string& payload) {
        if (e == log::change_feed::event::notified) {
          changes_later(payload);
        } else if (e == log::change_feed::event::connected) {
          catch_up_later();
        } else if (catch_up_needed_.exchange(false)) {
          catch_up_later();
        } else {
          boost::asio::post(io_, [this] { refresh_tool_results(); });
        }
      },
      std::chrono::seconds(2));
}

void escalation_sync::settled_here_locked(const std::string& id) { settled_here_[id] = catch_ups_; }

void escalation_sync::refresh_tool_results() {
  std::string lines;
  {
    std::lock_guard lock(book_.mutex);
    for (auto& [id, w] : book_.waiting) {
      // A minute of asking; after that its run comes with a resume.
      if (w.baton_runs && w.tool_result.empty() && !w.resolved_here && w.polls < 30) {
        ++w.polls;
        lines += "v " + id + " " + w.escalation + "\n";
      }
    }
  }
  if (!lines.empty()) take_in_named(lines);
}

void escalation_sync::catch_up_later() {
  if (catch_up_queued_.exchange(true)) return;
  boost::asio::post(io_, [this] {
    catch_up_queued_ = false;
    catch_up();
  });
}

void escalation_sync::changes_later(const std::string& payload) {
  // The first line names the instance that wrote the rows: this desk knows its own.
  const auto end = payload.find('\n');
  if (end == std::string::npos || std::string_view(payload).substr(0, end) == log_.options().instance) return;
  {
    std::lock_guard lock(changes_mutex_);
    changes_.push_back(payload.substr(end + 1));
    if (draining_) return;  // the drain on its way takes it
    draining_ = true;
  }
  // One drain at a time, so they are taken in in the order they came.
  boost::asio::post(io_, [this] {
    for (;;) {
      std::string next;
      {
        std::lock_guard lock(changes_mutex_);
        if (changes_.empty()) {
          draining_ = false;
          return;
        }
        next = std::move(changes_.front());
        changes_.pop_front();
      }
      take_in_named(next);
    }
  });
}

std::uint64_t escalation_sync::begin_read() {
  std::lock_guard lock(book_.mutex);
  return ++catch_ups_;
}

void escalation_sync::catch_up(const std::optional<std::string>& session) {
  std::lock_guard one_at_a_time(catch_up_mutex_);
  log_view view;
  view.whole = session ? log_view::scope::session : log_view::scope::all;
  if (session) view.session = *session;
  const std::uint64_t started = begin_read();
  // The resolutions first: one made between the two reads then shows as the escalation gone,
  // which is read again, rather than as a pending escalation with an unknown resolution.
  auto unacknowledged = reader_.unacknowledged_resolutions(session);
  auto pending = unacknowledged ? reader_.pending_escalations(session) : unacknowledged.error();
  if (!pending || !unacknowledged) {
    spdlog::warn("escalations: cannot read the shared log for other instances' changes: {}",
                 (unacknowledged ? pending.error() : unacknowledged.error()).message);
    catch_up_needed_ = true;  // tried again at the next tick
    return;
  }
  view.pending = std::move(*pending);
  view.unacknowledged = std::move(*unacknowledged);
  take_in(view, started);
}

void escalation_sync::take_in_escalation(const std::string& id) { take_in_named("e " + id); }

void escalation_sync::take_in_resolution(const std::string& id) {
  if (auto escalation = reader_.escalation_of(id); escalation && *escalation) take_in_named("v " + id + " " + **escalation);
}

void escalation_sync::take_in_named(const std::string& lines) {
  std::lock_guard one_at_a_time(catch_up_mutex_);
  log_view view;
  const std::uint64_t started = begin_read();
  std::size_t at = 0;
  while (at < lines.size()) {
    std::size_t end = lines.find('\n', at);
    if (end == std::string::npos) end = lines.size();
    const std::string_view line(lines.data() + at, end - at);
    at = end + 1;
    if (line.size() < 3 || line[1] != ' ') continue;
    std::string_view rest = line.substr(2);
    if (line[0] == 'd') {
      view.acknowledged.emplace_back(rest);
      continue;
    }
    // "e ID" or "v ID ESCALATION": the escalation, read with its resolution.
    if (line[0] == 'v') rest = rest.substr(std::min(rest.size(), rest.find(' ') + 1));
    if (line[0] != 'e' && line[0] != 'v') continue;
    auto found = reader_.escalation(std::string(rest));
    if (!found) {
      spdlog::warn("escalations: cannot read escalation {} another instance wrote: {}", rest, found.error().message);
      catch_up_later();  // all of it, when the log answers again
      continue;
    }
    if (!*found) continue;
    if ((*found)->resolution && (*found)->acknowledged) {
      view.acknowledged.push_back((*found)->resolution->id);
      view.settled.push_back(std::move(**found));
    } else if ((*found)->resolution) {
      view.unacknowledged.push_back(std::move(**found));
    } else {
      view.pending.push_back(std::move((*found)->row));
    }
  }
  take_in(view, started);
}

// One take_in: what the log's view says, against what this desk holds, and what is to be done once
// the book's lock is released.
struct escalation_sync::intake {
  const log_view& view;
  std::uint64_t started;  // begin_read() before the reads: what this desk settled since wins
  const routing_snapshot& routing;
  std::set<std::string> pending_in_log, waiting_in_log;
  std::vector<waiting_resolution> to_deliver;
  std::vector<std::pair<std::shared_ptr<agent_connection>, std::string>> tool_results;
  std::vector<std::string> gone;  // resolved and acknowledged elsewhere: their `resolved` frames

  // Whether the view holds all there is of a session's escalations.
  bool whole(const std::string& session) const {
    return view.whole == log_view::scope::all || (view.whole == log_view::scope::session && session == view.session);
  }
};

bool escalation_sync::settled_since_locked(const std::string& id, std::uint64_t started) const {
  const auto it = settled_here_.find(id);
  return it != settled_here_.end() && it->second >= started;
}

std::string escalation_sync::resolved_frame(const routing_snapshot& routing, const pending_escalation& p,
                                            const log::resolution_record& res) {
  const auto object = resolution_object_of(routing, res, p.escalation.row);
  return protocol::render(protocol::resolved_frame{protocol::escalation_view(p.escalation.row, p.escalation.evidence, object)});
}

void escalation_sync::take_in(const log_view& view, std::uint64_t started) {
  const std::shared_ptr<const routing_snapshot> routing = desk_.routing();
  intake in{view, started, *routing, {}, {}, {}, {}, {}};
  {
    std::lock_guard lock(book_.mutex);
    take_in_pending_locked(in);
    take_in_resolutions_locked(in);
    take_in_acknowledgements_locked(in);
    // Reads are one at a time: what was settled before this one began, no later read can undo.
    std::erase_if(settled_here_, [&](const auto& s) { return s.second < started; });
  }
  for (const waiting_resolution& w : in.to_deliver) delivery_.deliver(w);
  for (auto& [conn, frame] : in.tool_results) {
    boost::asio::post(conn->strand(), [conn, frame = std::move(frame)]() mutable { conn->send(std::move(frame)); });
  }
  for (const std::string& id : in.gone) {
    auto found = reader_.escalation(id);
    if (!found || !*found || !(*found)->resolution) continue;
    const std::string frame = protocol::render(protocol::resolved_frame{history_object(*routing, **found)});
    std::lock_guard lock(book_.mutex);
    book_.broadcast_locked(frame);
  }
}

void escalation_sync::take_in_pending_locked(intake& in) {
  for (const log::escalation_row& row : in.view.pending) {
    const std::string& id = row.escalation.id;
    in.pending_in_log.insert(id);
    if (book_.pending.contains(id) || settled_since_locked(id, in.started)) continue;
    // Raised on another instance: shown here, its deadline armed here too (the database takes
    // one resolution, whichever desk writes first).
    auto owned = std::make_unique<pending_escalation>();
    owned->escalation = read_back(in.routing, row);
    // Its own instance, when alive, resolves it at the deadline; the others 2 s later, if it did not.
    desk_.arm_locked(*owned, std::chrono::seconds(2));
    book_.broadcast_locked(protocol::render(
        protocol::escalation_frame{protocol::escalation_view(owned->escalation.row, owned->escalation.evidence)}));
    book_.add_pending_locked(std::move(owned));
  }
}

void escalation_sync::take_in_resolutions_locked(intake& in) {
  for (const log::escalation_history& h : in.view.unacknowledged) {
    const log::resolution_record& res = *h.resolution;
    in.waiting_in_log.insert(res.id);
    if (const auto it = book_.pending.find(res.escalation); it != book_.pending.end()) {
      // Resolved on another instance. One this desk is writing a resolution for gets
      // DUPLICATE_ROW, and the desk's finish settles it.
      if (it->second->resolving) continue;
      book_.broadcast_locked(resolved_frame(in.routing, *it->second, res));
      book_.remove_pending_locked(it);
    }
    std::string tool_result = logged_tool_result(h.tool_run);
    if (h.tool_run) delivery_.remember_reported_locked(h.row.escalation.decision);  // reported, or run, on any instance
    auto w = book_.waiting.find(res.id);
    if (w == book_.waiting.end()) {
      if (settled_since_locked(res.id, in.started)) continue;  // acknowledged here since
      waiting_resolution made = resolution_delivery::waiting_for(in.routing, res, h.row.escalation,
                                                                 resolution_object_of(in.routing, res, h.row.escalation));
      made.tool_result = std::move(tool_result);
      in.to_deliver.push_back(book_.waiting.emplace(res.id, std::move(made)).first->second);
    } else if (w->second.tool_result.empty() && !tool_result.empty()) {
      // The tool another instance ran for it has run: a session connected here hears of it.
      w->second.tool_result = tool_result;
      if (auto conn = book_.connection_locked(w->second.session)) in.tool_results.emplace_back(std::move(conn), std::move(tool_result));
    }
  }
  // Resolved and acknowledged elsewhere before this desk heard of the resolution.
  for (const log::escalation_history& h : in.view.settled) {
    if (const auto it = book_.pending.find(h.row.escalation.id); it != book_.pending.end() && !it->second->resolving) {
      book_.broadcast_locked(resolved_frame(in.routing, *it->second, *h.resolution));
      book_.remove_pending_locked(it);
    }
  }
}

void escalation_sync::take_in_acknowledgements_locked(intake& in) {
  // Acknowledged on another instance: named, or missing from a whole view.
  const auto drop_waiting = [&](std::map<std::string, waiting_resolution>::iterator it) {
    const std::string session = it->second.session;
    auto next = book_.waiting.erase(it);
    book_.forget_if_done_locked(session);
    return next;
  };
  for (const std::string& id : in.view.acknowledged) {
    if (const auto it = book_.waiting.find(id);
        it != book_.waiting.end() && !it->second.acknowledged && !settled_since_locked(id, in.started)) {
      drop_waiting(it);
    }
  }
  for (auto it = book_.waiting.begin(); it != book_.waiting.end();) {
    if (!in.whole(it->second.session) || in.waiting_in_log.contains(it->first) || it->second.acknowledged ||
        settled_since_locked(it->first, in.started)) {
      ++it;
    } else {
      it = drop_waiting(it);
    }
  }
  // Resolved and acknowledged on another instance between two reads.
  for (auto it = book_.pending.begin(); it != book_.pending.end();) {
    const auto next = std::next(it);
    if (in.whole(it->second->escalation.row.session) && !in.pending_in_log.contains(it->first) && !it->second->resolving &&
        !settled_since_locked(it->first, in.started)) {
      in.gone.push_back(it->first);
      book_.remove_pending_locked(it);
    }
    it = next;
  }
}

}  // namespace baton
