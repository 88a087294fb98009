// What the policy tests share: a registry with tools of every risk, a tool with choice and
// boolean parameters, finish and both global question types (six tool options: with p_max, a
// confidence is never below 1/6), and a policy parser that fails the test on an error.
#pragma once

#include <gtest/gtest.h>

#include <string_view>

#include "policies/policy.hpp"

namespace baton::policies::test {

inline const char* registry_yaml = R"(tools:
  - id: a
    description: Tool a
    parameters:
      mode: {type: choice, instructions: "Which mode?", values: {x: "Mode x", y: "Mode y"}}
      notify: {type: boolean, instructions: "Notify?"}
      note: {type: text}
  - {id: b, description: Tool b, risk: medium}
  - {id: c, description: Tool c, risk: high}
  - {id: d, description: Tool d}
  - {id: e, description: Tool e, risk: high}
finish: {description: Done}
questions:
  urgency: {type: score, instructions: "How urgent?", criteria: [Later, Week, Today, Now]}
  needs_person: {type: noul, instructions: "Needs a person?"}
)";

inline const tools::registry& test_registry() {
  static const tools::registry r = tools::parse_registry(registry_yaml, "tools.yaml", {}).value();
  return r;
}

inline policy parse_ok(std::string_view text) {
  auto p = parse_policy(text, "p.yaml", test_registry());
  EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().message);
  return p ? *p : policy{};
}

}  // namespace baton::policies::test
