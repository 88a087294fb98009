#include "adapters/runtime/escalation_desk.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <set>

#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/runtime/escalation_evidence.hpp"
#include "adapters/runtime/tool_runs.hpp"
#include "core/ids.hpp"
#include "tools/arguments.hpp"

namespace baton {

namespace {

constexpr const char* deadline_reviewer = "baton";

error not_found(const std::string& id) {
  return make_error(404, "NOT_FOUND", "no escalation " + id);
}

// A refused field of a resolution, named in `loc` as the agent protocol names a frame's fields.
error invalid_field(json loc, std::string type, std::string msg) {
  return make_error(422, "INVALID_RESOLUTION", std::vector<issue>{issue{std::move(loc), std::move(msg), std::move(type), nullptr}});
}

// The API key a logged session belongs to: "KEY/SESSION" (a session id holds no '/', a key name
// may), "" without keys.
std::string_view owner_of(std::string_view session) {
  const auto slash = session.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : session.substr(0, slash);
}

// A JSON text the log holds; null when it does not parse (a row written by hand).
json parsed(std::string_view text) {
  json out;
  json_parse_error err;
  return parse_json(text, out, err, json_parse_options{}) ? out : json();
}

protocol::tool_run_object tool_run_object_of(const log::tool_run_record& r) {
  return {r.id, r.tool, r.executor, r.ok, r.error_code, r.detail, r.output, r.attempts, r.duration_ms, r.created_ms};
}

}  // namespace

// A pending escalation, with its deadline's timer.
struct escalation_desk::entry {
  baton::escalation escalation;
  std::uint64_t order = 0;  // in raised_order_
  std::unique_ptr<boost::asio::steady_timer> timer;
  bool resolving = false;  // its resolution row is on its way to the log
};

// A resolution the agent has not acknowledged.
struct escalation_desk::waiting {
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

namespace {

// A read-only connection to the log for what memory does not hold (resolved escalations).
std::unique_ptr<log::log_reader> open_reader(const log::log_options& o) {
  auto reader = log::log_reader::open(o);
  if (!reader) throw error_exception(reader.error());
  return std::move(*reader);
}

}  // namespace

escalation_desk::escalation_desk(log::decision_log& log, escalation_routing routing, boost::asio::any_io_executor io)
    : log_(log), routing_(routing), io_(std::move(io)), reader_(open_reader(log.options())), shared_(log.options().shared()) {}

escalation_desk::~escalation_desk() = default;

std::string escalation_desk::executor_kind(const routing_snapshot& routing, const std::string& tool) {
  const auto it = routing.executors.find(tool);
  return it == routing.executors.end() ? "agent" : std::string(it->second->kind());
}

tools::executor* escalation_desk::executor_for(const routing_snapshot& routing, const log::resolution_record& r) {
  if (r.outcome != "execute") return nullptr;
  const auto it = routing.executors.find(r.tool);
  return it == routing.executors.end() ? nullptr : it->second.get();
}

escalation_desk::waiting escalation_desk::waiting_for(const routing_snapshot& routing, const log::resolution_record& r,
                                                      const log::escalation_record& e,
                                                      const protocol::resolution_object& resolution) {
  waiting w;
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

void escalation_desk::run_if_baton_runs(const routing_snapshot& routing, const log::resolution_record& r,
                                        const log::escalation_record& e) {
  if (tools::executor* ex = executor_for(routing, r); ex && !ex->agent_runs()) run_tool(*ex, e, r.id, r.tool, r.arguments);
}

protocol::resolution_object escalation_desk::resolution_object_of(const routing_snapshot& routing,
                                                                   const log::resolution_record& r,
                                                                   const log::escalation_record& e) {
  const tools::executor* ex = executor_for(routing, r);
  return {r.id,        r.escalation, e.decision, e.session, e.turn,   r.outcome,    r.tool,
          r.arguments, r.reason,     r.reviewer, r.by,      r.forced, r.created_ms,
          ex ? std::optional<std::string>(ex->kind()) : std::nullopt};
}

escalation escalation_desk::read_back(const routing_snapshot& routing, const log::escalation_row& row) {
  return {row.escalation, escalation_evidence(row.escalation, row.decision_answers, row.decision_error,
                                              routing.registry, routing.policy)};
}

protocol::escalation_object escalation_desk::history_object(const routing_snapshot& routing,
                                                            const log::escalation_history& h) {
  const escalation e = read_back(routing, h.row);
  if (!h.resolution) return escalation_object_of(e);
  return escalation_object_of(e, resolution_object_of(routing, *h.resolution, e.row),
                              h.tool_run ? std::optional(tool_run_object_of(*h.tool_run)) : std::nullopt);
}

protocol::escalation_object escalation_desk::escalation_object_of(const escalation& e,
                                                                  std::optional<protocol::resolution_object> resolution,
                                                                  std::optional<protocol::tool_run_object> tool_run) {
  const log::escalation_record& r = e.row;
  return {r.id,          r.decision,      r.session,   r.turn,          r.created_ms,  r.deadline_ms,
          r.on_deadline, r.reason,        r.question,  r.tool,          r.arguments,   r.confidence,
          r.candidates,  parsed(r.state), e.evidence,  r.registry_hash, r.policy_hash, std::move(resolution),
          std::move(tool_run)};
}

escalation escalation_desk::make_escalation(const routing_snapshot& routing, const log::decision_record& d,
                                           const response* answers, std::string state) const {
  log::escalation_record r;
  r.id = new_id('e');
  r.decision = d.id;
  r.session = d.session;
  r.turn = d.turn;
  r.created_ms = unix_ms();
  const policies::escalation_terms terms = policies::escalation_terms_for(routing.policy, d.tool, d.lane);
  r.deadline_ms = r.created_ms + terms.deadline_s * 1000;
  r.on_deadline = terms.execute_on_deadline ? "execute" : "deny";
  r.reason = d.lane;
  r.tool = d.tool;
  r.arguments = d.arguments;
  r.confidence = d.confidence;
  r.state = std::move(state);
  r.registry_hash = d.registry_hash;
  r.policy_hash = d.policy_hash;
  if (d.tool.empty()) {
    r.question = "The engine could not decide (" + (d.error_code.empty() ? std::string("no answer") : d.error_code) +
                 "). Which tool, if any, should run?";
  } else if (policies::is_audit_lane(d.lane)) {
    r.question = "Audit: the policy would have run " + d.tool + " at confidence " +
                 render_json(json(round_decimals(d.confidence, 4)), false) +
                 "; this decision was drawn for a person to check. Should it run?";
  } else {
    r.question = "Should " + d.tool + " run? It was escalated by " + d.lane + " at confidence " +
                 render_json(json(round_decimals(d.confidence, 4)), false) + ".";
  }
  if (answers) {
    for (const auto& [id, a] : answers->answers) {
      const auto* choice = std::get_if<choice_answer>(&a);
      if (id != tools::tool_question_id || !choice) continue;
      std::vector<std::pair<std::string, double>> sorted = choice->probabilities;
      std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
      for (const auto& [tool, p] : sorted) {
        std::string description;
        if (tool == tools::finish_option && routing.registry.finish) description = *routing.registry.finish;
        if (const tools::tool* t = tools::find_tool(routing.registry, tool)) description = t->description;
        r.candidates.push_back({{"tool", tool}, {"description", description}, {"probability", round_decimals(p, 4)}});
      }
    }
  }
  json evidence = escalation_evidence(r, answers, d.error_code, routing.registry, routing.policy);
  return {std::move(r), std::move(evidence)};
}

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
  for (log::escalation_history& h : *unacknowledged) {
    if (h.tool_run) remember_reported(h.row.escalation.decision);  // the agent's next tool_result is a second
    waiting.push_back({std::move(*h.resolution), read_back(*routing, h.row), logged_tool_result(h.tool_run)});
  }

  std::size_t expired = 0;
  for (const log::escalation_row& row : *pending) {
    auto owned = std::make_unique<entry>();
    owned->escalation = read_back(*routing, row);
    // What the registry and policy served now no longer allow (a tool since denied, removed or
    // changed) is denied as a reload denies it; else its deadline, had it passed while baton was
    // down. Either is resolved now, durably, before anything is served.
    const bool passed = owned->escalation.row.deadline_ms <= now;
    const auto why = passed ? std::nullopt : misfit(*routing, owned->escalation.row);
    if (!passed && !why) {
      add_pending(std::move(owned));
      continue;
    }
    log::resolution_record res;
    if (why) {
      protocol::resolve_input in;
      in.reason = "denied at start-up with the registry and policy since changed: " + *why +
                  " (what no longer fits is denied, as its deadline would deny it)";
      in.force = true;
      res = std::move(*prepare(*routing, *owned, std::move(in), deadline_reviewer, "deadline"));  // a forced deny
    } else {
      res = prepare_deadline(*routing, *owned);
    }
    std::promise<result<void>> written;
    auto queued = log_.append(res, [&written](result<void> ok) { written.set_value(ok); });
    const result<void> ok = queued ? written.get_future().get() : queued;
    if (!ok && ok.error().code != "DUPLICATE_ROW") throw error_exception(ok.error());
    ++expired;
    if (!ok) continue;
    routing_.counters.resolution(res.outcome, res.by);
    // A tool baton runs itself runs as it would have at the deadline (once the I/O threads run).
    run_if_baton_runs(*routing, res, owned->escalation.row);
    waiting.push_back({std::move(res), owned->escalation, {}});
  }
  for (auto& [res, esc, tool_result] : waiting) {
    auto w = waiting_for(*routing, res, esc.row, resolution_object_of(*routing, res, esc.row));
    w.tool_result = std::move(tool_result);
    waiting_.emplace(res.id, std::move(w));
  }
  for (auto& [id, e] : pending_) arm(*e);
  if (!pending_.empty() || !waiting_.empty() || expired) {
    spdlog::info("escalations: {} pending, {} resolved at start-up (deadline passed, or no longer fits), {} resolutions "
                 "wait for their agent", pending_.size(), expired, waiting_.size());
  }
  // Other instances' rows as they commit; all of it again after a lost connection; every 2 s the
  // runs of tools other instances ran for resolutions waiting here (no notification names them).
  if (shared_) {
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
}

void escalation_desk::refresh_tool_results() {
  std::string lines;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, w] : waiting_) {
      // A minute of asking; after that its run comes with a resume.
      if (w.baton_runs && w.tool_result.empty() && !w.resolved_here && w.polls < 30) {
        ++w.polls;
        lines += "v " + id + " " + w.escalation + "\n";
      }
    }
  }
  if (!lines.empty()) take_in_named(lines);
}

void escalation_desk::catch_up_later() {
  if (catch_up_queued_.exchange(true)) return;
  boost::asio::post(io_, [this] {
    catch_up_queued_ = false;
    catch_up();
  });
}

void escalation_desk::changes_later(const std::string& payload) {
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

void escalation_desk::remove_pending_locked(std::map<std::string, std::unique_ptr<entry>>::iterator it) {
  if (it->second->timer) it->second->timer->cancel();
  raised_order_.erase(it->second->order);
  pending_.erase(it);
}

std::uint64_t escalation_desk::begin_read() {
  std::lock_guard lock(mutex_);
  return ++catch_ups_;
}

void escalation_desk::catch_up(const std::optional<std::string>& session) {
  if (!shared_) return;
  std::lock_guard one_at_a_time(catch_up_mutex_);
  log_view view;
  view.whole = session ? log_view::scope::session : log_view::scope::all;
  if (session) view.session = *session;
  const std::uint64_t started = begin_read();
  // The resolutions first: one made between the two reads then shows as the escalation gone,
  // which is read again, rather than as a pending escalation with an unknown resolution.
  auto unacknowledged = reader_->unacknowledged_resolutions(session);
  auto pending = unacknowledged ? reader_->pending_escalations(session) : unacknowledged.error();
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

void escalation_desk::take_in_named(const std::string& lines) {
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
    auto found = reader_->escalation(std::string(rest));
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

void escalation_desk::take_in(const log_view& view, std::uint64_t started) {
  const snapshot routing = routing_.routing.current();
  std::vector<waiting> to_deliver;
  std::vector<std::pair<std::shared_ptr<agent_connection>, std::string>> tool_results;
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mutex_);
    // What this desk settled after the reads began is newer than what they say.
    const auto settled = [&](const std::string& id) {
      const auto it = settled_here_.find(id);
      return it != settled_here_.end() && it->second >= started;
    };
    // Whether the view holds all there is of a session's escalations.
    const auto whole = [&](const std::string& session) {
      return view.whole == log_view::scope::all || (view.whole == log_view::scope::session && session == view.session);
    };
    std::set<std::string> pending_in_log, waiting_in_log;
    for (const log::escalation_row& row : view.pending) {
      const std::string& id = row.escalation.id;
      pending_in_log.insert(id);
      if (pending_.contains(id) || settled(id)) continue;
      // Raised on another instance: shown here, its deadline armed here too (the database takes
      // one resolution, whichever desk writes first).
      auto owned = std::make_unique<entry>();
      owned->escalation = read_back(*routing, row);
      // Its own instance, when alive, resolves it at the deadline; the others 2 s later, if it did not.
      arm(*owned, std::chrono::seconds(2));
      broadcast_locked(protocol::render(protocol::escalation_frame{escalation_object_of(owned->escalation)}));
      add_pending(std::move(owned));
    }
    for (const log::escalation_history& h : view.unacknowledged) {
      const log::resolution_record& res = *h.resolution;
      waiting_in_log.insert(res.id);
      if (const auto it = pending_.find(res.escalation); it != pending_.end()) {
        // Resolved on another instance. One this desk is writing a resolution for gets
        // DUPLICATE_ROW, and finish() settles it.
        if (it->second->resolving) continue;
        const auto object = resolution_object_of(*routing, res, it->second->escalation.row);
        broadcast_locked(protocol::render(protocol::resolved_frame{escalation_object_of(it->second->escalation, object)}));
        remove_pending_locked(it);
      }
      std::string tool_result = logged_tool_result(h.tool_run);
      if (h.tool_run) remember_reported(h.row.escalation.decision);  // reported, or run, on any instance
      auto w = waiting_.find(res.id);
      if (w == waiting_.end()) {
        if (settled(res.id)) continue;  // acknowledged here since
        waiting made = waiting_for(*routing, res, h.row.escalation, resolution_object_of(*routing, res, h.row.escalation));
        made.tool_result = std::move(tool_result);
        to_deliver.push_back(waiting_.emplace(res.id, std::move(made)).first->second);
      } else if (w->second.tool_result.empty() && !tool_result.empty()) {
        // The tool another instance ran for it has run: a session connected here hears of it.
        w->second.tool_result = tool_result;
        if (const auto s = sessions_.find(w->second.session); s != sessions_.end()) {
          if (auto conn = s->second.lock()) tool_results.emplace_back(std::move(conn), std::move(tool_result));
        }
      }
    }
    // Resolved and acknowledged elsewhere before this desk heard of the resolution.
    for (const log::escalation_history& h : view.settled) {
      if (const auto it = pending_.find(h.row.escalation.id); it != pending_.end() && !it->second->resolving) {
        const auto object = resolution_object_of(*routing, *h.resolution, it->second->escalation.row);
        broadcast_locked(protocol::render(protocol::resolved_frame{escalation_object_of(it->second->escalation, object)}));
        remove_pending_locked(it);
      }
    }
    // Acknowledged on another instance: named, or missing from a whole view.
    const auto drop_waiting = [&](std::map<std::string, waiting>::iterator it) {
      const std::string session = it->second.session;
      auto next = waiting_.erase(it);
      forget_if_done_locked(session);
      return next;
    };
    for (const std::string& id : view.acknowledged) {
      if (const auto it = waiting_.find(id); it != waiting_.end() && !it->second.acknowledged && !settled(id)) {
        drop_waiting(it);
      }
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (!whole(it->second.session) || waiting_in_log.contains(it->first) || it->second.acknowledged ||
          settled(it->first)) {
        ++it;
      } else {
        it = drop_waiting(it);
      }
    }
    // Resolved and acknowledged on another instance between two reads.
    for (auto it = pending_.begin(); it != pending_.end();) {
      const auto next = std::next(it);
      if (whole(it->second->escalation.row.session) && !pending_in_log.contains(it->first) && !it->second->resolving &&
          !settled(it->first)) {
        gone.push_back(it->first);
        remove_pending_locked(it);
      }
      it = next;
    }
    // Reads are one at a time: what was settled before this one began, no later read can undo.
    std::erase_if(settled_here_, [&](const auto& s) { return s.second < started; });
  }
  for (const waiting& w : to_deliver) deliver(w);
  for (auto& [conn, frame] : tool_results) {
    boost::asio::post(conn->strand(), [conn, frame = std::move(frame)]() mutable { conn->send(std::move(frame)); });
  }
  for (const std::string& id : gone) {
    auto found = reader_->escalation(id);
    if (!found || !*found || !(*found)->resolution) continue;
    const std::string frame = protocol::render(protocol::resolved_frame{history_object(*routing, **found)});
    std::lock_guard lock(mutex_);
    broadcast_locked(frame);
  }
}

void escalation_desk::add_pending(std::unique_ptr<entry> e) {
  e->order = ++raised_count_;
  raised_order_.emplace(e->order, e.get());
  pending_.emplace(e->escalation.row.id, std::move(e));
}

void escalation_desk::arm(entry& e, std::chrono::milliseconds later) {
  e.timer = std::make_unique<boost::asio::steady_timer>(io_);
  e.timer->expires_after(std::chrono::milliseconds(std::max<std::int64_t>(0, e.escalation.row.deadline_ms - unix_ms())) + later);
  e.timer->async_wait([this, id = e.escalation.row.id](boost::system::error_code ec) {
    if (!ec) on_deadline(id);
  });
}

void escalation_desk::raised(const escalation& e) {
  const std::string& id = e.row.id;
  snapshot routing;
  std::optional<log::resolution_record> denied;
  {
    std::lock_guard lock(mutex_);
    if (shared_) settled_here_[id] = catch_ups_;
    // A shared log's catch-up may have taken it in already.
    if (pending_.contains(id)) return;
    auto owned = std::make_unique<entry>();
    owned->escalation = e;
    arm(*owned);
    entry& raised_entry = *owned;
    add_pending(std::move(owned));
    broadcast_locked(protocol::render(protocol::escalation_frame{escalation_object_of(e)}));
    // Decided on a snapshot that a reload replaced before this row was durable: the reload's
    // sweep did not see it, so it is held against what serves now here.
    if (!last_reload_.empty()) {
      routing = routing_.routing.current();
      if (const auto why = misfit(*routing, e.row)) denied = prepare_misfit_locked(*routing, raised_entry, *why, last_reload_);
    }
  }
  if (!denied) return;
  write_resolution(id, std::move(*denied), std::move(routing), [id](result<protocol::resolution_object> r) {
    // Still pending: its deadline resolves it.
    if (!r) spdlog::error("escalation {} no longer fits the reloaded routing, but its resolution is not in the log: {}",
                          id, r.error().message);
  });
}

std::optional<std::string> escalation_desk::misfit(const routing_snapshot& routing, const log::escalation_record& r) {
  if (r.tool.empty()) return std::nullopt;  // the reviewer chooses the tool
  if (r.registry_hash == routing.registry.hash && r.policy_hash == routing.policy.hash) return std::nullopt;
  if (r.tool == tools::finish_option) {
    if (routing.registry.finish) return std::nullopt;
    return std::string("the registry no longer has `finish`");
  }
  const tools::tool* t = tools::find_tool(routing.registry, r.tool);
  if (!t) return "tool `" + r.tool + "` is no longer in the registry";
  json arguments = r.arguments;
  if (const auto issues = tools::complete_arguments(*t, arguments); !issues.empty()) {
    // loc is ["arguments", NAME], or ["arguments"] for arguments that are no object.
    const issue& first = issues.front();
    const std::string where = first.loc.is_array() && !first.loc.empty() && first.loc.back().is_string()
                                  ? first.loc.back().get<std::string>()
                                  : std::string("arguments");
    return "its arguments no longer fit tool `" + r.tool + "` (" + where + ": " + first.msg + ")";
  }
  const auto& deny = routing.policy.deny;
  if (std::find(deny.begin(), deny.end(), r.tool) != deny.end()) return "the policy now denies `" + r.tool + "` (rules.deny)";
  return std::nullopt;
}

std::optional<log::resolution_record> escalation_desk::prepare_misfit_locked(const routing_snapshot& routing, entry& e,
                                                                             const std::string& why,
                                                                             const std::string& reload_id) {
  if (e.resolving) return std::nullopt;  // a reviewer's or its deadline's resolution is on its way
  protocol::resolve_input in;
  in.reason = "denied at reload " + reload_id + " of the registry and policy: " + why +
              " (what no longer fits is denied, as its deadline would deny it)";
  in.force = true;
  auto res = prepare(routing, e, std::move(in), deadline_reviewer, "deadline");
  if (!res) return std::nullopt;  // a forced deny has nothing left to refuse
  e.resolving = true;
  return std::move(*res);
}

void escalation_desk::swap_and_resolve_misfits(std::shared_ptr<const routing_snapshot> next, const std::string& reload_id,
                                               std::function<void(std::size_t)> done) {
  const snapshot routing = next;
  std::vector<std::pair<std::string, log::resolution_record>> denied;
  {
    std::lock_guard lock(mutex_);
    routing_.routing.replace(std::move(next));
    last_reload_ = reload_id;
    for (const auto& [order, raised_entry] : raised_order_) {
      entry& e = *pending_.at(raised_entry->escalation.row.id);
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
    write_resolution(id, std::move(res), routing, [t, id = id](result<protocol::resolution_object> r) {
      if (!r) {
        // Still pending: its deadline resolves it.
        spdlog::error("escalation {} no longer fits the reloaded routing, but its resolution is not in the log: {}", id,
                      r.error().message);
      }
      std::size_t left = 0, resolved = 0;
      {
        std::lock_guard lock(t->mutex);
        if (r) ++t->resolved;
        left = --t->left;
        resolved = t->resolved;
      }
      if (left == 0) t->done(resolved);
    });
  }
}

protocol::resolve_input escalation_desk::deadline_input(const log::escalation_record& r) {
  protocol::resolve_input in;
  in.execute = r.on_deadline == "execute" && !r.tool.empty();
  if (in.execute) {
    in.tool = r.tool;
    in.arguments = r.arguments;
  }
  in.reason = "nobody resolved it by its deadline, " + iso_utc(r.deadline_ms) + " (on_deadline: " + r.on_deadline + ")";
  in.force = true;  // the outcome configured when it was raised applies whatever changed since
  return in;
}

log::resolution_record escalation_desk::prepare_deadline(const routing_snapshot& routing, const entry& e) const {
  protocol::resolve_input in = deadline_input(e.escalation.row);
  const auto& deny_list = routing.policy.deny;
  std::string why;
  if (in.execute && std::find(deny_list.begin(), deny_list.end(), *in.tool) != deny_list.end()) {
    why = "the policy now denies `" + *in.tool + "` (rules.deny)";
  } else {
    auto res = prepare(routing, e, std::move(in), deadline_reviewer, "deadline");
    if (res) return std::move(*res);
    why = "its execute no longer fits the registry (" + res.error().message + ")";
  }
  // The configured `execute` is no longer allowed (a tool renamed or denied, a parameter
  // changed): denied, saying why, rather than run or left pending for ever.
  protocol::resolve_input deny = deadline_input(e.escalation.row);
  deny.execute = false;
  deny.tool.reset();
  deny.arguments.reset();
  deny.reason += "; denied: " + why;
  auto denied = prepare(routing, e, std::move(deny), deadline_reviewer, "deadline");
  return std::move(*denied);  // a forced deny has nothing left to refuse
}

void escalation_desk::on_deadline(const std::string& id) {
  snapshot routing;
  log::resolution_record res;
  {
    std::lock_guard lock(mutex_);
    // Read under the lock a reload swaps under: prepared here, it is either seen by the reload's
    // sweep or made against the new snapshot.
    routing = routing_.routing.current();
    const auto it = pending_.find(id);
    if (it == pending_.end()) return;
    if (it->second->resolving) {
      // A reviewer's or a reload's resolution is being written; should it fail, the escalation is
      // still pending and needs its deadline again.
      if (it->second->timer) {
        it->second->timer->expires_after(std::chrono::seconds(5));
        it->second->timer->async_wait([this, id](boost::system::error_code ec) {
          if (!ec) on_deadline(id);
        });
      }
      return;
    }
    res = prepare_deadline(*routing, *it->second);
    it->second->resolving = true;
  }
  write_resolution(id, std::move(res), routing, [this, id](result<protocol::resolution_object> r) {
    if (r) return;
    // Another instance's desk wrote it first (its deadline ran there too): finish() took its
    // resolution in.
    if (shared_ && r.error().code == "ALREADY_RESOLVED") return;
    // Not in the log (a full or failing log): the deadline is tried again in 5 s.
    spdlog::error("escalation {}: its deadline passed, but its resolution is not in the log ({}); retrying in 5 s", id,
                  r.error().message);
    std::lock_guard lock(mutex_);
    if (const auto it = pending_.find(id); it != pending_.end() && it->second->timer) {
      it->second->timer->expires_after(std::chrono::seconds(5));
      it->second->timer->async_wait([this, id](boost::system::error_code ec) {
        if (!ec) on_deadline(id);
      });
    }
  });
}

void escalation_desk::resolve(const std::string& id, protocol::resolve_input in, const std::string& reviewer,
                              resolved_callback done) {
  resolve_as(id, std::move(in), reviewer, "reviewer", std::move(done));
}

void escalation_desk::resolve_body(const std::string& id, std::string_view body, const std::string& reviewer,
                                   resolved_callback done) {
  json parsed_body;
  json_parse_error err;
  if (!parse_json(body, parsed_body, err, json_parse_options{})) {
    return done(make_error(400, "INVALID_JSON", "the body is not JSON: " + err.message + " at byte " + std::to_string(err.byte)));
  }
  auto in = protocol::parse_resolve_input(parsed_body);
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

result<log::resolution_record> escalation_desk::prepare(const routing_snapshot& routing, const entry& e,
                                                        protocol::resolve_input&& in, const std::string& reviewer,
                                                        const char* by) const {
  const log::escalation_record& r = e.escalation.row;
  log::resolution_record res;
  res.outcome = in.execute ? "execute" : "deny";
  if (in.execute) {
    res.tool = in.tool.value_or(r.tool);
    if (res.tool.empty()) return invalid_field(json::array({"tool"}), "missing", "`tool` is required: the escalated decision names none");
    const bool finish = res.tool == tools::finish_option && routing.registry.finish;
    const tools::tool* t = tools::find_tool(routing.registry, res.tool);
    if (!finish && !t) return invalid_field(json::array({"tool"}), "literal_error", "unknown tool `" + res.tool + "`");
    res.arguments = in.arguments ? *in.arguments : res.tool == r.tool ? r.arguments : json::object();
    if (t) {
      if (auto issues = tools::complete_arguments(*t, res.arguments); !issues.empty()) {
        return make_error(422, "INVALID_RESOLUTION", std::move(issues));
      }
    } else if (!res.arguments.is_object() || !res.arguments.empty()) {
      return invalid_field(json::array({"arguments"}), "extra_forbidden", "`finish` takes no arguments");
    }
  }
  const bool registry_changed = r.registry_hash != routing.registry.hash;
  const bool policy_changed = r.policy_hash != routing.policy.hash;
  if ((registry_changed || policy_changed) && !in.force) {
    const std::string what = registry_changed && policy_changed ? "the registry and the policy"
                             : registry_changed                 ? "the registry"
                                                                : "the policy";
    return make_error(409, "VERSION_CHANGED", what + " changed since escalation " + r.id +
                                                  " was raised; resolve with \"force\": true to resolve it anyway");
  }
  res.id = new_id('v');
  res.escalation = r.id;
  res.created_ms = unix_ms();
  res.reason = std::move(in.reason);
  res.reviewer = reviewer;
  res.by = by;
  res.forced = in.force && (registry_changed || policy_changed);
  res.registry_hash = routing.registry.hash;
  res.policy_hash = routing.policy.hash;
  return res;
}

void escalation_desk::resolve_as(const std::string& id, protocol::resolve_input in, const std::string& reviewer, const char* by,
                                 resolved_callback done, bool caught_up) {
  snapshot routing;
  result<log::resolution_record> prepared = not_found(id);
  {
    std::lock_guard lock(mutex_);
    routing = routing_.routing.current();  // under the lock a reload swaps under (on_deadline)
    const auto it = pending_.find(id);
    if (it != pending_.end()) {
      if (it->second->resolving) {
        prepared = make_error(409, "RESOLUTION_IN_PROGRESS",
                              "escalation " + id + " is being resolved by another call; read it again in a moment");
      } else {
        prepared = prepare(*routing, *it->second, std::move(in), reviewer, by);
        if (prepared) it->second->resolving = true;
      }
    }
  }
  if (prepared) return write_resolution(id, std::move(*prepared), routing, std::move(done));
  if (prepared.error().code != "NOT_FOUND") return done(prepared.error());
  if (shared_ && !caught_up) {
    // Raised on another instance a moment ago, perhaps, its notification not here yet: read it,
    // then look again.
    take_in_named("e " + id);
    return resolve_as(id, std::move(in), reviewer, by, std::move(done), true);
  }
  // Not pending here: resolved already, or not (yet) an escalation at all.
  auto found = reader_->escalation(id);
  if (!found) return done(found.error());
  if (!*found || !(*found)->resolution) return done(not_found(id));
  const log::resolution_record& r = *(*found)->resolution;
  done(make_error(409, "ALREADY_RESOLVED",
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
  std::optional<waiting> w;
  protocol::resolution_object object;
  std::optional<error> failed;
  bool read_winner = false;
  {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(id);
    if (it == pending_.end()) {
      failed = make_error(409, "ALREADY_RESOLVED", "escalation " + id + " is already resolved");
    } else if (!written && written.error().code != "DUPLICATE_ROW") {
      it->second->resolving = false;
      failed = written.error();
    } else if (!written && shared_) {
      // Another instance's resolution won: read it, and it is taken in as any other instance's
      // (reviewers told, the agent's session given it).
      it->second->resolving = false;
      failed = make_error(409, "ALREADY_RESOLVED", "escalation " + id + " is already resolved");
      read_winner = true;
    } else {
      e = std::move(it->second->escalation);
      remove_pending_locked(it);
      if (shared_) {
        settled_here_[id] = catch_ups_;
        settled_here_[r.id] = catch_ups_;
      }
      if (!written) {
        // Another baton on the same log resolved it first.
        failed = make_error(409, "ALREADY_RESOLVED", "escalation " + id + " is already resolved");
      } else {
        object = resolution_object_of(*routing, r, e->row);
        w = waiting_for(*routing, r, e->row, object);
        w->resolved_here = true;
        waiting_.emplace(r.id, *w);
        // Under the lock, so that reviewers see `resolved` after the `escalation` it follows.
        broadcast_locked(protocol::render(protocol::resolved_frame{escalation_object_of(*e, object)}));
      }
    }
  }
  if (read_winner) take_in_named("e " + id);
  if (failed) return done(std::move(*failed));
  routing_.counters.resolution(r.outcome, r.by);
  spdlog::info("escalation {} resolved by {} ({}): {} {}", id, r.reviewer, r.by, r.outcome, r.tool);
  deliver(*w);
  // A tool baton runs itself runs now; the agent runs its own once it has the resolution.
  run_if_baton_runs(*routing, r, e->row);
  done(result<protocol::resolution_object>(boost::system::in_place_value, std::move(object)));
}

void escalation_desk::run_tool(tools::executor& ex, const log::escalation_record& e, const std::string& resolution,
                               const std::string& tool, const json& arguments) {
  {
    // The session's connection is kept until the run's frame is sent, even when the agent
    // acknowledges the resolution first.
    std::lock_guard lock(mutex_);
    ++tools_running_[e.session];
  }
  ex.run(tools::tool_call{e.decision, tool, arguments},
         [this, escalation = e.id, decision = e.decision, session = e.session, resolution, tool,
          kind = std::string(ex.kind())](tools::tool_outcome o) {
           routing_.counters.tool_run(tool, o.ok);
           log::tool_run_record run = tool_run_of(decision, tool, kind, o);
           // Reviewers hear of the run once it is in the log, so that GET /v1/escalations/{id} agrees.
           const std::string frame = protocol::render(protocol::tool_run_frame{escalation, tool_run_object_of(run)});
           auto report = [this, decision, frame](result<void> ok) {
             if (!ok) {
               spdlog::error("the tool run of decision {} is not in the log: {}", decision, ok.error().message);
               return;
             }
             std::lock_guard lock(mutex_);
             broadcast_locked(frame);
           };
           if (auto queued = log_.append(std::move(run), report); !queued) report(queued.error());
           std::string result = protocol::render(protocol::tool_outcome_frame{decision, tool, wire_outcome(std::move(o)), {}});
           std::shared_ptr<agent_connection> c;
           {
             std::lock_guard lock(mutex_);
             if (const auto it = sessions_.find(session); it != sessions_.end()) c = it->second.lock();
             // Sent again with the resolution on a resume until the agent acknowledges it.
             if (const auto w = waiting_.find(resolution); w != waiting_.end()) w->second.tool_result = result;
             if (const auto r = tools_running_.find(session); r != tools_running_.end() && --r->second == 0) {
               tools_running_.erase(r);
             }
             forget_if_done_locked(session);
           }
           // A connected session hears of it now; the run is in the log either way.
           if (c) {
             boost::asio::post(c->strand(), [c, result = std::move(result)]() mutable { c->send(std::move(result)); });
           }
         });
}

void escalation_desk::deliver(const waiting& w) {
  std::shared_ptr<agent_connection> c;
  {
    std::lock_guard lock(mutex_);
    if (const auto s = sessions_.find(w.session); s != sessions_.end()) c = s->second.lock();
  }
  if (!c) return;  // sent when the agent resumes the session
  boost::asio::post(c->strand(), [c, w, max = routing_.max_pending_tool_results] {
    c->send(w.frame);
    if (!w.tool.empty()) c->await_tool(w.decision, w.tool, max);
    // The run of a tool baton ran, when it ran before this desk delivered (another instance's).
    if (!w.tool_result.empty()) c->send(w.tool_result);
  });
}

void escalation_desk::remember_reported(const std::string& decision) {
  if (!reported_.insert(decision).second) return;
  reported_order_.push_back(decision);
  if (reported_order_.size() > max_remembered_results) {
    reported_.erase(reported_order_.front());
    reported_order_.pop_front();
  }
}

bool escalation_desk::claim_tool_result(const std::string& decision) {
  std::lock_guard lock(mutex_);
  // Reported already (here, or in the log), its resolution perhaps acknowledged since: a
  // connection that resumed before the acknowledgement still awaits it.
  if (reported_.contains(decision)) return false;
  const bool resolved = std::any_of(waiting_.begin(), waiting_.end(),
                                    [&](const auto& w) { return w.second.decision == decision && !w.second.tool.empty(); });
  if (resolved) remember_reported(decision);  // else no resolution's: the connection's own record decides
  return true;
}

void escalation_desk::release_tool_result(const std::string& decision) {
  std::lock_guard lock(mutex_);
  if (reported_.erase(decision) == 0) return;
  // The log refused it (rare): its order entry goes too, so that a later claim is kept its time.
  const auto at = std::find(reported_order_.rbegin(), reported_order_.rend(), decision);
  if (at != reported_order_.rend()) reported_order_.erase(std::next(at).base());
}

escalation_desk::attached escalation_desk::attach(const std::string& session, const std::shared_ptr<agent_connection>& c,
                                                  bool resend) {
  // A resume may come to this instance after its session was served by another.
  if (resend) catch_up(session);
  attached a;
  std::lock_guard lock(mutex_);
  sessions_[session] = c;
  // Forget the connections that are gone, now and then, so the map stays the size of the live ones.
  if (sessions_.size() > 2 * live_mark_ + 64) {
    std::erase_if(sessions_, [](const auto& s) { return s.second.expired(); });
    live_mark_ = sessions_.size();
  }
  if (resend) {
    for (const auto& [order, e] : raised_order_) {
      if (e->escalation.row.session == session) a.pending.push_back(e->escalation.row.id);
    }
    for (const auto& [id, w] : waiting_) {
      if (w.session != session || w.acknowledged) continue;
      a.frames.push_back(w.frame);
      if (!w.tool.empty()) a.awaited.emplace_back(w.decision, w.tool);
      if (!w.tool_result.empty()) a.tool_results.push_back(w.tool_result);
    }
  }
  return a;
}

result<void> escalation_desk::acknowledge(const std::string& resolution, const std::string& owner) {
  bool waiting_here = false;
  // Delivered by another instance (one this agent was connected to before): its rows are read here.
  if (shared_) {
    std::unique_lock lock(mutex_);
    const bool known = waiting_.contains(resolution);
    lock.unlock();
    if (!known) {
      if (auto escalation = reader_->escalation_of(resolution); escalation && *escalation) {
        take_in_named("v " + resolution + " " + **escalation);
      }
    }
  }
  {
    std::lock_guard lock(mutex_);
    const auto it = waiting_.find(resolution);
    if (it != waiting_.end() && owner_of(it->second.session) == owner) {
      if (it->second.acknowledged) return {};  // its delivery row is on its way
      it->second.acknowledged = true;
      waiting_here = true;
    }
  }
  if (waiting_here) {
    auto written = [this, resolution](result<void> ok) {
      // Acknowledged already (through another instance, or a second ack racing the first).
      if (!ok && ok.error().code == "DUPLICATE_ROW") ok = result<void>();
      boost::asio::post(io_, [this, resolution, ok] {
        std::vector<std::function<void()>> resumes;
        {
          std::lock_guard lock(mutex_);
          const auto it = waiting_.find(resolution);
          if (it == waiting_.end()) return;
          const std::string session = it->second.session;
          if (!ok) {
            // Sent again on the next resume, and acknowledged again.
            spdlog::error("the acknowledgement of resolution {} is not in the log: {}", resolution, ok.error().message);
            it->second.acknowledged = false;
          } else {
            waiting_.erase(it);
            if (shared_) settled_here_[resolution] = catch_ups_;
            forget_if_done_locked(session);
          }
          if (!acks_in_flight_locked(session)) {
            if (const auto w = ack_waiters_.find(session); w != ack_waiters_.end()) {
              resumes = std::move(w->second);
              ack_waiters_.erase(w);
            }
          }
        }
        for (auto& resume : resumes) resume();
      });
    };
    if (auto queued = log_.append(log::delivery_record{resolution, unix_ms()}, written); !queued) written(queued.error());
    return {};
  }
  // Delivery is at least once: acknowledging again what is acknowledged is no error.
  const auto session = reader_->acknowledged_session(resolution);
  if (!session) return session.error();
  if (*session && owner_of(**session) == owner) return {};
  return make_error(404, "UNKNOWN_RESOLUTION",
                    "resolution `" + resolution + "` is not one of this key's sessions' resolutions");
}

void escalation_desk::forget_if_done_locked(const std::string& session) {
  // Nothing more to send this session (no resolution to deliver, no escalation pending, no tool
  // baton runs for it still running): its connection need not be remembered.
  const bool more =
      tools_running_.contains(session) ||
      std::any_of(waiting_.begin(), waiting_.end(), [&](const auto& x) { return x.second.session == session; }) ||
      std::any_of(pending_.begin(), pending_.end(), [&](const auto& x) { return x.second->escalation.row.session == session; });
  if (!more) sessions_.erase(session);
}

bool escalation_desk::acks_in_flight_locked(const std::string& session) const {
  return std::any_of(waiting_.begin(), waiting_.end(),
                     [&](const auto& w) { return w.second.session == session && w.second.acknowledged; });
}

bool escalation_desk::defer_until_acks_written(const std::string& session, std::function<void()> then) {
  std::lock_guard lock(mutex_);
  if (!acks_in_flight_locked(session)) return false;
  ack_waiters_[session].push_back(std::move(then));
  return true;
}

void escalation_desk::add_listener(const std::shared_ptr<review_listener>& l) {
  std::lock_guard lock(mutex_);
  protocol::snapshot_frame snapshot;
  for (const auto& [order, e] : raised_order_) {
    if (snapshot.escalations.size() == max_listed) break;
    snapshot.escalations.push_back(escalation_object_of(e->escalation));
  }
  // send() only queues: under the lock, nothing the desk says later can overtake the snapshot.
  l->send(protocol::render(snapshot));
  listeners_.push_back(l);
}

void escalation_desk::broadcast_locked(const std::string& frame) {
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (auto l = it->lock()) {
      l->send(frame);
      ++it;
    } else {
      it = listeners_.erase(it);
    }
  }
}

std::size_t escalation_desk::pending() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

result<std::string> escalation_desk::list_json(std::string_view status, std::size_t limit) {
  if (status != "pending" && status != "resolved" && status != "all") {
    return make_error(422, "INVALID_REQUEST", "status must be pending, resolved or all");
  }
  protocol::escalation_list list;
  if (status != "resolved") {
    std::lock_guard lock(mutex_);
    for (const auto& [order, e] : raised_order_) {
      if (list.escalations.size() == limit) break;
      list.escalations.push_back(escalation_object_of(e->escalation));
    }
  }
  if (status != "pending") {
    auto resolved = reader_->latest_resolutions(limit);
    if (!resolved) return resolved.error();
    const snapshot routing = routing_.routing.current();
    for (const log::escalation_history& h : *resolved) list.escalations.push_back(history_object(*routing, h));
  }
  return protocol::render(list);
}

result<std::string> escalation_desk::get_json(const std::string& id) {
  {
    std::lock_guard lock(mutex_);
    if (const auto it = pending_.find(id); it != pending_.end()) {
      return protocol::render(escalation_object_of(it->second->escalation));
    }
  }
  auto found = reader_->escalation(id);
  if (!found) return found.error();
  if (!*found) return not_found(id);
  return protocol::render(history_object(*routing_.routing.current(), **found));
}

std::string escalation_desk::tools_json() const {
  const snapshot routing = routing_.routing.current();
  protocol::tools_list list;
  for (const tools::tool& t : routing->registry.tools) {
    protocol::tool_entry& entry = list.tools.emplace_back();
    entry.id = t.id;
    entry.description = t.description;
    entry.risk = tools::to_string(t.risk);
    entry.executor = executor_kind(*routing, t.id);
    for (const tools::parameter& p : t.parameters) {
      protocol::tool_parameter& param = entry.parameters.emplace_back();
      param.name = p.name;
      param.type = tools::to_string(p.type);
      param.instructions = p.instructions;
      for (const auto& [label, description] : p.values.items()) {
        param.values.push_back({label, description.get<std::string>()});
      }
      param.fixed = p.value;
    }
  }
  list.finish = routing->registry.finish;
  list.registry_hash = routing->registry.hash;
  return protocol::render(list);
}

}  // namespace baton
