// What decisions are made with: the registry, the policy, the executors and the
// compiled questions, loaded and checked together into one immutable snapshot: at start-up, and
// again on each reload (SIGHUP, POST /v1/admin/reload), which swaps the whole snapshot at once.
// A turn takes the serving snapshot when it starts and keeps it to its end.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "adapters/runtime/server_config.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "core/request.hpp"
#include "policies/policy.hpp"
#include "tools/executor.hpp"
#include "tools/registry.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

struct routing_snapshot {
  tools::registry registry;
  policies::policy policy;
  std::unordered_map<std::string, std::unique_ptr<tools::executor>> executors;  // tool id → executor
  request questions;         // what every turn asks (compile_questions); a turn adds its history
  std::string schema_hash;  // of those questions (every turn without extra questions)
  // A registry routed in two stages (routing.max_options): `questions` is the first stage, and
  // schema_hash is over both.
  std::optional<tools::staged_questions> stages;
};

// Who runs `tool`: its executor's kind (http, command), or agent for a tool the registry has none
// for.
std::string executor_kind(const routing_snapshot& routing, const std::string& tool);

// Reads config.registry and config.policy and checks everything before anything is used: the
// registry against `limits` (the serving engine's), the policy against the registry, the
// questions against `limits` and, when a fallback engine serves, `fallback_limits` too; then
// makes the executors (`io` runs them). 422 INVALID_REGISTRY or INVALID_POLICY, "FILE:LINE:
// reason", for the first problem.
result<std::shared_ptr<const routing_snapshot>> load_routing(const server_config& config, const request_limits& limits,
                                                             const request_limits* fallback_limits,
                                                             boost::asio::any_io_executor io);

// The snapshot that serves now. Readers take it (a shared_ptr, so it lives as long as anyone
// holds it) from any thread; a reload replaces it in one step.
class routing_state {
 public:
  explicit routing_state(std::shared_ptr<const routing_snapshot> first) : current_(std::move(first)) {}
  std::shared_ptr<const routing_snapshot> current() const noexcept { return current_.load(); }
  void replace(std::shared_ptr<const routing_snapshot> next) noexcept { current_.store(std::move(next)); }

 private:
  std::atomic<std::shared_ptr<const routing_snapshot>> current_;
};

}  // namespace baton
