// load_routing: what `baton serve` (and a reload, and `baton check`) serves a registry with, one
// request or two stages, checked against the serving engine's limits and the fallback engine's.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <fstream>
#include <string>

#include "adapters/runtime/routing.hpp"
#include "adapters/runtime/server_config.hpp"
#include "support/scratch_dir.hpp"

namespace baton {
namespace {

// Two groups of three tools: seven tool options with finish.
constexpr const char* six_tools = R"(tools:
  - {id: a1, description: First of a, group: a}
  - {id: a2, description: Second of a, group: a}
  - {id: a3, description: Third of a, group: a}
  - {id: b1, description: First of b, group: b}
  - {id: b2, description: Second of b, group: b}
  - {id: b3, description: Third of b, group: b}
finish: {description: Nothing more to do}
)";

class routing_test : public testing::Test {
 protected:
  routing_test() : dir_("baton-routing") {
    std::ofstream(dir_ / "tools.yaml") << six_tools;
    std::ofstream(dir_ / "policy.yaml") << "confidence: p_max\nlanes:\n  default: {execute: 0.8, fallback: 0.5}\non_engine_error: escalate\n";
    config_.registry = dir_ / "tools.yaml";
    config_.policy = dir_ / "policy.yaml";
  }

  result<std::shared_ptr<const routing_snapshot>> load(const request_limits* fallback) {
    return load_routing(config_, request_limits::text_only(), fallback, io_.get_executor());
  }

  test::scratch_dir dir_;
  server_config config_;
  boost::asio::io_context io_;
};

TEST_F(routing_test, a_fallback_engine_one_request_overflows_routes_both_in_two_stages) {
  // The serving engine takes all seven options at once: one request.
  auto alone = load(nullptr);
  ASSERT_TRUE(alone) << alone.error().message;
  EXPECT_FALSE((*alone)->stages);
  EXPECT_EQ((*alone)->questions.questions.front().option_count(), 7u);

  // A fallback engine of four options a choice: two stages fit it (a, b, finish; then three
  // tools), so both engines are asked in two stages.
  request_limits four = request_limits::text_only();
  four.max_choice_options = 4;
  auto staged = load(&four);
  ASSERT_TRUE(staged) << staged.error().message;
  ASSERT_TRUE((*staged)->stages);
  EXPECT_EQ((*staged)->stages->groups, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*staged)->questions.questions.front().option_count(), 3u);

  // One that not even the stages fit is refused, saying so.
  request_limits two = request_limits::text_only();
  two.max_choice_options = 2;
  auto refused = load(&two);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("do not fit the fallback engine"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace baton
