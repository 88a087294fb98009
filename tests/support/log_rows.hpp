// Rows for the decision log's tests (SQLite and PostgreSQL alike), and a counter of the
// durable callbacks a test waits for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "adapters/log/decision_log.hpp"
#include "support/files.hpp"

namespace baton::log {

inline decision_record decision(int i) {
  decision_record r;
  r.id = "d-" + std::to_string(i);
  r.request_id = std::to_string(100 + i);
  r.session = "ticket-" + std::to_string(i % 3);
  r.turn = i;
  r.created_ms = 1700000000123 + i;
  r.queue_ms = 0.25;
  r.compile_ms = 0.5;
  r.engine_ms = 1.75;
  r.policy_ms = 0.125;
  r.total_ms = 2.625;
  r.engine = "keyword";
  r.model = "baton-keyword-1";
  r.fingerprint = "sha256:fp";
  r.registry_hash = "sha256:reg";
  r.policy_hash = "sha256:pol";
  r.schema_hash = "sha256:sch";
  r.state_hash = "sha256:state-" + std::to_string(i);
  r.state = "the customer wrote \"refund\" ünïcode";
  r.answers = R"({"tool":{"choice":"refund","confidence":0.61,"probabilities":{"refund":0.61,"reset":0.39}}})";
  r.action = i % 2 ? "escalate" : "execute";
  r.tool = "refund";
  r.lane = i % 2 ? "rule:always_escalate" : "lane:default";
  r.confidence = i % 2 ? 0.31 : 0.92;
  r.arguments = test::parse(R"({"reason":"duplicate","notify":true})");
  r.proposal = test::parse(R"({"tool":"refund","arguments":{"note":"twice"}})");
  return r;
}

inline tool_run_record tool_run(int i, const std::string& decision_id) {
  tool_run_record r;
  r.id = "r-" + std::to_string(i);
  r.decision = decision_id;
  r.tool = "refund";
  r.executor = "http";
  r.created_ms = 1700000001000 + i;
  r.duration_ms = 12.5;
  r.ok = true;
  r.output = test::parse(R"({"refunded":true})");
  r.attempts = 1;
  return r;
}

// Counts callbacks and waits for them.
class outcomes {
 public:
  durable_callback callback() {
    return [this](result<void> r) {
      std::lock_guard lock(mutex_);
      if (r) {
        ++ok_;
      } else {
        errors_.push_back(r.error());
      }
      changed_.notify_all();
    };
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return ok_ + errors_.size() >= n; });
  }
  std::size_t ok() {
    std::lock_guard lock(mutex_);
    return ok_;
  }
  std::vector<error> errors() {
    std::lock_guard lock(mutex_);
    return errors_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t ok_ = 0;
  std::vector<error> errors_;
};

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);) out.push_back(l);
  return out;
}

}  // namespace baton::log
