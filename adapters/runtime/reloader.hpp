// Hot reload (adapters/runtime/README.md, "Reload"): SIGHUP and POST /v1/admin/reload read the
// registry and the policy again, check everything as start-up does (against the serving engine's
// limits and the fallback engine's), log the reload, then swap the serving snapshot in one step.
// A turn in flight finishes on the snapshot it started with; a reload that fails changes nothing
// and says why. Pending escalations whose tool no longer fits are then resolved
// (escalation_desk::swap_and_resolve_misfits).
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "adapters/log/decision_log.hpp"
#include "adapters/runtime/escalation_desk.hpp"
#include "adapters/runtime/routing.hpp"
#include "adapters/runtime/server_config.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"

namespace baton {

class routing_reloader {
 public:
  // `limits`: the serving engine's; `fallback_limits`: the fallback engine's (null without one).
  // `io` runs the new executors and the completions.
  routing_reloader(const server_config& config, routing_state& routing, escalation_desk& desk, log::decision_log& log,
                   const request_limits& limits, const request_limits* fallback_limits, boost::asio::any_io_executor io);
  ~routing_reloader();  // waits for a load under way (it ends at its MCP servers' timeouts at the latest)

  // What an applied reload changed.
  struct report {
    std::string id;  // its row in the log's `reloads` (l-…)
    std::string old_registry_hash, old_policy_hash;
    std::string new_registry_hash, new_policy_hash;
    std::size_t escalations_resolved = 0;  // pending escalations denied because their tool no longer fits
  };
  using done_callback = std::function<void(result<report>)>;

  // Reloads config.registry and config.policy for `who` (the API key's name, or "signal"), read on
  // a thread of the reloader's own (listing MCP servers may take seconds: not an I/O thread's). `done`
  // runs once, on an I/O thread (inline when refused at once): with the report once the reload's
  // row is durable, the new snapshot serves and the misfits' resolutions are durable; or with 422
  // INVALID_REGISTRY / INVALID_POLICY ("FILE:LINE: reason"; that refusal is logged too), 409
  // RELOAD_IN_PROGRESS while another reload is being applied, or the log's error (the reload is
  // then not applied: what is not in the log does not serve). On any error nothing changed.
  void reload(std::string who, done_callback done);

  // For /health: reloads applied and refused since start-up, and when the last one was applied.
  struct counts {
    std::size_t applied = 0, failed = 0;
    std::int64_t last_applied_ms = 0;  // unix ms; 0 when none
  };
  counts counted() const;

 private:
  void written(log::reload_record row, result<std::shared_ptr<const routing_snapshot>> loaded, result<void> ok,
               done_callback done);
  void refused();  // counts a reload that changed nothing, and lets the next one in
  void load(std::string who, done_callback done);  // on loader_: read, check and log

  const server_config& config_;
  routing_state& routing_;
  escalation_desk& desk_;
  log::decision_log& log_;
  request_limits limits_;
  std::optional<request_limits> fallback_limits_;
  boost::asio::any_io_executor io_;
  mutable std::mutex mutex_;
  bool busy_ = false;  // a reload is between its load and its done
  std::thread loader_;  // the last reload's load; joined before the next and at destruction
  counts counts_;
};

}  // namespace baton
