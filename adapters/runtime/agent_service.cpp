#include "adapters/runtime/agent_service.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <utility>

#include "adapters/protocol/frame_opener.hpp"
#include "adapters/runtime/escalation_rules.hpp"
#include "adapters/runtime/tool_runs.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"
#include "tools/arguments.hpp"
#include "tools/mcp_client.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

namespace {

using clock_type = std::chrono::steady_clock;

}  // namespace

// One decide frame's way through the pipeline, a phase at a time. Its request refers to the
// session's history, which the turn holds: an engine reads it until it answers, even past its
// timeout, so the session goes back (hand_back) once the decision is over and no engine holds the
// request. The turn's history becomes the session's only if the decision reached the agent: a
// decision the log refused is retried by the agent with the same turn.
enum class agent_service::turn_phase {
  engine,       // the engine decides; its timer runs
  first_pass,   // a fallback lane: the first pass's row is being written
  fallback,     // the larger engine decides the same request; its timer runs
  logging,      // decided (with an engine's answer or without): its row is being written
  delivered,    // the decision went out; a tool baton runs may be running
  answered,     // over, the decision delivered
  refused,      // over, an error frame instead: the session is as it was
  handed_back,  // the session has it back
};

struct agent_service::turn {
  using phase = turn_phase;
  phase at = phase::engine;
  bool engine_holds = false;  // an engine has the request (reads the history) and has not answered

  std::shared_ptr<agent_connection> conn;
  json frame_id;
  protocol::decide_frame frame;
  bool call = false;  // the agent's own call (on_call): the policy judges frame.proposal
  // Two-stage routing (routing_snapshot::stages): the group the first stage chose (or the call's),
  // and, once the second stage is asked, the first stage's answers and questions (extra questions
  // included: a fallback asks them again).
  std::string group;
  std::optional<response> first_stage;
  std::vector<question> first_questions;
  std::uint64_t armed = 0;  // how often the timer was armed: a stale expiry is not this wait's
  session_turn session;
  request req;  // the questions, the media and a view of session.history; with an engine while it holds it
  // The registry, policy and executors the turn decides and runs with, to its end, whatever a
  // reload swaps in meanwhile.
  std::shared_ptr<const routing_snapshot> routing;
  clock_type::time_point received;
  std::string schema_hash;
  boost::asio::steady_timer timer;
  std::string first_pass;  // the first pass's decision id, once a fallback lane sent the turn on
  // The history's oldest events the engine is not sent (its window).
  tools::dropped_events dropped;
  // The session's media items the request carries (indices into session.media) and how many it
  // holds that the request does not (with dropped events, or past the engine's limits).
  std::vector<std::size_t> media_sent;
  std::size_t media_dropped = 0;
  // Events a tool baton ran returned while an engine still read the history (it answered late):
  // they join the history once it is back.
  std::vector<json> late_events;
  double compile_ms = 0, queue_ms = 0, engine_ms = 0, policy_ms = 0, log_ms = 0;
  std::optional<response> answers;
  std::string error_code;
  policies::action act;
  std::string decision_id;
  std::optional<baton::escalation> escalation;  // when the decision escalates
  std::string state_hash;
  std::string state_text;  // the rendered state, only when the log keeps states
  clock_type::time_point log_started;

  agent_service* owner = nullptr;
  std::weak_ptr<const int> owner_alive;

  turn(agent_service* o, std::shared_ptr<agent_connection> c, json id, protocol::decide_frame&& f, session_turn&& s)
      : conn(std::move(c)), frame_id(std::move(id)), frame(std::move(f)), session(std::move(s)),
        received(clock_type::now()), timer(conn->strand()), owner(o), owner_alive(o->alive_) {}
  turn(const turn&) = delete;
  turn& operator=(const turn&) = delete;
  // A turn whose handlers stopped (one threw and the last guard closed its connection) still
  // hands its session back: else the session stays busy until a restart and a graceful stop
  // waits for it.
  ~turn() {
    if (at != phase::handed_back && !owner_alive.expired()) owner->hand_back(*this);
  }

  bool fell_back() const noexcept { return !first_pass.empty(); }  // the larger engine decided
  bool deciding() const noexcept { return at == phase::engine || at == phase::fallback; }
  bool went_out() const noexcept { return at == phase::delivered || at == phase::answered; }
};

agent_service::agent_service(const server_config& config, decision_engine& engine, scheduler& scheduler,
                             log::decision_log& log, metrics& m, std::shared_ptr<const routing_snapshot> routing,
                             boost::asio::any_io_executor io, std::optional<fallback_engine> fallback)
    : config_(config), engine_(engine), scheduler_(scheduler), log_(log), metrics_(m), routing_(std::move(routing)),
      desk_(std::make_unique<escalation_desk>(
          log, escalation_routing{routing_, config.server.max_pending_tool_results, m}, io)),
      reads_(std::make_unique<escalation_reads>(*desk_)),
      reloader_(std::make_unique<routing_reloader>(
          config, routing_, *desk_, log, engine.describe().limits,
          fallback ? &fallback->engine.describe().limits : nullptr, std::move(io))),
      fallback_(fallback),
      sessions_(session_limits{config.server.max_history_bytes, config.server.max_history_bytes_total,
                               config.server.max_sessions, config.server.session_idle},
                [this](const std::string& session) { return desk_->has_work(session); }) {}

bool agent_service::on_frame(const std::shared_ptr<agent_connection>& c, std::string_view text) {
  json id;
  auto f = protocol::parse_frame(text, engine_.describe().limits, id);
  if (!f) {
    c->send(protocol::render_error_frame(id, f.error()));
    return false;
  }
  // The MCP gateway's session names are its own (is_mcp_gateway_session).
  const std::string* named = nullptr;
  if (auto* d = std::get_if<protocol::decide_frame>(&*f)) named = &d->session;
  if (auto* r = std::get_if<protocol::resume_frame>(&*f)) named = &r->session;
  if (auto* e = std::get_if<protocol::end_frame>(&*f)) named = &e->session;
  if (named && is_mcp_gateway_session(*named)) {
    c->send(protocol::render_error_frame(id, make_error(422, codes::invalid_frame,
                                                        "session `" + *named + "`: a name of \"mcp-\" and 32 hex digits is "
                                                        "one of baton's MCP gateway sessions; choose another")));
    return false;
  }
  if (auto* d = std::get_if<protocol::decide_frame>(&*f)) return on_decide(c, std::move(id), std::move(*d), false);
  if (auto* r = std::get_if<protocol::resume_frame>(&*f)) return on_resume(c, std::move(id), std::move(*r));
  if (auto* a = std::get_if<protocol::ack_frame>(&*f)) return on_ack(c, std::move(id), std::move(*a));
  if (auto* e = std::get_if<protocol::end_frame>(&*f)) return on_end(c, std::move(id), std::move(*e));
  return on_tool_result(c, std::move(id), std::move(std::get<protocol::tool_result_frame>(*f)));
}

json agent_service::frame_id(std::string_view text) const {
  return protocol::frame_id(text, engine_.describe().limits.max_json_depth);
}

std::string agent_service::scoped(const agent_connection& c, const std::string& session) const {
  return c.owner_.empty() ? session : c.owner_ + "/" + session;
}

bool agent_service::on_resume(const std::shared_ptr<agent_connection>& c, json id, protocol::resume_frame&& f) {
  const std::string session = scoped(*c, f.session);
  // The answer and what follows it, on the connection's strand.
  auto answer = std::make_shared<std::function<void(resolution_delivery::attached)>>(
      [this, c, id = std::move(id), name = std::move(f.session)](resolution_delivery::attached a) mutable {
        c->send(protocol::render(protocol::resumed_frame{std::move(id), name, std::move(a.pending), a.frames.size()}));
        for (const std::string& frame : a.frames) c->send(frame);
        for (const std::string& frame : a.tool_results) c->send(frame);
        for (const auto& [decision, tool] : a.awaited) c->await_tool(decision, tool, config_.server.max_pending_tool_results);
      });
  // After an `ack` of this session, the answer waits for the ack's delivery row: a client that
  // sends `ack` then `resume` knows from it that the ack is durable. The session is attached when
  // the wait ends, in the order the resumes came, so that a dying connection's resume cannot take
  // the session back from its reconnect's.
  const bool deferred = desk_->delivery().defer_until_acks_written(session, [this, c, session, answer] {
    auto a = desk_->delivery().attach(session, c, true);
    boost::asio::post(c->strand(), [answer, a = std::move(a)]() mutable { (*answer)(std::move(a)); });
  });
  if (!deferred) (*answer)(desk_->delivery().attach(session, c, true));
  return true;
}

bool agent_service::on_ack(const std::shared_ptr<agent_connection>& c, json id, protocol::ack_frame&& f) {
  if (auto ok = desk_->delivery().acknowledge(f.resolution, c->owner_); !ok) {
    c->send(protocol::render_error_frame(id, ok.error()));
    return false;
  }
  return true;
}

void agent_service::on_call_end(const std::shared_ptr<agent_connection>& c, std::string session) {
  on_end(c, json(), protocol::end_frame{std::move(session)});
}

bool agent_service::on_end(const std::shared_ptr<agent_connection>& c, json id, protocol::end_frame&& f) {
  const std::string session = scoped(*c, f.session);
  switch (sessions_.end(session)) {
    case session_table::end_result::ended:
      c->send(protocol::render(protocol::ended_frame{std::move(id), std::move(f.session)}));
      return true;
    case session_table::end_result::pending: {
      // Answered when the turn in flight hands the session back (hand_back), after its answer.
      std::lock_guard lock(ends_mutex_);
      pending_ends_[session].push_back({c, std::move(id), std::move(f.session)});
      return true;
    }
    case session_table::end_result::unknown: break;
  }
  c->send(protocol::render_error_frame(
      id, make_error(409, codes::unknown_session, "no session `" + f.session + "` on this server to end")));
  return true;  // well-formed: not a bad frame
}

void agent_service::send_pending_ends(const std::string& session) {
  std::vector<pending_end> ends;
  {
    std::lock_guard lock(ends_mutex_);
    const auto it = pending_ends_.find(session);
    if (it == pending_ends_.end()) return;
    ends = std::move(it->second);
    pending_ends_.erase(it);
  }
  // Posted to each connection's strand: after the frame the turn's handler is sending now (a
  // refusal sends its error after handing the session back).
  for (pending_end& e : ends) {
    if (auto c = e.conn.lock()) {
      boost::asio::post(c->strand(), [c, e = std::move(e)]() mutable {
        c->send(protocol::render(protocol::ended_frame{std::move(e.id), std::move(e.name)}));
      });
    }
  }
}

void agent_service::on_call(const std::shared_ptr<agent_connection>& c, json id, protocol::decide_frame&& f) {
  on_decide(c, std::move(id), std::move(f), true);
}

bool agent_service::on_decide(const std::shared_ptr<agent_connection>& c, json id, protocol::decide_frame&& f, bool call) {
  // Counted before draining_ is read: the drain either sees this turn or the turn sees the drain.
  ++in_flight_;
  if (draining_) {
    --in_flight_;
    c->send(protocol::render_error_frame(id, make_error(503, codes::shutting_down, "the server is shutting down")));
    return true;
  }
  const auto started = clock_type::now();
  auto begun = sessions_.begin(scoped(*c, f.session), f.turn, f.append, std::move(f.events), std::move(f.media));
  if (!begun) {
    --in_flight_;
    c->send(protocol::render_error_frame(id, begun.error()));
    // A well-formed frame the session cannot take now (busy, full, unknown after a restart) is
    // not a protocol violation: a client retrying as told must not reach the bad-frame limit.
    return true;
  }
  // Every turn asks the registry's questions, validated once when they were loaded; extra
  // questions are validated with them.
  std::shared_ptr<const routing_snapshot> routing = routing_.current();
  auto t = std::make_shared<turn>(this, c, std::move(id), std::move(f), std::move(*begun));
  t->routing = std::move(routing);
  t->call = call;
  if (t->frame.questions.is_null()) {
    t->req = t->routing->questions;
  } else {
    // Extra questions ride with the first stage's (of two) or the only one.
    const tools::registry& asked = t->routing->stages ? t->routing->stages->first_registry : t->routing->registry;
    auto compiled = tools::compile_questions(asked, engine_.describe().limits, t->frame.questions);
    if (!compiled) {
      refuse(t, compiled.error());
      return false;
    }
    t->req = std::move(*compiled);
  }
  t->req.history.events = &t->session.history;
  t->req.cache_scope = c->caller_;
  fit_window(t, engine_);
  if (auto media = attach_media(t, engine_); !media) {
    // Refused as a SystemOne request with these media is: the session stays as it was.
    refuse(t, media.error());
    return false;
  }
  t->received = started;
  t->schema_hash = t->frame.questions.is_null() ? t->routing->schema_hash : tools::schema_hash(t->req);
  t->compile_ms = ms_since(started);
  if (auto submitted = submit(t, scheduler_, config_.engine.timeout); !submitted) refuse(t, submitted.error());
  return true;
}

result<void> agent_service::submit(const std::shared_ptr<turn>& t, scheduler& to, std::chrono::milliseconds timeout) {
  // Moved only when queued: a refused request stays with the turn.
  auto submitted = to.submit(std::move(t->req), [this, t](scheduled_result r) {
    boost::asio::post(t->conn->strand(), [this, t, r = std::move(r)]() mutable { on_engine(t, std::move(r)); });
  });
  if (!submitted) return submitted;
  t->engine_holds = true;
  arm_timer(t, timeout);
  return {};
}

void agent_service::refuse(const std::shared_ptr<turn>& t, const error& e) {
  // The session first: an agent that retries as soon as it reads the error finds it free.
  over(t, turn::phase::refused);
  t->conn->send(protocol::render_error_frame(t->frame_id, e));
}

void agent_service::fit_window(const std::shared_ptr<turn>& t, decision_engine& engine) {
  auto dropped = tools::drop_oldest_events(t->req, config_.history,
                                           [&engine](const request& r) { return engine.state_overflow(r); });
  // A request the engine refuses (what state_overflow reports) goes as it is: decide() refuses it
  // the same way, and the policy's on_engine_error decides.
  t->dropped = dropped ? std::move(*dropped) : tools::dropped_events{};
}

result<void> agent_service::attach_media(const std::shared_ptr<turn>& t, decision_engine& engine) {
  const request_limits& limits = engine.describe().limits;
  tools::attached_media attached = tools::attach_media(t->req, t->session.media, limits, t->dropped);
  t->media_sent = std::move(attached.sent);
  t->media_dropped = attached.left_out;
  return check_media_limits(t->req, limits);
}

void agent_service::capture_state(const std::shared_ptr<turn>& t) {
  // The session does not change within a turn: a fallback pass keeps the first pass's.
  if (!t->state_hash.empty()) return;
  t->state_hash = t->session.state_hash();
  if (log_.options().store_state) t->state_text = t->session.state_text();
}

void agent_service::arm_timer(const std::shared_ptr<turn>& t, std::chrono::milliseconds timeout) {
  // A handler already queued when the timer is cancelled still runs, with success: the arming it
  // belongs to tells it apart (two stages arm it twice in one phase).
  t->timer.expires_after(timeout);
  t->timer.async_wait([this, t, armed = ++t->armed](boost::system::error_code ec) {
    if (!ec && t->armed == armed && t->deciding() && t->engine_holds) on_timeout(t);
  });
}

void agent_service::on_timeout(const std::shared_ptr<turn>& t) {
  const bool fallback = t->at == turn::phase::fallback;
  t->error_code = fallback ? codes::fallback_timeout : codes::engine_timeout;
  metrics_.engine_error("agent", t->error_code);
  t->queue_ms = ms_since(t->received);
  const auto p0 = clock_type::now();
  t->act = decided(t, fallback);
  t->policy_ms = ms_since(p0);
  spdlog::warn("session {} turn {}: no {} answer in time; policy decides {}", t->session.session, t->session.turn,
               fallback ? "fallback engine" : "engine", policies::to_string(t->act.what));
  capture_state(t);
  decide_and_log(t);  // the engine still holds the request: the session waits for its answer
}

void agent_service::on_engine(const std::shared_ptr<turn>& t, scheduled_result&& r) {
  t->engine_holds = false;
  t->req = std::move(r.req);
  for (json& e : t->late_events) t->session.add_event(std::move(e));
  t->late_events.clear();
  if (!t->deciding()) {
    // Decided without it, past its timeout: the session goes back once that decision is over.
    try_hand_back(t);
    return;
  }
  t->timer.cancel();
  const bool fallback = t->at == turn::phase::fallback;
  // A media item the caller named that cannot be read (missing, unreadable, too large, not media)
  // is the caller's to mend, as a SystemOne request's 4xx is: not the engine's failure.
  if (!fallback && !r.outcome && is_media_refusal(r.outcome.error())) {
    refuse(t, r.outcome.error());
    return;
  }
  // Two stages add up.
  t->queue_ms += r.queue_ms;
  t->engine_ms += r.engine_ms;
  metrics_.stage_ms("agent", metrics::stage::queue, r.queue_ms);
  if (r.outcome) metrics_.stage_ms("agent", metrics::stage::engine, r.engine_ms);
  const auto p0 = clock_type::now();
  const policies::policy& policy = t->routing->policy;
  const decision_engine& engine = fallback ? fallback_->engine : engine_;
  if (r.outcome) {
    auto resp = make_response(t->req, *r.outcome, policy.metric, engine.describe().model_id);
    if (resp) {
      t->answers = std::move(*resp);
    } else {
      t->error_code = resp.error().code;
    }
  } else {
    t->error_code = r.outcome.error().code;
  }
  if (t->answers && t->routing->stages && next_stage(t, fallback)) return;
  t->act = decided(t, fallback);
  t->policy_ms = ms_since(p0);
  if (t->act.what == policies::action::fallback && fallback_) {
    // The first pass is logged as it is, and once it is durable (the fallback's row names it) the
    // larger engine answers the same request.
    t->at = turn::phase::first_pass;
    capture_state(t);
    log::decision_record first = make_record(t, new_id('d'));
    t->first_pass = first.id;
    auto logged = [this, t](result<void> ok) {
      boost::asio::post(t->conn->strand(), [this, t, ok]() {
        // Not logged, so not decided: the agent retries the turn.
        if (!ok) return refuse(t, ok.error());
        start_fallback(t);
      });
    };
    if (auto queued = log_.append(std::move(first), logged); !queued) logged(queued.error());
    return;
  }
  metrics_.stage_ms("agent", metrics::stage::policy, t->policy_ms);
  if (!t->error_code.empty()) {
    metrics_.engine_error("agent", t->error_code);
    spdlog::warn("session {} turn {}: engine failed ({}); policy decides {}", t->session.session, t->session.turn,
                 t->error_code, policies::to_string(t->act.what));
  }
  capture_state(t);
  decide_and_log(t);
}

bool agent_service::next_stage(const std::shared_ptr<turn>& t, bool fallback) {
  const tools::staged_questions& stages = *t->routing->stages;
  if (t->first_stage) {
    t->answers = tools::merge_stages(stages, *t->first_stage, t->group, &*t->answers);
    return false;
  }
  const std::string called = t->call ? t->frame.proposal.value("tool", "") : std::string();
  const auto group = tools::second_stage_group(stages, t->routing->registry, *t->answers, t->call ? &called : nullptr);
  if (!group) return false;
  if (group->empty()) {
    // Finish: decided on the first stage, its groups named as groups.
    t->answers = tools::merge_stages(stages, *t->answers, {}, nullptr);
    return false;
  }
  t->group = *group;
  const auto second = stages.second.find(t->group);
  if (second == stages.second.end()) {  // a group of one tool: nothing to ask
    t->answers = tools::merge_stages(stages, *t->answers, t->group, nullptr);
    return false;
  }
  t->first_stage = std::move(t->answers);
  t->answers.reset();
  t->first_questions = std::exchange(t->req.questions, second->second.questions);
  // The window again: a group's tools may take more of it than the groups did.
  decision_engine& engine = fallback ? fallback_->engine : engine_;
  fit_window(t, engine);
  auto submitted = attach_media(t, engine);
  if (submitted) {
    submitted = fallback ? submit(t, fallback_->sched, fallback_->timeout) : submit(t, scheduler_, config_.engine.timeout);
  }
  if (submitted) return true;
  // The second stage could not be asked: decided as an engine that failed.
  t->error_code = submitted.error().code;
  return false;
}

void agent_service::start_fallback(const std::shared_ptr<turn>& t) {
  t->at = turn::phase::fallback;
  t->answers.reset();
  t->error_code.clear();
  t->queue_ms = t->engine_ms = 0;
  if (t->first_stage) {  // the larger engine is asked both stages too, from the first
    t->first_stage.reset();
    t->req.questions = std::move(t->first_questions);
  }
  // The larger engine's window is its own, and so are its media limits: an engine that reads
  // none of a kind fails the pass.
  fit_window(t, fallback_->engine);
  auto submitted = attach_media(t, fallback_->engine);
  if (submitted) submitted = submit(t, fallback_->sched, fallback_->timeout);
  if (submitted) return;
  // The larger engine got nothing: the row says so, not what the pass would have sent.
  t->media_sent.clear();
  t->media_dropped = t->session.media.size();
  t->error_code = submitted.error().code;
  metrics_.engine_error("agent", t->error_code);
  t->act = decided(t, true);
  decide_and_log(t);
}

policies::action agent_service::decided(const std::shared_ptr<turn>& t, bool fallback) const {
  return policies::decide_turn(t->routing->policy, t->routing->registry, t->answers ? &*t->answers : nullptr, t->frame.proposal,
                               t->call, fallback);
}

void agent_service::decide_and_log(const std::shared_ptr<turn>& t) {
  t->at = turn::phase::logging;
  // Text arguments: the registry's fixed values, else the proposal's (a call's own, already there).
  t->act = policies::complete(t->routing->registry, std::move(t->act), t->frame.proposal);
  t->decision_id = new_id('d');
  // The audit draws by the decision id (as `baton replay` does), so the id comes first.
  t->act = policies::audit(t->routing->policy, std::move(t->act), t->decision_id);
  log::decision_record rec = make_record(t, t->decision_id);

  t->log_started = clock_type::now();
  const bool escalates = t->act.what == policies::action::escalate;
  if (!config_.durable_ack && !escalates) {
    send_decision(t);
    log_.append_unwaited(std::move(rec));
    after_decision(t);
    return;
  }
  // An escalation is written before anyone is told, whatever durable_ack says: the decision row,
  // then the escalation's (one writer, in order: the escalation durable means both are).
  log::durable_callback on_durable = [this, t, escalates](result<void> ok) {
    boost::asio::post(t->conn->strand(), [this, t, ok, escalates]() {
      t->log_ms = ms_since(t->log_started);
      metrics_.stage_ms("agent", metrics::stage::log, t->log_ms);
      // Not durable, so not reported: the agent retries the turn.
      if (!ok) return refuse(t, ok.error());
      if (escalates) {
        desk_->delivery().attach(t->session.session, t->conn, false);  // its resolution comes to this connection
        desk_->raised(*t->escalation);
      }
      send_decision(t);
      after_decision(t);
    });
  };
  result<void> queued;
  if (escalates) {
    t->escalation = make_escalation(*t->routing, rec, t->answers ? &*t->answers : nullptr, t->session.state_text());
    const std::string id = rec.id;
    queued = log_.append(std::move(rec), [id](result<void> ok) {
      if (!ok) spdlog::error("decision {} is not in the log: {}", id, ok.error().message);
    });
    if (queued) queued = log_.append(t->escalation->row, std::move(on_durable));
  } else {
    queued = log_.append(std::move(rec), std::move(on_durable));
  }
  if (!queued) refuse(t, queued.error());
}

log::decision_record agent_service::make_record(const std::shared_ptr<turn>& t, std::string id) {
  const decision_engine& engine = t->fell_back() ? fallback_->engine : engine_;
  const engine_options& options = t->fell_back() ? *config_.fallback : config_.engine;
  log::decision_record rec;
  rec.id = std::move(id);
  if (!t->frame_id.is_null()) rec.request_id = render_json(t->frame_id, false);
  rec.session = t->session.session;
  rec.turn = t->session.turn;
  rec.created_ms = unix_ms();
  rec.queue_ms = t->queue_ms;
  rec.compile_ms = t->compile_ms;
  rec.engine_ms = t->engine_ms;
  rec.policy_ms = t->policy_ms;
  rec.total_ms = ms_since(t->received);
  rec.engine = options.name;
  rec.model = t->answers ? t->answers->model : std::string();
  rec.fingerprint = engine.describe().fingerprint;
  rec.registry_hash = t->routing->registry.hash;
  rec.policy_hash = t->routing->policy.hash;
  rec.schema_hash = t->schema_hash;
  rec.state_hash = t->state_hash;
  if (log_.options().store_state) rec.state = t->state_text;
  if (t->answers) render_answers(*t->answers, rec.answers, -1);
  rec.action = policies::to_string(t->act.what);
  rec.tool = t->act.tool;
  rec.lane = t->act.lane;
  rec.confidence = t->act.confidence;
  rec.arguments = t->act.arguments;
  rec.proposal = t->frame.proposal;
  if (t->call) rec.proposal["call"] = true;  // what `baton replay` judges again as a call
  rec.error_code = t->error_code;
  rec.fallback_of = t->first_pass;
  if (t->answers) rec.cached_tokens = t->answers->usage.cached_tokens;
  rec.events_dropped = static_cast<std::int64_t>(t->dropped.count());
  if (!t->media_sent.empty()) {
    rec.media = json::array();
    for (const std::size_t i : t->media_sent) rec.media.push_back(tools::logged_item(t->session.media[i]));
  }
  rec.media_dropped = static_cast<std::int64_t>(t->media_dropped);
  return rec;
}

void agent_service::send_decision(const std::shared_ptr<turn>& t) {
  const policies::action& a = t->act;
  protocol::decision_frame f;
  f.id = t->frame_id;
  f.decision = t->decision_id;
  f.session = t->frame.session;
  f.turn = t->session.turn;
  f.action = policies::to_string(a.what);
  f.tool = a.tool;
  f.arguments = a.arguments;
  f.lane = a.lane;
  f.confidence = a.confidence;
  if (const auto ex = t->routing->executors.find(a.tool); ex != t->routing->executors.end()) f.executor = ex->second->kind();
  f.answers = t->answers;
  f.model = t->answers ? t->answers->model : (t->fell_back() ? fallback_->engine : engine_).describe().model_id;
  if (t->answers) {
    const usage& u = t->answers->usage;
    f.usage.input_tokens = u.input_tokens;
    f.usage.cached_tokens = u.cached_tokens.value_or(0);
    f.usage.state_truncated = u.state_truncated.value_or(false);
  }
  f.usage.events_dropped = static_cast<std::int64_t>(t->dropped.count());
  f.usage.media_dropped = static_cast<std::int64_t>(t->media_dropped);
  f.error_code = t->error_code;
  f.fallback_of = t->first_pass;
  if (t->escalation) f.escalation = protocol::decision_escalation{t->escalation->row.id, t->escalation->row.deadline_ms};
  const double total = ms_since(t->received);
  f.timings_ms = {t->queue_ms, t->compile_ms, t->engine_ms, t->policy_ms, t->log_ms, total};
  metrics_.decision("agent", policies::to_string(a.what));
  metrics_.stage_ms("agent", metrics::stage::total, total);
  t->at = turn::phase::delivered;
  t->conn->send(protocol::render(f));
}

void agent_service::after_decision(const std::shared_ptr<turn>& t) {
  const auto ex = t->routing->executors.find(t->act.tool);
  if (t->act.what != policies::action::execute || ex == t->routing->executors.end()) {
    over(t, turn::phase::answered);
    return;
  }
  if (ex->second->agent_runs()) {
    t->conn->await_tool(t->decision_id, t->act.tool, config_.server.max_pending_tool_results, t->session.session);
    sessions_.await_tool(t->session.session, t->decision_id);
    over(t, turn::phase::answered);
    return;
  }
  tools::tool_call call{t->decision_id, t->act.tool, t->act.arguments};
  call.progress = [conn = std::weak_ptr<agent_connection>(t->conn), decision = t->decision_id](json params) {
    if (auto c = conn.lock()) c->tool_progress(decision, std::move(params));
  };
  ex->second->run(std::move(call),
                  [this, t](tools::tool_outcome o) {
                    boost::asio::post(t->conn->strand(),
                                      [this, t, o = std::move(o)]() mutable { on_tool_done(t, std::move(o)); });
                  });
}

void agent_service::on_tool_done(const std::shared_ptr<turn>& t, tools::tool_outcome&& o) {
  metrics_.tool_run(t->act.tool, o.ok);
  json event = {{"role", "tool"}, {"tool", t->act.tool}, {"ok", o.ok}, {"output", o.output}};
  if (!o.ok) event["error_code"] = o.error_code;
  // The session is busy, and the turn holds its history until it hands it back.
  if (t->engine_holds) {
    t->late_events.push_back(event);
  } else {
    t->session.add_event(event);
  }

  log::tool_run_record run =
      tool_run_of(t->decision_id, t->act.tool, t->routing->executors.at(t->act.tool)->kind(), o);
  std::string frame =
      protocol::render(protocol::tool_outcome_frame{t->decision_id, t->act.tool, wire_outcome(std::move(o)), std::move(event)});
  auto send = [this, t, frame = std::move(frame)](result<void> ok) mutable {
    boost::asio::post(t->conn->strand(), [this, t, ok, frame = std::move(frame)]() mutable {
      if (!ok) t->conn->send(protocol::render_error_frame(t->frame_id, ok.error()));
      t->conn->send(std::move(frame));
      over(t, turn::phase::answered);
    });
  };
  auto queued = log_.append(std::move(run), send);
  if (!queued) send(queued.error());
}

bool agent_service::on_tool_result(const std::shared_ptr<agent_connection>& c, json id,
                                   protocol::tool_result_frame&& f) {
  const auto it = c->awaited_.find(f.decision);
  if (it == c->awaited_.end()) {
    c->send(protocol::render_error_frame(
        id, make_error(409, codes::unknown_decision, "decision `" + f.decision +
                                                    "` is not one of this connection's that awaits a tool_result")));
    return false;
  }
  // The connection's own record, then the desk's: a resolved decision is awaited again by every
  // connection that resumes its session, and by the next process after a restart.
  if (it->second.reported || !desk_->delivery().claim_tool_result(f.decision)) {
    c->send(protocol::render_error_frame(
        id, make_error(409, codes::duplicate_tool_result, "decision `" + f.decision + "` already has its tool_result")));
    return false;
  }
  it->second.reported = true;
  log::tool_run_record run = reported_tool_run(f.decision, it->second.tool, f.ok, std::move(f.output));
  ++in_flight_;
  auto ack = [this, c, id, decision = f.decision, session = it->second.session](result<void> ok) {
    boost::asio::post(c->strand(), [this, c, id, decision, session, ok]() {
      if (ok) {
        if (!session.empty()) sessions_.tool_reported(session, decision);  // it may be evicted now
        c->send(protocol::render(protocol::tool_result_ack_frame{id, decision}));
      } else {
        // Not in the log: the agent may report it again.
        if (const auto again = c->awaited_.find(decision); again != c->awaited_.end()) again->second.reported = false;
        desk_->delivery().release_tool_result(decision);
        c->send(protocol::render_error_frame(id, ok.error()));
      }
      --in_flight_;
    });
  };
  auto queued = log_.append(std::move(run), ack);
  if (!queued) ack(queued.error());
  return true;
}

void agent_service::over(const std::shared_ptr<turn>& t, turn_phase how) {
  t->at = how;
  try_hand_back(t);
}

void agent_service::try_hand_back(const std::shared_ptr<turn>& t) {
  if (!t->engine_holds && (t->at == turn::phase::answered || t->at == turn::phase::refused)) hand_back(*t);
}

void agent_service::hand_back(turn& t) {
  const std::string session = t.session.session;
  bool ended = false;
  if (t.went_out()) {
    sessions_.commit(std::move(t.session));
    ended = sessions_.release(session);
  } else {
    // Not delivered (refused, or the log refused the decision): the agent retries the same turn.
    ended = sessions_.abort(std::move(t.session));
  }
  if (ended) send_pending_ends(session);
  t.at = turn::phase::handed_back;
  --in_flight_;
}

std::string agent_service::health_json() const {
  const engine_description& d = engine_.describe();
  const std::shared_ptr<const routing_snapshot> routing = routing_.current();
  const routing_reloader::counts reloads = reloader_->counted();
  json h = {{"status", draining_ ? "draining" : "ok"},
            {"engine", config_.engine.name},
            {"model", d.model_id},
            {"fingerprint", d.fingerprint},
            {"registry_hash", routing->registry.hash},
            {"policy_hash", routing->policy.hash},
            {"schema_hash", routing->schema_hash},
            {"reloads", reloads.applied},
            {"reloads_failed", reloads.failed},
            {"sessions", sessions_.size()},
            {"escalations_pending", desk_->pending()},
            {"in_flight", in_flight_.load()},
            {"queued", scheduler_.queued()},
            {"uptime_s", round_decimals(ms_since(started_) / 1000.0, 3)}};
  if (reloads.last_applied_ms) h["reloaded_at"] = iso_utc(reloads.last_applied_ms);
  const std::vector<tools::mcp_server_state> servers = tools::mcp_server_states();
  if (!servers.empty()) {
    json& m = h["mcp_servers"] = json::object();
    for (const auto& s : servers) {
      m[s.name] = {{"up", s.up}, {"starts", s.starts}, {"failed_starts", s.failed_starts}};
      if (!s.last_error.empty()) m[s.name]["last_error"] = s.last_error;
    }
  }
  return render_json(h, false);
}

}  // namespace baton
