// GET /v1/escalations and GET /v1/escalations/{id}: the pending escalations from the desk's
// memory, the resolved ones read from the decision log on this component's own thread, never on an
// I/O thread (docs/architecture.md: SQLite never runs there).
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "adapters/runtime/escalation_desk.hpp"
#include "core/error.hpp"

namespace baton {

class escalation_reads {
 public:
  explicit escalation_reads(escalation_desk& desk) : desk_(desk) {}
  ~escalation_reads();  // waits for the reads under way

  // The body, or the error; `done` runs on the reads' thread, or at once when the log is not read.
  using answer = std::function<void(result<std::string>)>;

  // `status` pending | resolved | all (422 INVALID_REQUEST otherwise), at most `limit` of each,
  // oldest pending first, then the latest resolved.
  void list(std::string_view status, std::size_t limit, answer done);
  // One escalation, pending or resolved (404 NOT_FOUND).
  void get(const std::string& id, answer done);

 private:
  escalation_desk& desk_;
  boost::asio::thread_pool thread_{1};
};

}  // namespace baton
