#include "adapters/runtime/escalation_desk.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <future>

#include "adapters/protocol/escalation_views.hpp"
#include "adapters/protocol/frame_opener.hpp"
#include "adapters/runtime/escalation_rules.hpp"
#include "adapters/runtime/escalation_sync.hpp"
#include "adapters/runtime/agent_connection.hpp"
#include "adapters/runtime/tool_runs.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"

namespace baton {

namespace {

std::unique_ptr<log::log_reader> open_reader(const log::log_options& o) {
  auto reader = log::log_reader::open(o);
  if (!reader) throw error_exception(reader.error());
  return std::move(*reader);
}

// Writes `r` before anything is served (start-up), throwing when the log cannot take it.
template <class Record>
bool append_now(log::decision_log& log, Record r) {
  std::promise<result<void>> written;
  auto queued = log.append(std::move(r), [&written](result<void> ok) { written.set_value(ok); });
  const result<void> ok = queued ? written.get_future().get() : queued;
  if (!ok && ok.error().code != codes::duplicate_row) throw error_exception(ok.error());
  return bool(ok);
}

protocol::escalation_object pending_object_of(const pending_escalation& p) {
  return protocol::escalation_view(p.escalation.row, p.escalation.evidence);
}

}  // namespace

escalation_desk::escalation_desk(log::decision_log& log, escalation_routing routing, boost::asio::any_io_executor io)
    : log_(log), routing_(routing), io_(std::move(io)), reader_(open_reader(log.options())),
      sync_(log.options().shared() ? std::make_unique<escalation_sync>(book_, *this, delivery_, log, *reader_, io_) : nullptr),
      delivery_(book_, log, *reader_, routing.counters, routing.max_pending_tool_results, io_, sync_.get()) {}

escalation_desk::~escalation_desk() { sync_.reset(); }  // no other instance's change arrives after this

void escalation_desk::start() {
  const snapshot routing = routing_.routing.current();
  const std::int64_t now = unix_ms();
  auto pending = reader_->pending_escalations();
  if (!pending) throw error_exception(pending.error());
  auto unacknowledged = reader_->unacknowledged_resolutions();
  if (!unacknowledged) throw error_exception(unacknowledged.error());
  struct unacknowledged_resolution {
    log::resolution_record res;
    escalation esc;
    std::string tool_result;  // baton's tool_result frame of the tool it ran for it, when it did
  };
  std::vector<unacknowledged_resolution> waiting;
  // An MCP gateway session lives in one server's memory: after a restart nobody waits for its
  // escalations or acknowledges their resolutions. With a log of its own, baton knows none of
  // them is another instance's, and settles them now (a shared log's stay as they are).
  const bool own_log = !log_.options().shared();
  std::size_t settled = 0;
  for (log::escalation_history& h : *unacknowledged) {
    if (own_log && is_mcp_gateway_session(h.row.escalation.session)) {
      append_now(log_, log::delivery_record{h.resolution->id, unix_ms()});
      ++settled;
      continue;
    }
    if (h.tool_run) delivery_.remember_reported_locked(h.row.escalation.decision);  // the agent's next tool_result is a second
    waiting.push_back({std::move(*h.resolution), read_back(*routing, h.row), logged_tool_result(h.tool_run)});
  }

  std::size_t expired = 0;
  for (const log::escalation_row& row : *pending) {
    auto owned = std::make_unique<pending_escalation>();
    owned->escalation = read_back(*routing, row);
    const log::escalation_record& r = owned->escalation.row;
    // What the registry and policy served now no longer allow (a tool since denied, removed or
    // changed) is denied as a reload denies it; else its deadline, had it passed while baton was
    // down. Either is resolved now, durably, before anything is served.
    if (own_log && is_mcp_gateway_session(r.session)) {
      // The MCP call that waited was answered when baton stopped (or its connection died with
      // it): denied, and acknowledged for the client that will never come back for it.
      log::resolution_record res = misfit_denial(*routing, r, "denied at start-up: the MCP call that waited for it ended "
                                                              "with baton's stop (a call after the restart is a new decision)");
      if (append_now(log_, res)) {
        routing_.counters.resolution(res.outcome, res.by);
        append_now(log_, log::delivery_record{res.id, unix_ms()});
      }
      ++settled;
      continue;
    }
    const bool passed = r.deadline_ms <= now;
    const auto why = passed ? std::nullopt : misfit(*routing, r);
    if (!passed && !why) {
      book_.add_pending_locked(std::move(owned));
      continue;
    }
    log::resolution_record res = why ? misfit_denial(*routing, r,
                                                     "denied at start-up with the registry and policy since changed: " +
                                                         *why + " (what no longer fits is denied, as its deadline would deny it)")
                                     : deadline_resolution(*routing, r);
    const bool ok = append_now(log_, res);
    ++expired;
    if (!ok) continue;
    routing_.counters.resolution(res.outcome, res.by);
    // A tool baton runs itself runs as it would have at the deadline (once the I/O threads run).
    delivery_.run_if_baton_runs(*routing, res, r);
    waiting.push_back({std::move(res), owned->escalation, {}});
  }
  for (auto& [res, esc, tool_result] : waiting) {
    auto w = resolution_delivery::waiting_for(*routing, res, esc.row, resolution_object_of(*routing, res, esc.row));
    w.tool_result = std::move(tool_result);
    book_.waiting.emplace(res.id, std::move(w));
  }
  for (auto& [id, e] : book_.pending) arm_locked(*e);
  if (!book_.pending.empty() || !book_.waiting.empty() || expired || settled) {
    spdlog::info("escalations: {} pending, {} resolved at start-up (deadline passed, or no longer fits), {} resolutions "
                 "wait for their agent, {} of MCP calls that ended with the last stop settled",
                 book_.pending.size(), expired, book_.waiting.size(), settled);
  }
  if (sync_) sync_->start();
}

void escalation_desk::arm_locked(pending_escalation& e, std::chrono::milliseconds later) {
  e.timer = std::make_unique<boost::asio::steady_timer>(io_);
  e.timer->expires_after(std::chrono::milliseconds(std::max<std::int64_t>(0, e.escalation.row.deadline_ms - unix_ms())) + later);
  e.timer->async_wait([this, id = e.escalation.row.id](boost::system::error_code ec) {
    if (!ec) on_deadline(id);
  });
}

void escalation_desk::retry_deadline_locked(pending_escalation& e) {
  if (!e.timer) return;
  e.timer->expires_after(std::chrono::seconds(5));
  e.timer->async_wait([this, id = e.escalation.row.id](boost::system::error_code ec) {
    if (!ec) on_deadline(id);
  });
}

void escalation_desk::raised(const escalation& e) {
  const std::string& id = e.row.id;
  snapshot routing;
  std::optional<log::resolution_record> denied;
  {
    std::lock_guard lock(book_.mutex);
    if (sync_) sync_->settled_here_locked(id);
    // A shared log's catch-up may have taken it in already.
    if (book_.pending.contains(id)) return;
    auto owned = std::make_unique<pending_escalation>();
    owned->escalation = e;
    arm_locked(*owned);
    pending_escalation& raised_entry = *owned;
    book_.add_pending_locked(std::move(owned));
    book_.broadcast_locked(protocol::render(protocol::escalation_frame{pending_object_of(raised_entry)}));
    // Decided on a snapshot that a reload replaced before this row was durable: the reload's
    // sweep did not see it, so it is held against what serves now here.
    if (!last_reload_.empty()) {
      routing = routing_.routing.current();
      if (const auto why = misfit(*routing, e.row)) denied = prepare_misfit_locked(*routing, raised_entry, *why, last_reload_);
    }
  }
  if (denied) write_misfit(id, std::move(*denied), std::move(routing), [](bool) {});
}

void escalation_desk::write_misfit(const std::string& id, log::resolution_record res, snapshot routing,
                                   std::function<void(bool)> written) {
  write_resolution(id, std::move(res), std::move(routing), [id, written = std::move(written)](result<protocol::resolution_object> r) {
    // Still pending: its deadline resolves it.
    if (!r) spdlog::error("escalation {} no longer fits the reloaded routing, but its resolution is not in the log: {}",
                          id, r.error().message);
    written(bool(r));
  });
}

std::optional<log::resolution_record> escalation_desk::prepare_misfit_locked(const routing_snapshot& routing,
                                                                             pending_escalation& e, const std::string& why,
                                                                             const std::string& reload_id) {
  if (e.resolving) return std::nullopt;  // a reviewer's or its deadline's resolution is on its way
  e.resolving = true;
  return misfit_denial(routing, e.escalation.row,
                       "denied at reload " + reload_id + " of the registry and policy: " + why +
                           " (what no longer fits is denied, as its deadline would deny it)");
}

void escalation_desk::swap_and_resolve_misfits(std::shared_ptr<const routing_snapshot> next, const std::string& reload_id,
                                               std::function<void(std::size_t)> done) {
  const snapshot routing = next;
  std::vector<std::pair<std::string, log::resolution_record>> denied;
  {
    std::lock_guard lock(book_.mutex);
    routing_.routing.replace(std::move(next));
    last_reload_ = reload_id;
    for (const auto& [order, raised_entry] : book_.raised_order) {
      pending_escalation& e = *book_.pending.at(raised_entry->escalation.row.id);
      const auto why = misfit(*routing, e.escalation.row);
      if (!why) continue;
      if (auto res = prepare_misfit_locked(*routing, e, *why, reload_id)) denied.emplace_back(e.escalation.row.id, std::move(*res));
    }
  }
  if (denied.empty()) return done(0);
  // Told once every row is durable (or refused).
  struct tally {
    std::mutex mutex;
    std::size_t left = 0, resolved = 0;
    std::function<void(std::size_t)> done;
  };
  auto t = std::make_shared<tally>();
  t->left = denied.size();
  t->done = std::move(done);
  for (auto& [id, res] : denied) {
    write_misfit(id, std::move(res), routing, [t](bool written) {
      std::size_t left = 0, resolved = 0;
      {
        std::lock_guard lock(t->mutex);
        if (written) ++t->resolved;
        left = --t->left;
        resolved = t->resolved;
      }
      if (left == 0) t->done(resolved);
    });
  }
}

void escalation_desk::on_deadline(const std::string& id) {
  snapshot routing;
  log::resolution_record res;
  {
    std::lock_guard lock(book_.mutex);
    // Read under the lock a reload swaps under: prepared here, it is either seen by the reload's
    // sweep or made against the new snapshot.
    routing = routing_.routing.current();
    const auto it = book_.pending.find(id);
    if (it == book_.pending.end()) return;
    if (it->second->resolving) {
      // A reviewer's or a reload's resolution is being written; should it fail, the escalation is
      // still pending and needs its deadline again.
      retry_deadline_locked(*it->second);
      return;
    }
    res = deadline_resolution(*routing, it->second->escalation.row);
    it->second->resolving = true;
  }
  write_resolution(id, std::move(res), routing, [this, id](result<protocol::resolution_object> r) {
    if (r) return;
    // Another instance's desk wrote it first (its deadline ran there too): finish() took its
    // resolution in.
    if (sync_ && r.error().code == codes::already_resolved) return;
    // Not in the log (a full or failing log): the deadline is tried again in 5 s.
    spdlog::error("escalation {}: its deadline passed, but its resolution is not in the log ({}); retrying in 5 s", id,
                  r.error().message);
    std::lock_guard lock(book_.mutex);
    if (const auto it = book_.pending.find(id); it != book_.pending.end()) retry_deadline_locked(*it->second);
  });
}

void escalation_desk::resolve(const std::string& id, protocol::resolve_input in, const std::string& reviewer,
                              resolved_callback done) {
  resolve_as(id, std::move(in), reviewer, "reviewer", std::move(done));
}

void escalation_desk::resolve_body(const std::string& id, std::string_view body, const std::string& reviewer,
                                   resolved_callback done) {
  auto parsed = protocol::read_json(body, "body");
  if (!parsed) return done(parsed.error());
  auto in = protocol::parse_resolve_input(*parsed);
  if (!in) return done(in.error());
  resolve(id, std::move(*in), reviewer, std::move(done));
}

void escalation_desk::on_review_frame(const std::shared_ptr<review_listener>& l, std::string_view text,
                                      const std::string& reviewer) {
  json ref;
  auto f = protocol::parse_review_frame(text, ref);
  if (!f) return l->send(protocol::render_error_frame(ref, f.error()));
  resolve(f->escalation, std::move(f->input), reviewer, [l, ref](result<protocol::resolution_object> r) {
    if (!r) return l->send(protocol::render_error_frame(ref, r.error()));
    l->send(protocol::render(protocol::resolve_result_frame{ref, std::move(*r)}));
  });
}

void escalation_desk::resolve_as(const std::string& id, protocol::resolve_input in, const std::string& reviewer,
                                 const char* by, resolved_callback done, bool caught_up) {
  snapshot routing;
  result<log::resolution_record> prepared = no_escalation(id);
  {
    std::lock_guard lock(book_.mutex);
    routing = routing_.routing.current();  // under the lock a reload swaps under (on_deadline)
    const auto it = book_.pending.find(id);
    if (it != book_.pending.end()) {
      if (it->second->resolving) {
        prepared = make_error(409, codes::resolution_in_progress,
                              "escalation " + id + " is being resolved by another call; read it again in a moment");
      } else {
        prepared = prepare_resolution(*routing, it->second->escalation.row, std::move(in), reviewer, by);
        if (prepared) it->second->resolving = true;
      }
    }
  }
  if (prepared) return write_resolution(id, std::move(*prepared), routing, std::move(done));
  if (prepared.error().code != codes::not_found) return done(prepared.error());
  if (sync_ && !caught_up) {
    // Raised on another instance a moment ago, perhaps, its notification not here yet: read it,
    // then look again.
    sync_->take_in_escalation(id);
    return resolve_as(id, std::move(in), reviewer, by, std::move(done), true);
  }
  // Not pending here: resolved already, or not (yet) an escalation at all.
  auto found = reader_->escalation(id);
  if (!found) return done(found.error());
  if (!*found || !(*found)->resolution) return done(no_escalation(id));
  const log::resolution_record& r = *(*found)->resolution;
  done(make_error(409, codes::already_resolved,
                  "escalation " + id + " is already resolved: " + r.outcome + (r.tool.empty() ? "" : " " + r.tool) +
                      " by " + r.reviewer + " at " + iso_utc(r.created_ms) + " (resolution " + r.id + ")"));
}

void escalation_desk::write_resolution(const std::string& id, log::resolution_record res, snapshot routing,
                                       resolved_callback done) {
  log::resolution_record copy = res;
  auto queued = log_.append(std::move(copy), [this, id, res, routing, done](result<void> ok) mutable {
    boost::asio::post(io_, [this, id, res = std::move(res), routing = std::move(routing), ok, done = std::move(done)]() mutable {
      finish(id, std::move(res), routing, ok, std::move(done));
    });
  });
  if (!queued) finish(id, std::move(res), routing, queued, std::move(done));
}

void escalation_desk::finish(const std::string& id, log::resolution_record r, const snapshot& routing,
                             result<void> written, resolved_callback done) {
  std::optional<escalation> e;
  std::optional<waiting_resolution> w;
  protocol::resolution_object object;
  std::optional<error> failed;
  bool read_winner = false;
  {
    std::lock_guard lock(book_.mutex);
    const auto it = book_.pending.find(id);
    if (it == book_.pending.end()) {
      failed = make_error(409, codes::already_resolved, "escalation " + id + " is already resolved");
    } else if (!written && written.error().code != codes::duplicate_row) {
      it->second->resolving = false;
      failed = written.error();
    } else if (!written && sync_) {
      // Another instance's resolution won: read it, and it is taken in as any other instance's
      // (reviewers told, the agent's session given it).
      it->second->resolving = false;
      failed = make_error(409, codes::already_resolved, "escalation " + id + " is already resolved");
      read_winner = true;
    } else {
      e = std::move(it->second->escalation);
      book_.remove_pending_locked(it);
      if (sync_) {
        sync_->settled_here_locked(id);
        sync_->settled_here_locked(r.id);
      }
      if (!written) {
        // Another baton on the same log resolved it first.
        failed = make_error(409, codes::already_resolved, "escalation " + id + " is already resolved");
      } else {
        object = resolution_object_of(*routing, r, e->row);
        w = resolution_delivery::waiting_for(*routing, r, e->row, object);
        w->resolved_here = true;
        book_.waiting.emplace(r.id, *w);
        // Under the lock, so that reviewers see `resolved` after the `escalation` it follows.
        book_.broadcast_locked(protocol::render(protocol::resolved_frame{protocol::escalation_view(e->row, e->evidence, object)}));
      }
    }
  }
  if (read_winner) sync_->take_in_escalation(id);
  if (failed) return done(std::move(*failed));
  routing_.counters.resolution(r.outcome, r.by);
  spdlog::info("escalation {} resolved by {} ({}): {} {}", id, r.reviewer, r.by, r.outcome, r.tool);
  delivery_.deliver(*w);
  // A tool baton runs itself runs now; the agent runs its own once it has the resolution.
  delivery_.run_if_baton_runs(*routing, r, e->row);
  done(result<protocol::resolution_object>(boost::system::in_place_value, std::move(object)));
}

void escalation_desk::add_listener(const std::shared_ptr<review_listener>& l) {
  std::lock_guard lock(book_.mutex);
  const protocol::snapshot_frame snapshot{pending_objects_locked(max_listed)};
  // send() only queues: under the lock, nothing the desk says later can overtake the snapshot.
  l->send(protocol::render(snapshot));
  book_.listeners.push_back(l);
}

std::size_t escalation_desk::pending() const {
  std::lock_guard lock(book_.mutex);
  return book_.pending.size();
}

bool escalation_desk::has_work(const std::string& session) const {
  std::lock_guard lock(book_.mutex);
  // The book keeps a session's connection from its first escalation (or resume) until it has
  // no work left (forget_if_done_locked): a lookup, not has_work_locked's scan, which the session
  // table asks under load for every session it might evict.
  return book_.sessions.contains(session) || book_.tools_running.contains(session);
}

std::vector<protocol::escalation_object> escalation_desk::pending_objects(std::size_t limit) const {
  std::lock_guard lock(book_.mutex);
  return pending_objects_locked(limit);
}

std::vector<protocol::escalation_object> escalation_desk::pending_objects_locked(std::size_t limit) const {
  std::vector<protocol::escalation_object> out;
  for (const auto& [order, e] : book_.raised_order) {
    if (out.size() == limit) break;
    out.push_back(pending_object_of(*e));
  }
  return out;
}

std::optional<protocol::escalation_object> escalation_desk::pending_object(const std::string& id) const {
  std::lock_guard lock(book_.mutex);
  const auto it = book_.pending.find(id);
  if (it == book_.pending.end()) return std::nullopt;
  return pending_object_of(*it->second);
}

}  // namespace baton
