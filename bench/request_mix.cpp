#include "bench/request_mix.hpp"

#include <random>

#include "core/json.hpp"

namespace baton::bench {

namespace {

const char* const words[] = {
    "invoice", "refund", "charge", "password", "login", "error", "timeout", "deploy", "rollback", "customer",
    "order", "shipping", "address", "card", "subscription", "cancel", "upgrade", "plan", "report", "export",
    "search", "document", "ticket", "urgent", "today", "broken", "page", "server", "database", "latency",
    "build", "test", "failed", "retry", "account", "email", "notification", "settings", "billing", "payment"};

const char* const tools[][2] = {
    {"refund_payment", "Refund a duplicate or wrong charge on the customer's card"},
    {"search_help_center", "Search the help center for an article"},
    {"reset_password", "Send the customer a password reset link"},
    {"update_address", "Change the shipping address of an order"},
    {"cancel_subscription", "Cancel the customer's subscription at the end of the period"},
    {"export_report", "Export a usage report as CSV"},
    {"retry_deploy", "Retry the failed deploy stage"},
    {"rollback_release", "Roll back to the previous release"},
    {"page_oncall", "Page the on-call engineer"},
    {"run_tests", "Run the test suite"},
    {"search_code", "Search the code base for a symbol"},
    {"finish", "Nothing left to do"},
};

std::string sentence(std::mt19937_64& rng, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += words[rng() % std::size(words)];
  }
  return s;
}

// min + (0..spread-1) consecutive tools of the list, starting anywhere.
json tool_criteria(std::mt19937_64& rng, std::size_t min, std::size_t spread) {
  json criteria = json::object();
  const std::size_t first = rng() % std::size(tools);
  for (std::size_t t = 0, n = min + rng() % spread; t < n; ++t) {
    const auto& tool = tools[(first + t) % std::size(tools)];
    criteria[tool[0]] = tool[1];
  }
  return criteria;
}

std::string routing_request(std::mt19937_64& rng) {
  json body = json::object();
  body["model"] = "jev-latest";
  if (rng() % 2) {
    body["state"] = "Customer: " + sentence(rng, 20 + rng() % 40) + ". Agent: " + sentence(rng, 10 + rng() % 20) + ".";
  } else {
    json turns = json::array();
    for (std::size_t t = 0, n = 2 + rng() % 4; t < n; ++t)
      turns.push_back(json{{"role", t % 2 ? "assistant" : "user"}, {"content", sentence(rng, 8 + rng() % 16)}});
    body["state"] = turns;
  }
  json questions = json::object();
  questions["next_tool"] = json{{"type", "choice"}, {"instructions", "Which tool should the agent call next?"},
                                {"criteria", tool_criteria(rng, 4, 9)}};
  if (rng() % 2)
    questions["region"] = json{{"type", "choice"}, {"instructions", "Which region does this concern?"},
                               {"criteria", json{{"eu", "Europe"}, {"us", "United States"}, {"apac", "Asia Pacific"}}}};
  questions["urgency"] = json{{"type", "score"}, {"instructions", "How urgent is this?"},
                              {"criteria", json::array({"Can wait", "This week", "Today", "Right now"})}};
  questions["needs_person"] = json{{"type", "noul"}, {"instructions", "Should a person review this?"},
                                   {"criteria", json{{"true", "An urgent or risky request a person must approve"},
                                                     {"false", "A routine request the agent can finish alone"}}}};
  body["questions"] = questions;
  return render_json(body, false);
}

std::string compact_request(std::mt19937_64& rng) {
  json body = json::object();
  body["model"] = "jev-latest";
  body["state"] = "Customer: " + sentence(rng, 8 + rng() % 16) + ".";
  json questions = json::object();
  questions["next_tool"] = json{{"type", "choice"}, {"instructions", "Which tool next?"}, {"criteria", tool_criteria(rng, 2, 3)}};
  if (rng() % 2)
    questions["urgency"] = json{{"type", "score"}, {"criteria", json::array({"Can wait", "Today", "Now"})}};
  if (rng() % 2) questions["urgent"] = json{{"type", "noul"}, {"instructions", "Is this urgent?"}};
  body["questions"] = questions;
  return render_json(body, false);
}

}  // namespace

std::vector<std::string> request_mix(std::size_t count, mix_profile profile, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i)
    out.push_back(profile == mix_profile::routing ? routing_request(rng) : compact_request(rng));
  return out;
}

}  // namespace baton::bench
