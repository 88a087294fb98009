// `baton serve`: everything one server needs, built from config/baton.yaml and run on its own
// I/O threads. Tests start it in-process on an ephemeral port.
#pragma once

#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "adapters/runtime/reloader.hpp"
#include "adapters/runtime/server_config.hpp"
#include "engine/decision_engine.hpp"

namespace baton {

class running_server {
 public:
  // Loads the engine (or takes `engine`), the registry, the policy and the executors, opens the
  // log and listens. Throws error_exception when anything is wrong: this is start-up.
  static std::unique_ptr<running_server> start(const server_config& config,
                                               std::unique_ptr<decision_engine> engine = nullptr);
  ~running_server();  // stop()

  unsigned short port() const noexcept;
  const std::string& host() const noexcept;  // what it listens on (loopback when no keys are configured)
  std::string health_json() const;

  // Reloads the registry and the policy (routing_reloader::reload) for `who`, and waits for the
  // outcome: SIGHUP's way. Not from an I/O thread.
  result<routing_reloader::report> reload(const std::string& who);

  // Graceful shutdown: stop accepting, finish in-flight decisions, close sessions
  // with 1001, stop the engine scheduler, flush the log. Idempotent; blocks until done.
  void stop();
  // Blocks until stop() has run (from another thread or a signal).
  void wait();

 private:
  struct impl;
  explicit running_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace baton
