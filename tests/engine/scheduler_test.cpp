// The engine scheduler on its own: batches, a bounded queue, deadlines and the engine's pace.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "engine/scheduler.hpp"

namespace baton {
namespace {

using namespace std::chrono_literals;

// Answers every question flat, after `sleep` per batch; counts batches and requests.
class slow_engine : public decision_engine {
 public:
  explicit slow_engine(std::chrono::milliseconds sleep) : sleep_(sleep) {
    description_.model_id = "slow-1";
    description_.limits = request_limits::text_only();
  }
  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override {
    ++batches;
    requests += int(batch.size());
    std::this_thread::sleep_for(sleep_);
    return std::vector<result<decision>>(batch.size(), decision{});
  }
  std::atomic<int> batches{0}, requests{0};

 private:
  std::chrono::milliseconds sleep_;
  engine_description description_;
};

// Collects results from the worker thread.
struct results {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<scheduled_result> got;

  scheduler::callback collect() {
    return [this](scheduled_result r) {
      std::lock_guard lock(mutex);
      got.push_back(std::move(r));
      changed.notify_all();
    };
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 5s, [&] { return got.size() >= n; });
  }
};

TEST(scheduler, what_waits_together_goes_as_one_batch) {
  slow_engine engine(30ms);
  scheduler s(engine, {4, 100, {}});
  results r;
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(s.submit(request{}, r.collect()));
  ASSERT_TRUE(r.wait_for(9));
  // The first request may go alone; the rest wait behind it and go 4 at a time.
  EXPECT_LE(engine.batches, 4);
  EXPECT_EQ(engine.requests, 9);
  std::size_t largest = 0;
  for (const auto& x : r.got) largest = std::max(largest, x.batch_size);
  EXPECT_EQ(largest, 4u);
}

TEST(scheduler, a_full_queue_refuses_at_once) {
  slow_engine engine(100ms);
  scheduler s(engine, {1, 2, {}});
  results r;
  ASSERT_TRUE(s.submit(request{}, r.collect()));
  std::this_thread::sleep_for(20ms);  // the first is in the engine
  ASSERT_TRUE(s.submit(request{}, r.collect()));
  ASSERT_TRUE(s.submit(request{}, r.collect()));
  const auto full = s.submit(request{}, r.collect());
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().status, 503);
  EXPECT_EQ(full.error().code, "OVERLOADED");
  ASSERT_TRUE(r.wait_for(3));
}

TEST(scheduler, a_request_still_queued_at_its_deadline_is_not_run) {
  slow_engine engine(150ms);
  scheduler s(engine, {1, 10, {}});
  results r;
  ASSERT_TRUE(s.submit(request{}, r.collect()));
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(s.submit(request{}, r.collect(), std::chrono::steady_clock::now() + 50ms));
  ASSERT_TRUE(r.wait_for(2));
  EXPECT_EQ(engine.requests, 1);
  ASSERT_FALSE(r.got[1].outcome);
  EXPECT_EQ(r.got[1].outcome.error().status, 504);
  EXPECT_EQ(r.got[1].outcome.error().code, "DEADLINE_EXCEEDED");
  EXPECT_GE(r.got[1].queue_ms, 50);
}

TEST(scheduler, a_deadline_the_queue_cannot_meet_is_refused_on_submit) {
  slow_engine engine(100ms);
  std::atomic<int> observed{0};
  scheduler s(engine, {1, 100, [&](std::size_t n, double ms) {
                         EXPECT_EQ(n, 1u);
                         EXPECT_GE(ms, 90);
                         ++observed;
                       }});
  results r;
  ASSERT_TRUE(s.submit(request{}, r.collect()));
  ASSERT_TRUE(r.wait_for(1));  // the engine's pace is now known: ~100 ms a request
  ASSERT_TRUE(s.submit(request{}, r.collect()));  // runs at once
  std::this_thread::sleep_for(10ms);
  // Any pace between 84 and 124 ms a request gives the same answers.
  const auto deadline = std::chrono::steady_clock::now() + 250ms;
  ASSERT_TRUE(s.submit(request{}, r.collect(), deadline));  // 0 ahead
  ASSERT_TRUE(s.submit(request{}, r.collect(), deadline));  // ~100 ms ahead
  ASSERT_TRUE(s.submit(request{}, r.collect(), deadline));  // ~200 ms ahead
  const auto late = s.submit(request{}, r.collect(), deadline);  // ~300 ms ahead: past it
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, "OVERLOADED");
  // Without a deadline nothing is refused for the pace.
  EXPECT_TRUE(s.submit(request{}, r.collect()));
  s.stop();
  EXPECT_EQ(r.got.size(), 6u);
  EXPECT_EQ(observed, engine.batches);
}

TEST(scheduler, stop_answers_what_is_queued_then_refuses) {
  slow_engine engine(20ms);
  scheduler s(engine, {1, 10, {}});
  results r;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.submit(request{}, r.collect()));
  s.stop();
  EXPECT_EQ(r.got.size(), 3u);
  const auto after = s.submit(request{}, r.collect());
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, "SHUTTING_DOWN");
}

// An engine that throws from decide() despite its contract.
class throwing_engine : public decision_engine {
 public:
  throwing_engine() {
    description_.model_id = "throws-1";
    description_.limits = request_limits::text_only();
  }
  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override {
    if (++calls == 1) throw std::runtime_error("device lost");
    return std::vector<result<decision>>(batch.size(), decision{});
  }
  std::atomic<int> calls{0};

 private:
  engine_description description_;
};

TEST(scheduler, an_engine_that_throws_fails_its_batch_and_the_worker_goes_on) {
  throwing_engine engine;
  scheduler s(engine, {4, 100, {}});
  results r;
  ASSERT_TRUE(s.submit(request{}, r.collect()));
  ASSERT_TRUE(r.wait_for(1));
  {
    std::lock_guard lock(r.mutex);
    ASSERT_FALSE(r.got[0].outcome);
    EXPECT_EQ(r.got[0].outcome.error().status, 500);
    EXPECT_EQ(r.got[0].outcome.error().code, "INFERENCE_FAILED");
    EXPECT_NE(r.got[0].outcome.error().message.find("device lost"), std::string::npos);
  }
  ASSERT_TRUE(s.submit(request{}, r.collect()));
  ASSERT_TRUE(r.wait_for(2));
  std::lock_guard lock(r.mutex);
  EXPECT_TRUE(r.got[1].outcome);
}

}  // namespace
}  // namespace baton
