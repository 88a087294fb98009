#include "adapters/server/running_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "adapters/runtime/agent_service.hpp"
#include "adapters/runtime/mcp_gateway.hpp"
#include "adapters/runtime/handler_guard.hpp"
#include "adapters/server/listener.hpp"
#include "core/error_codes.hpp"
#include "engine/factory/make_engine.hpp"
#include "engine/scheduler.hpp"
#include "tools/mcp_client.hpp"

namespace baton {

namespace {

[[noreturn]] void start_failure(std::string code, std::string message) {
  throw error_exception(make_error(500, std::move(code), std::move(message)));
}

// The engine the config names; one that cannot be made stops the start.
std::unique_ptr<decision_engine> start_engine(const engine_options& options) {
  auto made = make_engine(options);
  if (!made) throw error_exception(made.error());
  return std::move(*made);
}

}  // namespace

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto a = boost::asio::ip::make_address(host, ec);
  return !ec && a.is_loopback();
}

// Members in destruction order: the io_context goes last, so handlers it still holds (and destroys
// with it) never outlive what they point at.
struct running_server::impl {
  boost::asio::io_context ioc;
  server_config config;
  std::unique_ptr<decision_engine> engine;
  std::unique_ptr<log::decision_log> log;
  baton::metrics metrics;
  std::unique_ptr<authenticator> auth;
  std::unique_ptr<scheduler> sched;
  std::unique_ptr<decision_engine> fallback_engine;  // routing.fallback, with its own scheduler
  std::unique_ptr<scheduler> fallback_sched;
  std::unique_ptr<agent_service> service;
  std::unique_ptr<mcp_gateway> gateway;  // /mcp: its sessions decide through service
  std::unique_ptr<systemone_service> systemone;
  std::unique_ptr<http_api> api;
  std::unique_ptr<listener> server;
  std::vector<std::thread> threads;

  std::mutex mutex;
  std::condition_variable stopped_cv;
  bool stopping = false;
  bool stopped = false;

  // MCP servers that said their tools changed, reloaded together a moment later (a server that
  // registers several tools at once sends a notification for each).
  std::set<std::string> tools_changed;  // under `mutex`
  std::unique_ptr<boost::asio::steady_timer> tools_timer;
  // At most one such reload each 5 s: each starts every server afresh, and a server could announce
  // changes without end.
  std::chrono::steady_clock::time_point tools_reloaded{};  // under `mutex`

  void mcp_tools_changed(const std::string& server, std::chrono::milliseconds after) {
    std::lock_guard lock(mutex);
    if (stopping || !service) return;
    const bool armed = !tools_changed.empty();
    tools_changed.insert(server);
    if (armed) return;
    const auto now = std::chrono::steady_clock::now();
    tools_timer->expires_at(std::max(now + after, tools_reloaded + std::chrono::seconds(5)));
    tools_timer->async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      std::set<std::string> servers;  // taken: a change announced from now on arms the timer again
      {
        std::lock_guard lock(mutex);
        if (stopping) return;
        servers.swap(tools_changed);
        tools_reloaded = std::chrono::steady_clock::now();
      }
      std::string who = "mcp:";
      for (const std::string& s : servers) who += (who.size() > 4 ? "," : "") + s;
      service->reloader().reload(who, [this, servers](result<routing_reloader::report> r) {
        if (!r && r.error().code == codes::reload_in_progress) {  // another reload: after it
          for (const std::string& s : servers) mcp_tools_changed(s, std::chrono::seconds(1));
        }
      });
    });
  }

  ~impl() {
    // A start that failed half-way: nothing ran yet, so nothing to drain.
    ioc.stop();
    for (auto& t : threads) t.join();
  }
};

running_server::running_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

running_server::~running_server() { stop(); }

std::unique_ptr<running_server> running_server::start(const server_config& config,
                                                      std::unique_ptr<decision_engine> engine) {
  auto p = std::make_unique<impl>();
  p->config = config;
  if (p->config.auth.keys.empty() && !is_loopback(p->config.server.host)) {
    const std::string loopback = p->config.server.host.find(':') == std::string::npos ? "127.0.0.1" : "::1";
    spdlog::warn("no API keys are configured (auth.keys): listening on {} instead of {}, so that only this machine "
                 "can call", loopback, p->config.server.host);
    p->config.server.host = loopback;
  }
  // Command tools run with baton's environment, less the variables that hold API keys.
  for (const api_key& k : p->config.auth.keys) {
    if (!k.env.empty()) p->config.executors.withheld_env.push_back(k.env);
  }
  for (const engine_options* e : {&p->config.engine, p->config.fallback ? &*p->config.fallback : nullptr}) {
    if (e && !e->systemone.key_env.empty()) p->config.executors.withheld_env.push_back(e->systemone.key_env);
  }
  p->tools_timer = std::make_unique<boost::asio::steady_timer>(p->ioc);
  p->config.executors.mcp_tools_changed = [q = p.get()](const std::string& server) {
    q->mcp_tools_changed(server, std::chrono::milliseconds(250));
  };
  p->engine = engine ? std::move(engine) : start_engine(config.engine);
  if (p->config.fallback) p->fallback_engine = start_engine(*p->config.fallback);
  // What a reload checks, checked the same way: the questions fit both engines.
  auto routing = load_routing(p->config, p->engine->describe().limits,
                              p->fallback_engine ? &p->fallback_engine->describe().limits : nullptr,
                              p->ioc.get_executor());
  if (!routing) throw error_exception(routing.error());
  p->log = log::decision_log::open(p->config.log);
  p->auth = std::make_unique<authenticator>(p->config.auth);
  scheduler_options so{p->config.engine.max_batch, p->config.engine.queue_capacity, {}};
  so.on_batch = [m = &p->metrics](std::size_t n, double) { m->batch(n); };
  p->sched = std::make_unique<scheduler>(*p->engine, std::move(so));
  std::optional<agent_service::fallback_engine> fallback;
  if (p->config.fallback) {
    const engine_options& f = *p->config.fallback;
    p->fallback_sched = std::make_unique<scheduler>(*p->fallback_engine, scheduler_options{f.max_batch, f.queue_capacity, {}});
    fallback.emplace(agent_service::fallback_engine{*p->fallback_engine, *p->fallback_sched, f.timeout});
  }
  p->service = std::make_unique<agent_service>(p->config, *p->engine, *p->sched, *p->log, p->metrics, std::move(*routing),
                                               p->ioc.get_executor(), fallback);
  p->service->desk().start();
  p->systemone = std::make_unique<systemone_service>(p->config, *p->engine, *p->sched, *p->log, p->metrics);
  p->gateway = std::make_unique<mcp_gateway>(p->config, *p->service, p->ioc.get_executor());
  p->api = std::make_unique<http_api>(p->config, *p->auth, p->metrics, *p->systemone, *p->service, *p->gateway, [q = p.get()] {
    const session_table::counts gone = q->service->sessions().counted();  // one look, one lock
    metrics::scraped now{
        {
            {"baton_engine_queue_depth", "Requests waiting for the engine.", double(q->sched->queued())},
            {"baton_in_flight_decisions", "Decisions received and not yet answered (agent and SystemOne).",
             double(q->service->in_flight() + q->systemone->in_flight())},
            {"baton_escalations_pending", "Escalations waiting for a person.", double(q->service->desk().pending())},
            {"baton_sessions", "Agent sessions held.", double(q->service->sessions().size())},
            {"baton_session_bytes", "What the agent sessions held cost in memory, as server.max_history_bytes_total counts it.",
             double(q->service->sessions().held_bytes())},
        },
        {
            {"baton_sessions_ended_total", "Agent sessions ended by their agents.", double(gone.ended)},
            {"baton_sessions_evicted_total", "Idle agent sessions forgotten to make room for others.",
             double(gone.evicted)},
            {"baton_sessions_expired_total", "Agent sessions forgotten after server.session_idle_s unused.",
             double(gone.expired)},
        },
        q->engine->cache_stats(),
    };
    // Each MCP server the registry's tools run on (names need no escaping: [A-Za-z0-9_-]).
    const std::vector<tools::mcp_server_state> servers = tools::mcp_server_states();
    for (const auto& s : servers) {
      now.gauges.push_back({"baton_mcp_server_up", "Whether the MCP server is running and initialized (1) or not (0).",
                            s.up ? 1.0 : 0.0, "server=\"" + s.name + "\""});
    }
    for (const auto& s : servers) {
      now.counters.push_back({"baton_mcp_server_starts_total", "Starts of the MCP server that ended initialized.",
                              double(s.starts), "server=\"" + s.name + "\""});
    }
    for (const auto& s : servers) {
      now.counters.push_back({"baton_mcp_server_failed_starts_total", "Starts of the MCP server that failed.",
                              double(s.failed_starts), "server=\"" + s.name + "\""});
    }
    return now;
  });
  try {
    p->server = std::make_unique<listener>(p->ioc, p->config.server, *p->service, *p->systemone, *p->api);
  } catch (const std::exception& e) {
    start_failure(codes::listen_failed, "cannot listen on " + p->config.server.host + ":" +
                                       std::to_string(p->config.server.port) + ": " + e.what());
  }
  p->server->start();
  for (std::size_t i = 0; i < std::max<std::size_t>(1, p->config.server.io_threads); ++i) {
    p->threads.emplace_back([io = &p->ioc] { run_io(*io); });
  }
  const engine_description& d = p->engine->describe();
  spdlog::info("baton serving ws://{0}:{1}/v1/agent and http://{0}:{1}/v1/systemone: engine {2}, model {3}, "
               "registry {4}, policy {5}, log {6}",
               p->config.server.host, p->server->port(), p->config.engine.name, d.model_id,
               p->config.registry.string(), p->config.policy.string(), p->config.log.where());
  if (p->auth->open()) {
    spdlog::warn("no API keys are configured (auth.keys): every caller on this machine is served without a key");
  } else {
    std::string names;
    for (const api_key& k : p->config.auth.keys) names += (names.empty() ? "" : ", ") + k.name + " (" + std::string(to_string(k.role)) + ")";
    spdlog::info("API keys: {}", names);
  }
  return std::unique_ptr<running_server>(new running_server(std::move(p)));
}

unsigned short running_server::port() const noexcept { return impl_->server->port(); }

const std::string& running_server::host() const noexcept { return impl_->config.server.host; }

std::string running_server::health_json() const { return impl_->service->health_json(); }

result<routing_reloader::report> running_server::reload(const std::string& who) {
  std::promise<result<routing_reloader::report>> done;
  auto answered = done.get_future();
  impl_->service->reloader().reload(who, [&done](result<routing_reloader::report> r) { done.set_value(std::move(r)); });
  return answered.get();
}

void running_server::stop() {
  impl& p = *impl_;
  {
    std::unique_lock lock(p.mutex);
    if (p.stopping) {
      p.stopped_cv.wait(lock, [&] { return p.stopped; });
      return;
    }
    p.stopping = true;
  }
  const auto drain_limit = p.config.engine.timeout + (p.config.fallback ? p.config.fallback->timeout : std::chrono::milliseconds(0)) +
                           p.config.executors.default_timeout + std::chrono::seconds(1);
  p.gateway->drain();
  p.server->stop(std::chrono::duration_cast<std::chrono::milliseconds>(drain_limit), [&p] { p.ioc.stop(); });
  for (auto& t : p.threads) t.join();
  p.threads.clear();
  p.sched->stop();
  if (p.fallback_sched) p.fallback_sched->stop();
  p.log->close();
  p.server.reset();
  spdlog::info("baton stopped");
  {
    std::lock_guard lock(p.mutex);
    p.stopped = true;
  }
  p.stopped_cv.notify_all();
}

void running_server::wait() {
  std::unique_lock lock(impl_->mutex);
  impl_->stopped_cv.wait(lock, [&] { return impl_->stopped; });
}

}  // namespace baton
