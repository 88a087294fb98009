// config/baton.yaml: the server, its engine, the registry and policy it routes with,
// the decision log and the executors' limits. Relative paths are relative to the config file.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "adapters/log/decision_log.hpp"
#include "adapters/runtime/api_keys.hpp"
#include "core/answers.hpp"
#include "core/error.hpp"
#include "engine/factory/engine_options.hpp"
#include "tools/executor.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

struct server_options {
  std::string host = "127.0.0.1";
  unsigned short port = 8470;  // 0: an ephemeral port
  std::size_t io_threads = 2;
  std::size_t max_frame_bytes = 1u << 20;
  std::size_t max_frames_per_second = 1000;  // per connection
  std::size_t max_bad_frames = 10;           // bad frames in a row (or rate-limit hits) before closing
  std::size_t max_history_bytes = 4u << 20;  // per session, rendered
  std::size_t max_history_bytes_total = std::size_t(512) << 20;  // what all sessions cost as held (session_table)
  std::size_t max_sessions = 100000;
  std::chrono::seconds session_idle{3600};   // a session unused this long is forgotten
  std::size_t max_pending_tool_results = 1024;  // per connection: agent-run decisions awaiting tool_result
  std::size_t max_body_bytes = 32u << 20;       // an HTTP request body, after gzip; beyond: 413
  std::chrono::milliseconds request_deadline{9000};  // SystemOne: 504 past it (the SDKs give up at 10 s)
  std::size_t max_connections = 10000;              // open at once; beyond: 503 SERVER_BUSY and close
  std::size_t max_buffered_bytes = 512u << 20;      // request bodies held at once; beyond: 503 SERVER_BUSY
  // Browsers (docs/systemone.md, "Browsers"): the origins besides the server's own whose pages
  // may call it ("scheme://host[:port]", lower case), and the Host names besides loopback and the
  // listen address that it answers (lower case, no port; an IPv6 address without brackets).
  std::vector<std::string> allowed_origins;
  std::vector<std::string> allowed_hosts;
};

// The SystemOne endpoint (docs/systemone.md): what it answers for and how.
struct systemone_options {
  std::vector<std::string> model_aliases{"jev-latest"};  // names the served model also answers to
  confidence_metric confidence = confidence_metric::p_max;
};

struct server_config {
  std::filesystem::path file;  // where it was read from
  server_options server;
  engine_options engine;
  // routing.fallback: the larger engine asked when the policy's lane says fallback (same keys
  // as `engine`); none: a fallback decision goes to the agent as it is.
  std::optional<engine_options> fallback;
  // routing.keep_first, routing.drop_fraction: how an agent's history that no longer fits the
  // engine's window loses its oldest events.
  tools::event_dropping history;
  // routing.max_options: a registry with more tool options (finish included) is routed in two
  // stages, group then tool (tools/schema_compiler.hpp, compile_stages).
  std::size_t max_options = 64;
  std::filesystem::path registry = "tools.yaml";
  std::filesystem::path policy = "policy.yaml";
  log::log_options log;
  auth_options auth;
  systemone_options systemone;
  bool durable_ack = true;  // send a decision only once its row is committed
  tools::executor_limits executors;
};

// 422 INVALID_CONFIG "FILE:LINE: reason" for the first problem; unknown keys are refused. API keys
// are read here from their environment variables or files (a missing one is a problem).
result<server_config> parse_server_config(std::string_view yaml_text, const std::filesystem::path& file);
result<server_config> load_server_config(const std::filesystem::path& file);

// "HOST:PORT" (IPv4 dotted, "localhost" or [IPv6]) into the options; false when malformed.
bool parse_listen(std::string_view text, server_options& out);

}  // namespace baton
