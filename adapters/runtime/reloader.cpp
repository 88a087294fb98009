#include "adapters/runtime/reloader.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "core/error_codes.hpp"
#include "core/ids.hpp"

namespace baton {

routing_reloader::routing_reloader(const server_config& config, routing_state& routing, escalation_desk& desk,
                                   log::decision_log& log, const request_limits& limits,
                                   const request_limits* fallback_limits, boost::asio::any_io_executor io)
    : config_(config), routing_(routing), desk_(desk), log_(log), limits_(limits),
      fallback_limits_(fallback_limits ? std::optional<request_limits>(*fallback_limits) : std::nullopt),
      io_(std::move(io)) {}

void routing_reloader::reload(std::string who, done_callback done) {
  {
    std::lock_guard lock(mutex_);
    if (busy_) {
      // No row: nothing was read. Said here, since a SIGHUP has nobody to answer.
      spdlog::warn("reload by {} refused: another reload is being applied", who);
      return done(make_error(409, codes::reload_in_progress, "another reload is being applied; try again in a moment"));
    }
    busy_ = true;
  }
  // The previous load's thread has finished its work (busy_ was let go after it).
  if (loader_.joinable()) loader_.join();
  loader_ = std::thread([this, who = std::move(who), done = std::move(done)]() mutable { load(std::move(who), std::move(done)); });
}

routing_reloader::~routing_reloader() {
  if (loader_.joinable()) loader_.join();
}

void routing_reloader::load(std::string who, done_callback done) {
  // Nothing else swaps the snapshot while busy_: this is what the new one replaces.
  const std::shared_ptr<const routing_snapshot> old = routing_.current();
  auto loaded = load_routing(config_, limits_, fallback_limits_ ? &*fallback_limits_ : nullptr, io_);
  log::reload_record row;
  row.id = new_id('l');
  row.created_ms = unix_ms();
  row.who = std::move(who);
  row.registry_file = config_.registry.string();
  row.policy_file = config_.policy.string();
  row.old_registry_hash = old->registry.hash;
  row.old_policy_hash = old->policy.hash;
  if (loaded) {
    row.outcome = "ok";
    row.new_registry_hash = (*loaded)->registry.hash;
    row.new_policy_hash = (*loaded)->policy.hash;
  } else {
    row.outcome = "failed";
    row.reason = loaded.error().message;
  }
  // The row is durable before the new snapshot serves: every decision made with it comes after
  // its reload in the log.
  auto on_durable = [this, row, loaded, done](result<void> ok) mutable {
    boost::asio::post(io_, [this, row = std::move(row), loaded = std::move(loaded), ok, done = std::move(done)]() mutable {
      written(std::move(row), std::move(loaded), ok, std::move(done));
    });
  };
  if (auto queued = log_.append(row, on_durable); !queued) on_durable(queued.error());
}

void routing_reloader::written(log::reload_record row, result<std::shared_ptr<const routing_snapshot>> loaded,
                               result<void> ok, done_callback done) {
  if (!loaded) {
    if (!ok) spdlog::error("reload {}: its refusal is not in the log: {}", row.id, ok.error().message);
    spdlog::warn("reload {} by {} refused, nothing changed: {}", row.id, row.who, loaded.error().message);
    refused();
    return done(loaded.error());
  }
  if (!ok) {
    spdlog::error("reload {} by {} not applied: it is not in the log: {}", row.id, row.who, ok.error().message);
    refused();
    return done(ok.error());
  }
  {
    std::lock_guard lock(mutex_);
    ++counts_.applied;
    counts_.last_applied_ms = row.created_ms;
  }
  report r{row.id, row.old_registry_hash, row.old_policy_hash, row.new_registry_hash, row.new_policy_hash, 0};
  // The desk swaps the snapshot under its own lock, then sweeps the escalations that no longer fit.
  desk_.swap_and_resolve_misfits(std::move(*loaded), row.id, [this, r = std::move(r), who = row.who, done = std::move(done)](std::size_t n) mutable {
    r.escalations_resolved = n;
    spdlog::info("reload {} by {} applied: registry {} -> {}, policy {} -> {}; {} pending escalations denied as their "
                 "tool no longer fits",
                 r.id, who, r.old_registry_hash, r.new_registry_hash, r.old_policy_hash, r.new_policy_hash, n);
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
    }
    done(std::move(r));
  });
}

void routing_reloader::refused() {
  std::lock_guard lock(mutex_);
  ++counts_.failed;
  busy_ = false;
}

routing_reloader::counts routing_reloader::counted() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace baton
