// The engine scheduler: model work never runs on I/O threads. Requests queue here
// (bounded) and one worker thread hands whatever has arrived together to the engine as one batch;
// records stay independent, so batching never changes a record's probabilities.
// An engine that throws despite its contract fails that batch with 500 INFERENCE_FAILED; the worker
// goes on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "engine/decision_engine.hpp"

namespace baton {

struct scheduler_options {
  std::size_t max_batch = 64;         // requests per engine call
  std::size_t queue_capacity = 4096;  // waiting requests; beyond, submit() answers 503 OVERLOADED
  // Called on the worker thread after each engine call (metrics): its size and duration.
  std::function<void(std::size_t batch_size, double engine_ms)> on_batch;
};

struct scheduled_result {
  request req;  // the request submitted, handed back for make_response
  result<decision> outcome;
  double queue_ms = 0;   // submit → the batch started
  double engine_ms = 0;  // the batch's engine call
  std::size_t batch_size = 0;
};

class scheduler {
 public:
  using callback = std::function<void(scheduled_result)>;
  using time_point = std::chrono::steady_clock::time_point;

  scheduler(decision_engine& engine, scheduler_options options);
  ~scheduler();  // stop()
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  // Queues one validated request (moved from only when queued). `done` runs once on the worker
  // thread. Never blocks: a full queue is 503 OVERLOADED, a stopped scheduler 503 SHUTTING_DOWN
  // (and `done` is not called). A request with a `deadline` is refused at once (503 OVERLOADED)
  // when the work queued before it would take longer than that, at the engine's recent pace; one
  // still queued at its deadline is not run: `done` gets 504 DEADLINE_EXCEEDED, so an answer
  // nobody waits for costs no engine time.
  result<void> submit(request&& req, callback done, time_point deadline = time_point::max());

  // Answers everything already queued, then joins the worker. Idempotent.
  void stop();

  std::size_t queued() const;

 private:
  struct job {
    request req;
    callback done;
    time_point queued_at;
    time_point deadline;
  };
  void work();

  decision_engine& engine_;
  scheduler_options options_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<job> queue_;
  double ms_per_request_ = 0;  // the engine's recent pace: a moving average over batches
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace baton
