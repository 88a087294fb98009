#include "adapters/cli/serve_cli.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <ostream>

#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/exit_codes.hpp"
#include "adapters/log/decision_log.hpp"
#include "adapters/server/running_server.hpp"

namespace baton {

namespace {

constexpr const char* serve_help = R"(Usage: baton serve [--config FILE] [--listen HOST:PORT] [--db PATH]
                   [--model-id NAME]

Runs the routing server: agents connect to ws://HOST:PORT/v1/agent (docs/protocol.md);
SystemOne/Jev clients POST to http://HOST:PORT/v1/systemone (docs/systemone.md) and list
GET /v1/models; GET /health says which engine, model, registry and policy it serves and
GET /metrics counts what it did (Prometheus). Everything else comes from the config file
(default config/baton.yaml; format in adapters/runtime/README.md). With no API keys in the config
(auth.keys) it listens on loopback only.

Options:
  --config FILE       the server configuration (default config/baton.yaml)
  --listen HOST:PORT  overrides server.listen (port 0: any free port; the chosen one is printed)
  --db PATH|URL       overrides the config's log: a SQLite file (relative to the working directory,
                      as `baton log --db` reads it) or a postgresql:// URL (the password
                      from the config's log.password or libpq's PGPASSWORD or ~/.pgpass)
  --model-id NAME     clef: overrides engine.model_id, the name /v1/models, responses and the
                      log give the model (default: ORG/NAME for a Hugging Face cache snapshot
                      models--ORG--NAME/snapshots/REV, else the release directory's name)

SIGINT or SIGTERM stops it gracefully: no new connections, in-flight decisions finish, sessions
get a close frame, the decision log is flushed.

SIGHUP reloads the registry and the policy (as POST /v1/admin/reload does for an admin key):
both files are read and checked again, against the serving engines' limits, before anything
changes; then the new ones serve from the next turn on (a turn in flight finishes with the old
ones). A reload that fails changes nothing and logs why (FILE:LINE: reason). Every reload, applied
or not, is a row of the decision log (table `reloads`); GET /health shows the serving hashes.
Pending escalations whose tool no longer fits are denied, as their deadline would deny them.

Exit status: 0 after a graceful stop, 64 usage, 78 a bad configuration or a failed start.
)";

}  // namespace

int serve_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  command_args a;
  if (auto problem = parse_args(args, {"--config", "--listen", "--db", "--model-id"}, {}, a)) {
    return usage_error(err, *problem, "serve");
  }
  if (a.help) {
    out << serve_help;
    return exit_ok;
  }
  if (a.file) return usage_error(err, "unexpected argument " + *a.file, "serve");
  const std::string file(a.get("--config").value_or("config/baton.yaml"));
  auto config = load_server_config(file);
  if (!config) {
    err << "baton serve: " << config.error().message << "\n";
    return exit_config;
  }
  if (const auto listen = a.get("--listen"); listen && !parse_listen(*listen, config->server)) {
    return usage_error(err, "--listen takes HOST:PORT, e.g. 127.0.0.1:8470", "serve");
  }
  if (const auto db = a.get("--db")) {
    if (db->empty()) return usage_error(err, "--db needs a path", "serve");
    if (log::is_postgres_url(*db)) {
      if (auto problem = log::postgres_url_problem(std::string(*db))) return usage_error(err, "--db: " + *problem, "serve");
      config->log.url = std::string(*db);
    } else {
      config->log.url.clear();
      config->log.path = std::filesystem::path(*db).lexically_normal();
    }
  }
  if (const auto id = a.get("--model-id")) {
    if (id->empty()) return usage_error(err, "--model-id needs a name", "serve");
    if (config->engine.name != "clef") {
      return usage_error(err, "--model-id names the clef engine's model (engine.name: clef)", "serve");
    }
    config->engine.clef.model_id = std::string(*id);
  }

  // Standard output carries the listening line only; the server's log lines go to standard error.
  log_to_stderr();

  // Every thread started from here on inherits the mask: the signals wait for sigwait below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<running_server> server;
  try {
    server = running_server::start(*config);
  } catch (const error_exception& e) {
    err << "baton serve: " << e.err().message << "\n";
    return exit_config;
  } catch (const std::exception& e) {
    err << "baton serve: " << e.what() << "\n";
    return exit_config;
  }
  out << "baton: listening on http://" << server->host() << ":" << server->port() << std::endl;
  int sig = 0;
  // A reload's outcome is logged by the reloader; a failed one leaves the old files serving.
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    spdlog::info("baton: SIGHUP received, reloading the registry and the policy");
    server->reload("signal");
  }
  spdlog::info("baton: {} received, stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server->stop();
  return exit_ok;
}

}  // namespace baton
