#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "support/scratch_dir.hpp"
#include "tools/registry.hpp"

namespace baton::tools {
namespace {

const char* valid = R"(tools:
  - id: refund_payment
    description: Refund a charge to the customer's card
    risk: medium
    executor: {type: http, url: "http://localhost/refund", timeout_ms: 2000, retries: 2}
    parameters:
      reason: {type: choice, instructions: "Why?", values: {duplicate: "Charged twice", fraud: "Fraud"}}
      notify: {type: boolean, instructions: "Notify the customer?"}
      note:   {type: text, value: "static text"}
  - id: search.docs
    description: Search the help center
    executor: {type: command, argv: [search, --json]}
    parameters:
      query: {type: text}
finish: {description: "The task is complete; nothing more to do"}
questions:
  urgency: {type: score, instructions: "How urgent?", criteria: ["Can wait", "Today", "Now"]}
  needs_person: {type: noul, instructions: "Does this need a person?"}
)";

// The same registry: fields in another order, block style instead of flow style, other spacing.
const char* reordered = R"(
finish:
    description:   "The task is complete; nothing more to do"
questions:
    urgency:
        criteria:
          - Can wait
          - Today
          - Now
        instructions: How urgent?
        type: score
    needs_person: {instructions: "Does this need a person?", type: noul}
tools:
    - description: "Refund a charge to the customer's card"
      parameters:
          reason:
              values: {duplicate: Charged twice, fraud: Fraud}
              instructions: Why?
              type: choice
          notify: {instructions: "Notify the customer?", type: boolean}
          note: {value: static text, type: text}
      executor: {retries: 2, timeout_ms: 2000, url: "http://localhost/refund", type: http}
      id: refund_payment
      risk: medium
    - {id: search.docs, description: Search the help center, executor: {argv: [search, --json], type: command},
       parameters: {query: {type: text}}}
)";

registry parse_ok(std::string_view text, const request_limits& limits = {}) {
  auto r = parse_registry(text, "tools.yaml", limits);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? std::move(*r) : registry{};
}

std::string parse_error(std::string_view text, const request_limits& limits = {}) {
  auto r = parse_registry(text, "tools.yaml", limits);
  if (r) return "loaded";
  EXPECT_EQ(r.error().status, 422);
  EXPECT_EQ(r.error().code, "INVALID_REGISTRY");
  return r.error().message;
}

TEST(registry, loads_every_field) {
  const registry r = parse_ok(valid);
  ASSERT_EQ(r.tools.size(), 2u);
  const tool& refund = r.tools[0];
  EXPECT_EQ(refund.id, "refund_payment");
  EXPECT_EQ(refund.description, "Refund a charge to the customer's card");
  EXPECT_EQ(refund.risk, risk_level::medium);
  EXPECT_EQ(refund.executor,
            json::parse(R"({"type":"http","url":"http://localhost/refund","timeout_ms":2000,"retries":2})"));
  ASSERT_EQ(refund.parameters.size(), 3u);
  EXPECT_EQ(refund.parameters[0].name, "reason");
  EXPECT_EQ(refund.parameters[0].type, parameter_type::choice);
  EXPECT_EQ(refund.parameters[0].instructions, "Why?");
  EXPECT_EQ(refund.parameters[0].values.dump(), R"({"duplicate":"Charged twice","fraud":"Fraud"})");
  EXPECT_EQ(refund.parameters[1].type, parameter_type::boolean);
  EXPECT_EQ(refund.parameters[2].type, parameter_type::text);
  EXPECT_EQ(refund.parameters[2].value, "static text");
  EXPECT_EQ(parameter_question_id(refund, refund.parameters[0]), "refund_payment.reason");

  const tool& search = r.tools[1];
  EXPECT_EQ(search.risk, risk_level::low);  // the default
  EXPECT_EQ(search.executor, json::parse(R"({"type":"command","argv":["search","--json"]})"));
  ASSERT_EQ(search.parameters.size(), 1u);
  EXPECT_FALSE(search.parameters[0].value);  // from the agent's proposal

  EXPECT_EQ(r.finish, "The task is complete; nothing more to do");
  EXPECT_EQ(r.questions.dump(),
            R"({"urgency":{"type":"score","instructions":"How urgent?","criteria":["Can wait","Today","Now"]},)"
            R"("needs_person":{"type":"noul","instructions":"Does this need a person?"}})");
  EXPECT_EQ(r.hash.size(), 7u + 64u);
  EXPECT_EQ(r.hash.rfind("sha256:", 0), 0u);
}

TEST(registry, a_tool_without_executor_is_run_by_the_agent) {
  const registry r = parse_ok("tools:\n  - {id: a, description: A}\n  - {id: b, description: B}\n");
  EXPECT_EQ(r.tools[0].executor, json::parse(R"({"type":"agent"})"));
  EXPECT_FALSE(r.finish);
}

TEST(registry, hash_ignores_field_order_and_whitespace) {
  const registry a = parse_ok(valid);
  const registry b = parse_ok(reordered);
  EXPECT_EQ(a.canonical_json(), b.canonical_json());
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_EQ(a.hash, parse_ok(valid).hash);
}

TEST(registry, hash_follows_content_and_option_order) {
  const registry a = parse_ok(valid);
  std::string changed = valid;
  changed.replace(changed.find("Search the help center"), 22, "Search the help centre");
  EXPECT_NE(parse_ok(changed).hash, a.hash);
  // The order of choice values is the order of the options the engine answers over.
  std::string swapped = valid;
  swapped.replace(swapped.find(R"({duplicate: "Charged twice", fraud: "Fraud"})"), 44,
                  R"({fraud: "Fraud", duplicate: "Charged twice"})");
  EXPECT_NE(parse_ok(swapped).hash, a.hash);
  std::string riskier = valid;
  riskier.replace(riskier.find("risk: medium"), 12, "risk: high  ");
  EXPECT_NE(parse_ok(riskier).hash, a.hash);
}

TEST(registry, example_config_loads) {
  auto r = load_registry(BATON_SOURCE_DIR "/config/tools.yaml", request_limits::text_only());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->tools.size(), 5u);
  EXPECT_EQ(r->tools[0].id, "send_payment");
  EXPECT_TRUE(r->finish);
  EXPECT_EQ(r->questions.size(), 2u);
}

TEST(registry, a_missing_file_is_an_error) {
  auto r = load_registry("/nonexistent/tools.yaml", {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, "INVALID_REGISTRY");
  EXPECT_EQ(r.error().message, "/nonexistent/tools.yaml: cannot read the file (No such file or directory)");
}

// A FIFO would block the load (a reload stuck for good) and /dev/zero never ends: only regular
// files are read, and at most 16 MiB of one.
TEST(registry, only_a_regular_file_of_bounded_size_is_read) {
  const test::scratch_dir dir("baton-registry-files");
  const auto fifo = dir / "fifo.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, why] : {std::pair<std::string, std::string>{fifo.string(), "is not a regular file"},
                                  {"/dev/zero", "is not a regular file"}}) {
    auto r = load_registry(path, {});
    ASSERT_FALSE(r) << path;
    EXPECT_EQ(r.error().message, path + ": " + why);
  }
  const auto big = dir / "big.yaml";
  std::ofstream(big).put('\n');
  std::filesystem::resize_file(big, (std::size_t(16) << 20) + 1);
  auto r = load_registry(big, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, big.string() + ": is 16777217 bytes, more than the 16777216 such a file may be");
}

const char* two_tools = "tools:\n  - {id: a, description: A}\n  - {id: b, description: B}\n";

TEST(registry, refuses_yaml_syntax_errors) {
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A\n  - {id: b}\n"),
            "tools.yaml:3: end of map flow not found");
  EXPECT_EQ(parse_error("tools:\n  - id: a\n   description: [\n"), "tools.yaml:3: end of sequence not found");
}

TEST(registry, refuses_duplicate_tool_ids) {
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - {id: b, description: B}\n"
                        "  - {id: a, description: C}\n"),
            "tools.yaml:4: duplicate tool id `a`");
}

TEST(registry, refuses_empty_and_missing_descriptions) {
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: \"\"\n"),
            "tools.yaml:4: tool `b` has an empty description");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description:\n"),
            "tools.yaml:4: tool `b` has an empty description");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    risk: low\n"),
            "tools.yaml:3: tool `b` has no description");
  EXPECT_EQ(parse_error(std::string(two_tools) + "finish: {description: \"\"}\n"),
            "tools.yaml:4: `finish` has an empty description");
  // A choice value's text is its description, whatever its label.
  const std::string with_values = "tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                                  "    parameters:\n      p: {type: choice, instructions: P, values: {x: X, y: ";
  for (const auto& [rest, message] : std::vector<std::pair<std::string, std::string>>{
           {"\"\"", "value `y` of parameter `p` of tool `b` has an empty description"},
           {"[1, 2]", "value `y` of parameter `p` of tool `b`'s description must be a string"},
           // An empty label was refused only later, by the compiled schema, with no file or line.
           {"Y, \"\": Z", "a value of parameter `p` of tool `b` has an empty label"}}) {
    EXPECT_EQ(parse_error(with_values + rest + "}}\n"), "tools.yaml:6: " + message) << rest;
  }
}

// A second document was dropped unseen: yaml-cpp's Load reads the first only.
TEST(registry, refuses_a_second_yaml_document) {
  EXPECT_EQ(parse_error(std::string(valid) + "---\ntools:\n  - {id: c, description: C}\n"),
            "tools.yaml:" + std::to_string(std::count(valid, valid + std::strlen(valid), '\n') + 2) +
                ": a second YAML document (after `---`): one document a file");
  EXPECT_EQ(parse_error(std::string(valid) + "---\n"), "loaded");  // an empty one after it is nothing
}

TEST(registry, refuses_bad_ids) {
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - {id: \"b c\", description: B}\n"),
            "tools.yaml:3: bad tool id `b c` (A-Za-z0-9_.-)");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - {description: B}\n"),
            "tools.yaml:3: a tool has no id");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                        "    parameters:\n      x.y: {type: boolean, instructions: X}\n"),
            "tools.yaml:6: bad parameter name `x.y` (A-Za-z0-9_-)");
}

TEST(registry, refuses_unknown_risk_and_executor_type) {
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n    risk: severe\n"),
            "tools.yaml:5: unknown risk `severe` (low, medium or high)");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                        "    executor:\n      type: grpc\n"),
            "tools.yaml:6: unknown executor type `grpc` (agent, http or command)");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A, executor: {type: http}}\n  - {id: b, description: B}\n"),
            "tools.yaml:2: tool `a`'s executor has no url");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A, executor: {type: command, argv: []}}\n"
                        "  - {id: b, description: B}\n"),
            "tools.yaml:2: tool `a`'s executor's argv must be a non-empty list of non-empty strings");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A, executor: {type: command, argv: [prog, \"\"]}}\n"
                        "  - {id: b, description: B}\n"),
            "tools.yaml:2: tool `a`'s executor's argv must be a non-empty list of non-empty strings");
  const std::string http_with = "tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                                "    executor: {type: http, url: \"http://x/\", ";
  const std::string timeout_range = "tools.yaml:5: tool `b`'s executor's timeout_ms must be an integer from 1 to 1099511627776";
  for (const auto& [fields, message] : std::vector<std::pair<std::string, std::string>>{
           {"timeout_ms: 0", timeout_range},
           // Past 2^40 ms the deadline's arithmetic overflowed and the call timed out at once.
           {"timeout_ms: 9223372036854775807", timeout_range},
           {"retries: 4294967296", "tools.yaml:5: tool `b`'s executor's retries must be an integer from 0 to 10"},
           {"timeout_ms: 1099511627776, retries: 10", "loaded"}}) {
    EXPECT_EQ(parse_error(http_with + fields + "}\n"), message) << fields;
  }
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                        "    executor:\n      type: agent\n      url: x\n"),
            "tools.yaml:7: unknown key `url` in a agent executor");
}

// Aliases of aliases: 600 bytes that expand to 9^9 strings are refused at once, not expanded
// (that took 8 GB and did not finish in 20 s); a large map is read in linear time (100,000
// values took 21 s when each key was compared with every one before it).
TEST(registry, refuses_an_alias_bomb_and_reads_large_maps_quickly) {
  std::string argv = "        - &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    argv += "        - &a" + std::to_string(i) + " [" + p;
    for (int j = 1; j < 9; ++j) argv += ", " + p;
    argv += "]\n";
  }
  const auto started = std::chrono::steady_clock::now();
  const std::string bombed = parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                                         "    executor:\n      type: command\n      argv:\n" + argv);
  EXPECT_EQ(bombed, "tools.yaml:8: tool `b`'s executor expands to more than 100000 values (aliases of aliases?)");
  // An alias inside its own anchor is a cycle: refused, where it overflowed the stack.
  const std::string cycle = parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                                        "    executor: {type: command, argv: &a [x, *a]}\n");
  EXPECT_NE(cycle.find("nests deeper than 256 levels (an alias inside its own anchor?)"), std::string::npos) << cycle;
  std::string values;
  for (int i = 0; i < 100000; ++i) values += (i ? ", v" : "v") + std::to_string(i) + ": null";
  const std::string many = parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                                       "    parameters:\n      p: {type: choice, instructions: P, values: {" + values + "}}\n");
  EXPECT_NE(many, "loaded");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

TEST(registry, refuses_http_urls_the_executor_cannot_call) {
  const auto with_url = [](std::string_view url) {
    return "tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
           "    executor:\n      type: http\n      url: \"" + std::string(url) + "\"\n";
  };
  const std::string at = "tools.yaml:7: tool `b`'s executor's url ";
  EXPECT_EQ(parse_error(with_url("https://example.com/x")),
            at + "`https://example.com/x` https is not supported (the http executor has no TLS client): use an http:// URL");
  EXPECT_EQ(parse_error(with_url("ftp://example.com/x")), at + "`ftp://example.com/x` must be an http://host[:port]/path URL");
  EXPECT_EQ(parse_error(with_url("example.com/x")), at + "`example.com/x` must be an http://host[:port]/path URL");
  EXPECT_EQ(parse_error(with_url("http:///x")), at + "`http:///x` has no host or a bad one (A-Za-z0-9.-_ or [IPv6])");
  EXPECT_EQ(parse_error(with_url("http://host:0/x")), at + "`http://host:0/x` has a bad port (1 to 65535)");
  EXPECT_EQ(parse_error(with_url("http://host:65536/x")), at + "`http://host:65536/x` has a bad port (1 to 65535)");
  EXPECT_EQ(parse_error(with_url("http://host:/x")), at + "`http://host:/x` has a bad port (1 to 65535)");
  EXPECT_EQ(parse_error(with_url("http://u:p@host/x")),
            at + "`http://u:p@host/x` has user info (user@host), which is not supported");
  EXPECT_EQ(parse_error(with_url("http://host/a b")),
            at + "`http://host/a b` has spaces, control characters or non-ASCII bytes (percent-encode them)");
  EXPECT_EQ(parse_error(with_url("http://host/x#part")), at + "`http://host/x#part` has a fragment (#…), which is never sent");
  EXPECT_EQ(parse_error(with_url("http://[::1/x")), at + "`http://[::1/x` has a bad IPv6 host (expected [hex:digits])");
  for (const char* ok : {"http://127.0.0.1:8081/refunds", "http://localhost", "http://[::1]:9000/a?b=c", "http://h.example?q"}) {
    EXPECT_EQ(parse_error(with_url(ok)), "loaded") << ok;
  }
}

TEST(registry, refuses_bad_parameters) {
  const std::string head = "tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n    parameters:\n";
  EXPECT_EQ(parse_error(head + "      p: {type: number}\n"),
            "tools.yaml:6: unknown parameter type `number` of parameter `p` of tool `b` (choice, boolean or text)");
  EXPECT_EQ(parse_error(head + "      p: {instructions: P}\n"), "tools.yaml:6: parameter `p` of tool `b` has no type");
  EXPECT_EQ(parse_error(head + "      p:\n        type: choice\n        instructions: P\n        values: {only: One}\n"),
            "tools.yaml:9: choice parameter `p` of tool `b` needs at least 2 values");
  EXPECT_EQ(parse_error(head + "      p: {type: choice, instructions: P}\n"),
            "tools.yaml:6: parameter `p` of tool `b` has no values");
  EXPECT_EQ(parse_error(head + "      p: {type: boolean}\n"), "tools.yaml:6: parameter `p` of tool `b` has no instructions");
  EXPECT_EQ(parse_error(head + "      p: {type: boolean, instructions: P, values: {x: X, y: Y}}\n"),
            "tools.yaml:6: unknown key `values` in a boolean parameter");
  EXPECT_EQ(parse_error(head + "      p: {type: text, value: v}\n      p: {type: text}\n"),
            "tools.yaml:7: duplicate key `p` in tool `b`'s parameters");
}

TEST(registry, refuses_unknown_keys) {
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n    owner: ops\n"),
            "tools.yaml:5: unknown key `owner` in a tool");
  EXPECT_EQ(parse_error(std::string(two_tools) + "policy: strict\n"), "tools.yaml:4: unknown key `policy` in the registry");
  EXPECT_EQ(parse_error(std::string(two_tools) + "finish: {description: Done, label: end}\n"),
            "tools.yaml:4: unknown key `label` in `finish`");
  EXPECT_EQ(parse_error(std::string(two_tools) + "questions:\n  q: {type: noul, instructions: Q, weight: 2}\n"),
            "tools.yaml:5: unknown key `weight` in question `q`");
}

TEST(registry, refuses_name_clashes) {
  const std::string tools = "tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n"
                            "    parameters:\n      p: {type: boolean, instructions: P}\n";
  EXPECT_EQ(parse_error(tools + "questions:\n  b.p: {type: noul, instructions: Q}\n"),
            "tools.yaml:8: question `b.p` clashes with a question id the tools generate");
  EXPECT_EQ(parse_error(tools + "questions:\n  tool: {type: noul, instructions: Q}\n"),
            "tools.yaml:8: question `tool` clashes with a question id the tools generate");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - {id: finish, description: B}\nfinish: {description: F}\n"),
            "tools.yaml:3: tool id `finish` clashes with the finish option");
}

TEST(registry, refuses_bad_global_questions) {
  EXPECT_EQ(parse_error(std::string(two_tools) + "questions:\n  q: {type: score, instructions: Q, criteria: [one]}\n"),
            "tools.yaml:5: question `q`: questions.q.score.criteria: List should have at least 2 items after "
            "validation, not 1");
}

TEST(registry, refuses_registries_over_the_engine_limits) {
  request_limits limits;
  limits.max_choice_options = 3;
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - {id: b, description: B}\n"
                        "  - {id: c, description: C}\nfinish: {description: F}\n",
                        limits),
            "tools.yaml:1: the tool choice has 4 options, over the engine's limit of 3");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n    parameters:\n"
                        "      p: {type: choice, instructions: P, values: {w: W, x: X, y: Y, z: Z}}\n",
                        limits),
            "tools.yaml:6: choice parameter `p` of tool `b` has 4 values, over the engine's limit of 3");
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n"),
            "tools.yaml:1: the tool choice has 1 option(s); it needs at least 2 (tools, plus finish when configured)");

  request_limits three;
  three.max_questions = 3;
  EXPECT_EQ(parse_error(std::string(two_tools) + "questions:\n  q1: {type: noul, instructions: Q}\n"
                                                 "  q2: {type: noul, instructions: Q}\n  q3: {type: noul, instructions: Q}\n",
                        three),
            "tools.yaml:7: the registry makes more than 3 questions (the tool choice, parameter and global questions), "
            "the engine's limit");

  request_limits short_ids;
  short_ids.max_question_id_chars = 5;
  EXPECT_EQ(parse_error("tools:\n  - {id: a, description: A}\n  - id: b\n    description: B\n    parameters:\n"
                        "      long_name: {type: boolean, instructions: P}\n",
                        short_ids),
            "tools.yaml:6: question id `b.long_name` is longer than the engine's limit of 5 characters");

  request_limits budget;
  budget.max_total_options = 4;
  EXPECT_EQ(parse_error(std::string(two_tools) + "questions:\n  q: {type: score, instructions: Q, criteria: [x, y, z]}\n",
                        budget),
            "tools.yaml:1: the registry's questions have 5 options in all, over the engine's budget of 4");
  budget.max_total_options = 5;
  parse_ok(std::string(two_tools) + "questions:\n  q: {type: score, instructions: Q, criteria: [x, y, z]}\n", budget);
}

TEST(registry, refuses_an_empty_file) {
  EXPECT_EQ(parse_error(""), "tools.yaml:1: the registry is empty: it needs `tools` or `mcp_servers`");
  EXPECT_EQ(parse_error("finish: {description: F}\n"), "tools.yaml:1: the registry has no `tools` and no `mcp_servers`");
}

}  // namespace
}  // namespace baton::tools
