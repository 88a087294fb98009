#include "engine/scheduler.hpp"

#include <exception>
#include <string>
#include <vector>

#include "core/error_codes.hpp"
#include "core/ids.hpp"

namespace baton {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

scheduler::scheduler(decision_engine& engine, scheduler_options options)
    : engine_(engine), options_(options), worker_([this] { work(); }) {
  if (options_.max_batch == 0) options_.max_batch = 1;
}

scheduler::~scheduler() { stop(); }

result<void> scheduler::submit(request&& req, callback done, time_point deadline) {
  std::unique_lock lock(mutex_);
  if (stopping_) return make_error(503, codes::shutting_down, "the server is shutting down");
  if (queue_.size() >= options_.queue_capacity) {
    return make_error(503, codes::overloaded, "the engine queue is full (" + std::to_string(options_.queue_capacity) +
                                             " requests); retry later");
  }
  if (deadline != time_point::max()) {
    const double wait_ms = double(queue_.size()) * ms_per_request_;
    if (std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(wait_ms) > deadline) {
      return make_error(503, codes::overloaded, "the engine queue holds about " + std::to_string(static_cast<long>(wait_ms)) +
                                               " ms of work, more than the request may wait; retry later");
    }
  }
  queue_.push_back(job{std::move(req), std::move(done), std::chrono::steady_clock::now(), deadline});
  lock.unlock();
  ready_.notify_one();
  return {};
}

void scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (worker_.joinable()) worker_.join();
}

std::size_t scheduler::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void scheduler::work() {
  std::vector<job> jobs;
  std::vector<job> expired;
  std::vector<request> batch;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has been answered
      const auto now = std::chrono::steady_clock::now();
      jobs.clear();
      expired.clear();
      while (!queue_.empty() && jobs.size() < options_.max_batch) {
        (queue_.front().deadline <= now ? expired : jobs).push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    for (job& j : expired) {
      const double waited = ms_since(j.queued_at);
      j.done(scheduled_result{std::move(j.req),
                              make_error(504, codes::deadline_exceeded,
                                         "the request waited " + std::to_string(static_cast<long>(waited)) +
                                             " ms for the engine, past its deadline"),
                              waited, 0, 0});
    }
    expired.clear();
    if (jobs.empty()) continue;
    batch.clear();
    for (job& j : jobs) batch.push_back(std::move(j.req));
    const auto start = std::chrono::steady_clock::now();
    // decide() returns errors as values; an engine that throws anyway (a bug, a device fault that
    // escaped) fails this batch with 500 rather than ending the process from the worker thread.
    std::vector<result<decision>> out;
    std::string thrown;
    try {
      out = engine_.decide(batch);
    } catch (const std::exception& e) {
      thrown = e.what();
    } catch (...) {
      thrown = "an unknown exception";
    }
    const auto end = std::chrono::steady_clock::now();
    if (options_.on_batch) options_.on_batch(jobs.size(), ms_between(start, end));
    {
      std::lock_guard lock(mutex_);
      const double pace = ms_between(start, end) / double(jobs.size());
      ms_per_request_ = ms_per_request_ == 0 ? pace : 0.8 * ms_per_request_ + 0.2 * pace;
    }
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      scheduled_result r{std::move(batch[i]),
                         i < out.size() ? std::move(out[i])
                         : !thrown.empty()
                             ? result<decision>(make_error(500, codes::inference_failed, "the engine failed: " + thrown))
                             : result<decision>(make_error(500, codes::inference_failed,
                                                           "the engine answered fewer requests than asked")),
                         ms_between(jobs[i].queued_at, start), ms_between(start, end), jobs.size()};
      jobs[i].done(std::move(r));
    }
    // The callbacks hold their callers' state (a connection, a turn): let it go now, not at the
    // next batch.
    jobs.clear();
  }
}

}  // namespace baton
