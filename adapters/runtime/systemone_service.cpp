#include "adapters/runtime/systemone_service.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <variant>

#include "core/error_codes.hpp"
#include "core/ids.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

namespace {

using clock_type = std::chrono::steady_clock;

// The least confident answer's confidence (a noul answer's is max(p, 1 − p)): one number per
// decision for the log's confidence views.
double lowest_confidence(const response& r) {
  double low = 1;
  for (const auto& [id, a] : r.answers) {
    if (const auto* n = std::get_if<noul_answer>(&a)) {
      low = std::min(low, std::max(n->noul, 1 - n->noul));
    } else if (const auto* c = std::get_if<choice_answer>(&a)) {
      low = std::min(low, c->confidence);
    } else {
      low = std::min(low, std::get<score_answer>(a).confidence);
    }
  }
  return low;
}

}  // namespace

http_reply error_reply(const error& e, std::chrono::milliseconds retry_after) {
  http_reply r;
  r.status = e.status;
  render_error(e, r.body);
  if (e.status == 429 || e.status == 503) {
    const auto ms = std::max<std::int64_t>(1, retry_after.count());
    r.headers.emplace_back("Retry-After", std::to_string((ms + 999) / 1000));
    r.headers.emplace_back("retry-after-ms", std::to_string(ms));
  }
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

// One request on its way. Every member is used on the connection's strand only.
struct systemone_service::call {
  std::string id;
  std::string caller;
  std::function<void(http_reply)> done;
  boost::asio::steady_timer timer;
  clock_type::time_point received;
  double parse_ms = 0, queue_ms = 0, engine_ms = 0;
  std::string schema_hash;
  bool engine_back = false;  // the engine answered: the deadline no longer applies
  bool finished = false;

  call(std::string i, std::string c, clock_type::time_point r, boost::asio::any_io_executor strand,
       std::function<void(http_reply)> d)
      : id(std::move(i)), caller(std::move(c)), done(std::move(d)), timer(std::move(strand)), received(r) {}
};

systemone_service::systemone_service(const server_config& config, decision_engine& engine, scheduler& scheduler,
                                     log::decision_log& log, metrics& m)
    : config_(config), engine_(engine), scheduler_(scheduler), log_(log), metrics_(m) {}

bool systemone_service::serves(std::string_view model) const {
  if (model.empty() || model == engine_.describe().model_id) return true;
  const auto& aliases = config_.systemone.model_aliases;
  return std::find(aliases.begin(), aliases.end(), model) != aliases.end();
}

void systemone_service::decide(std::string id, std::string caller, std::string body, clock_type::time_point received,
                               boost::asio::any_io_executor strand, std::function<void(http_reply)> done) {
  // Counted before draining_ is read: the drain either sees this call or the call sees the drain.
  ++in_flight_;
  auto c = std::make_shared<call>(std::move(id), std::move(caller), received, strand, std::move(done));
  if (draining_) {
    finish(c, error_reply(make_error(503, codes::shutting_down, "the server is shutting down")));
    return;
  }
  const engine_description& d = engine_.describe();
  request_limits limits = d.limits;
  limits.max_body_bytes = config_.server.max_body_bytes;  // the HTTP layer read at most this much
  auto req = parse_request(body, limits, d.model_id);
  if (!req) {
    finish(c, error_reply(req.error()));
    return;
  }
  if (!serves(req->model)) {
    std::string served = "`" + d.model_id + "`";
    for (const std::string& a : config_.systemone.model_aliases) served += ", `" + a + "`";
    finish(c, error_reply(make_error(404, codes::model_not_found,
                                     "model \"" + req->model + "\" not found; this server answers for " + served)));
    return;
  }
  // The key's name (anonymous without keys): the engine's prefix cache serves no caller what
  // another's requests computed.
  req->cache_scope = c->caller;
  c->schema_hash = tools::schema_hash(*req);
  c->parse_ms = ms_since(c->received);
  const auto deadline = c->received + config_.server.request_deadline;
  auto submitted = scheduler_.submit(
      std::move(*req),
      [this, c](scheduled_result r) {
        boost::asio::post(c->timer.get_executor(), [this, c, r = std::move(r)]() mutable { on_engine(c, std::move(r)); });
      },
      deadline);
  if (!submitted) {
    const error& e = submitted.error();
    finish(c, error_reply(e.code == codes::overloaded ? make_error(503, codes::queue_full, e.message) : e));
    return;
  }
  c->timer.expires_at(deadline);
  c->timer.async_wait([this, c](boost::system::error_code ec) {
    // An answer queued on the strand before this handler ran wins, even though its cancel()
    // came too late to stop the handler.
    if (ec || c->finished || c->engine_back) return;
    metrics_.engine_error("systemone", codes::deadline_exceeded);
    finish(c, error_reply(make_error(504, codes::deadline_exceeded,
                                     "no answer from the engine within " +
                                         std::to_string(config_.server.request_deadline.count()) +
                                         " ms (server.request_deadline_ms)")));
  });
}

void systemone_service::on_engine(const std::shared_ptr<call>& c, scheduled_result&& r) {
  if (c->finished) return;  // past the deadline: the caller has its 504
  c->engine_back = true;
  c->timer.cancel();
  c->queue_ms = r.queue_ms;
  c->engine_ms = r.engine_ms;
  metrics_.stage_ms("systemone", metrics::stage::queue, r.queue_ms);
  if (!r.outcome) {
    metrics_.engine_error("systemone", r.outcome.error().code);
    finish(c, error_reply(r.outcome.error()));
    return;
  }
  metrics_.stage_ms("systemone", metrics::stage::engine, r.engine_ms);
  const engine_description& d = engine_.describe();
  auto resp = make_response(r.req, *r.outcome, config_.systemone.confidence, d.model_id);
  if (!resp) {
    metrics_.engine_error("systemone", resp.error().code);
    finish(c, error_reply(resp.error()));
    return;
  }
  http_reply ok;
  render_response(*resp, ok.body, 4);

  log::decision_record rec;
  // Its id is the request id the client got (x-typesafe-request-id): the row carries it in both.
  rec.id = c->id;
  rec.request_id = c->id;
  rec.session = c->caller;
  rec.created_ms = unix_ms();
  rec.queue_ms = c->queue_ms;
  rec.compile_ms = c->parse_ms;
  rec.engine_ms = c->engine_ms;
  rec.total_ms = ms_since(c->received);
  rec.engine = config_.engine.name;
  rec.model = d.model_id;
  rec.fingerprint = d.fingerprint;
  rec.schema_hash = c->schema_hash;
  const std::string state = r.req.state.is_string() ? r.req.state.get<std::string>() : render_json(r.req.state, false);
  // The media items as sent are part of what was decided on.
  rec.state_hash = state_hash(state, &r.req);
  if (log_.options().store_state) rec.state = state;
  render_answers(*resp, rec.answers, -1);
  rec.action = "answer";
  rec.lane = "systemone";
  rec.confidence = lowest_confidence(*resp);
  rec.cached_tokens = resp->usage.cached_tokens;
  metrics_.decision("systemone", "answered");

  const auto log_started = clock_type::now();
  if (!config_.durable_ack) {
    log_.append_unwaited(std::move(rec));
    finish(c, std::move(ok));
    return;
  }
  auto committed = [this, c, log_started, ok = std::move(ok)](result<void> done) mutable {
    boost::asio::post(c->timer.get_executor(), [this, c, log_started, ok = std::move(ok), done]() mutable {
      metrics_.stage_ms("systemone", metrics::stage::log, ms_since(log_started));
      // Not in the log, so not answered: the client may send it again.
      finish(c, done ? std::move(ok) : error_reply(done.error()));
    });
  };
  auto queued = log_.append(std::move(rec), committed);
  if (!queued) committed(queued.error());
}

void systemone_service::finish(const std::shared_ptr<call>& c, http_reply reply) {
  if (c->finished) return;
  c->finished = true;
  c->timer.cancel();
  if (reply.status == 200) metrics_.stage_ms("systemone", metrics::stage::total, ms_since(c->received));
  // Moved out: a late engine answer still holds the call, but no longer the connection.
  auto done = std::move(c->done);
  done(std::move(reply));
  --in_flight_;
}

std::string systemone_service::models_json() const {
  const engine_description& d = engine_.describe();
  json models = json::array();
  models.push_back({{"name", d.model_id}, {"description", d.description}, {"release_date", d.release_date}});
  for (const std::string& a : config_.systemone.model_aliases) {
    models.push_back({{"name", a}, {"description", "an alias of " + d.model_id}, {"release_date", d.release_date}});
  }
  return render_json(json{{"models", std::move(models)}}, false);
}

}  // namespace baton
