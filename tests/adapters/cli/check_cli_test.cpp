// `baton check`: the repository's configs, a policy with dead parts, and what serve would refuse.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "adapters/cli/cli.hpp"
#include "support/cli_run.hpp"
#include "engine/clef/clef_engine.hpp"
#include "engine/clef/schema_cost.hpp"
#include "support/env_var.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {
namespace {

using test::cli;

std::string config_arg(const std::string& relative) { return (test::source_dir() / relative).string(); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A release's tokenizer as measure_schema and encode_record take it: each piece on its own.
struct release_pieces final : clef::piece_tokenizer {
  const tokenizer& t;
  explicit release_pieces(const tokenizer& t) : t(t) {}
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override { t.encode(text, out); }
};

// What a record with an empty state holds, by the engine's own encoder (or bytes of it).
std::size_t encoded_without_history(const std::filesystem::path& registry_file, const clef::piece_tokenizer& tok) {
  const auto registry = tools::load_registry(registry_file, request_limits::text_only());
  EXPECT_TRUE(registry);
  auto req = tools::compile_questions(*registry, request_limits::text_only());
  EXPECT_TRUE(req);
  req->state = "";
  auto encoded = clef::encode_record(*req, tok, {std::numeric_limits<std::size_t>::max()});
  EXPECT_TRUE(encoded);
  return encoded->ids.size();
}

TEST(cli_check, the_default_config_loads_clean_and_shows_its_schema) {
  const std::string file = config_arg("config/baton.yaml");
  const auto r = cli({"check", "--config", file});
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(has(r.out, file + ": engine keyword\n")) << r.out;
  EXPECT_TRUE(has(r.out, "Schema: 5 questions, the same on every turn\n"));
  // The questions in the order the engine gets them, with their options.
  const std::size_t tool = r.out.find("tool "), method = r.out.find("send_payment.method"),
                    notify = r.out.find("send_payment.notify"), urgency = r.out.find("urgency "),
                    person = r.out.find("needs_person");
  ASSERT_NE(person, std::string::npos) << r.out;
  EXPECT_LT(tool, method);
  EXPECT_LT(method, notify);
  EXPECT_LT(notify, urgency);
  EXPECT_LT(urgency, person);
  EXPECT_TRUE(has(r.out, "send_payment, search_docs, run_query, create_ticket, ask_user, finish"));
  EXPECT_TRUE(has(r.out, "0 Can wait a week, 1 This week, 2 Today, 3 Right now"));
  EXPECT_TRUE(has(r.out, "engine keyword has no tokenizer here: bytes"));
  EXPECT_TRUE(has(r.out, "\nno warnings\n"));

  const auto j = cli({"check", "--config", file, "--json"});
  ASSERT_EQ(j.code, exit_ok) << j.err;
  const json o = test::parse(j.out);
  EXPECT_EQ(o["ok"], true);
  EXPECT_EQ(o["warnings"], json::array());
  // The schema hash a server reports for this registry.
  const auto registry = tools::load_registry(test::source_dir() / "config/tools.yaml", request_limits::text_only());
  ASSERT_TRUE(registry);
  EXPECT_EQ(o["registry"]["hash"], registry->hash);
  EXPECT_EQ(o["schema_hash"], tools::schema_hash(*tools::compile_questions(*registry, request_limits::text_only())));
  ASSERT_EQ(o["questions"].size(), 5u);
  EXPECT_EQ(o["questions"][1]["id"], "send_payment.method");
  EXPECT_EQ(o["questions"][1]["options"], json::array({"card", "transfer"}));
  EXPECT_EQ(o["questions"][2]["instructions"], "Should the payee get an email about the payment?");
  ASSERT_EQ(o["engines"].size(), 1u);
  const json& e = o["engines"][0];
  EXPECT_EQ(e["unit"], "bytes");
  EXPECT_EQ(e["tokenizer"], nullptr);
  EXPECT_EQ(e["max_length"], nullptr);
  std::size_t sum = e["header"].get<std::size_t>();
  for (const json& q : e["questions"]) sum += q.get<std::size_t>();
  EXPECT_EQ(e["schema"].get<std::size_t>(), sum);
  EXPECT_EQ(e["prompt"].get<std::size_t>() + sum,
            encoded_without_history(test::source_dir() / "config/tools.yaml", clef::byte_tokenizer()));
}

TEST(cli_check, clef_counts_tokens_with_the_release_tokenizer_and_the_room_left) {
  const auto r = cli({"check", "--config", config_arg("config/examples/clef/baton.yaml"), "--json"});
  ASSERT_EQ(r.code, exit_ok) << r.err;
  const json e = test::parse(r.out)["engines"][0];
  EXPECT_EQ(e["name"], "clef");
  EXPECT_EQ(e["unit"], "tokens");
  const std::filesystem::path release = test::data_dir() / "vectors/clef-omni-tiny/release";
  EXPECT_EQ(std::filesystem::path(e["tokenizer"].get<std::string>()), release.lexically_normal());
  const clef::clef_encoder encoder(release);
  const release_pieces tok(encoder.text_tokenizer());
  const std::size_t every_turn = e["prompt"].get<std::size_t>() + e["schema"].get<std::size_t>();
  EXPECT_EQ(every_turn, encoded_without_history(test::source_dir() / "config/tools.yaml", tok));
  EXPECT_LT(every_turn, encoded_without_history(test::source_dir() / "config/tools.yaml", clef::byte_tokenizer()));
  EXPECT_EQ(e["max_length"], 4096);
  EXPECT_EQ(e["history_room"].get<std::size_t>(), 4096 - every_turn);

  const auto text = cli({"check", "--config", config_arg("config/examples/clef/baton.yaml")});
  EXPECT_TRUE(has(text.out, "type    tokens  options")) << text.out;
  EXPECT_TRUE(has(text.out, std::to_string(4096 - every_turn) + " left for the history"));

  // The keyword engine has no tokenizer; --tokenizer counts with the release's: the same numbers.
  const auto keyword = cli({"check", "--config", config_arg("config/baton.yaml"), "--json", "--tokenizer", release.string()});
  ASSERT_EQ(keyword.code, exit_ok) << keyword.err;
  const json k = test::parse(keyword.out)["engines"][0];
  EXPECT_EQ(k["unit"], "tokens");
  EXPECT_EQ(k["questions"], e["questions"]);
  EXPECT_EQ(k["max_length"], nullptr);
}

TEST(cli_check, a_schema_longer_than_the_window_fails_at_max_length) {
  const test::scratch_dir dir("baton-check");
  const std::string release = (test::data_dir() / "vectors/clef-omni-tiny/release").string();
  write(dir / "baton.yaml", "engine:\n  name: clef\n  model: " + release + "\n  max_length: 300\nregistry: " +
                                config_arg("config/tools.yaml") + "\npolicy: " + config_arg("config/policy.yaml") + "\n");
  const auto r = cli({"check", "--config", (dir / "baton.yaml").string()});
  EXPECT_EQ(r.code, exit_config);
  EXPECT_TRUE(has(r.err, (dir / "baton.yaml").string() + ":4: the prompt without any history takes ")) << r.err;
  EXPECT_TRUE(has(r.err, "over `engine.max_length` (300)"));
  EXPECT_EQ(r.out, "");
}

// A registry routed in two stages: the first stage's schema, and each stage's size, the second's
// the costliest group's; a second stage past max_length fails even where the first fits.
TEST(cli_check, a_registry_in_two_stages_shows_both_stages_sizes) {
  const test::scratch_dir dir("baton-check-stages");
  const std::string long_text(400, 'x');
  std::string registry = "tools:\n";
  for (const char* id : {"a1", "a2", "a3"}) registry += std::string("  - {id: ") + id + ", description: Short " + id + ", group: a}\n";
  for (const char* id : {"b1", "b2", "b3"}) registry += std::string("  - {id: ") + id + ", description: \"" + long_text + "\", group: b}\n";
  registry += "finish: {description: Nothing more to do}\n";
  write(dir / "tools.yaml", registry);
  write(dir / "policy.yaml", "confidence: p_max\nlanes:\n  default: {execute: 0.8, fallback: 0.5}\non_engine_error: escalate\n");
  const std::string tail = "registry: " + (dir / "tools.yaml").string() + "\npolicy: " + (dir / "policy.yaml").string() +
                           "\nrouting: {max_options: 4}\n";
  write(dir / "baton.yaml", "engine: {name: keyword}\n" + tail);

  const auto loaded = tools::load_registry(dir / "tools.yaml", request_limits::text_only());
  ASSERT_TRUE(loaded);
  const auto stages = tools::compile_stages(*loaded, request_limits::text_only());
  ASSERT_TRUE(stages);
  const auto b = clef::measure_schema(stages->second.at("b"), clef::byte_tokenizer());
  ASSERT_TRUE(b);

  const auto text = cli({"check", "--config", (dir / "baton.yaml").string()});
  ASSERT_EQ(text.code, exit_ok) << text.err;
  EXPECT_TRUE(has(text.out, "Routed in two stages (routing.max_options 4): 2 groups")) << text.out;
  EXPECT_TRUE(has(text.out, "Schema of the first stage: 1 questions")) << text.out;
  EXPECT_TRUE(has(text.out, "second stage, at most (group b, 3 tools): " + std::to_string(b->schema()) + " bytes of schema")) << text.out;

  const auto j = cli({"check", "--config", (dir / "baton.yaml").string(), "--json"});
  ASSERT_EQ(j.code, exit_ok) << j.err;
  const json o = test::parse(j.out);
  EXPECT_EQ(o["stages"]["groups"]["b"], json::array({"b1", "b2", "b3"}));
  const json& second = o["engines"][0]["second_stage"];
  EXPECT_EQ(second["group"], "b");
  EXPECT_EQ(second["schema"], b->schema());
  EXPECT_EQ(second["prompt"], b->prompt);
  EXPECT_LT(second["groups"]["a"].get<std::size_t>(), second["groups"]["b"].get<std::size_t>());
  EXPECT_LT(o["engines"][0]["schema"].get<std::size_t>(), b->schema());  // the first stage reads 300 characters a group

  // The clef engine: a window the first stage fits and group b's second stage does not.
  const std::filesystem::path release = test::data_dir() / "vectors/clef-omni-tiny/release";
  const clef::clef_encoder encoder(release);
  const release_pieces tok(encoder.text_tokenizer());
  const auto first_tokens = clef::measure_schema(stages->first, tok), b_tokens = clef::measure_schema(stages->second.at("b"), tok);
  ASSERT_TRUE(first_tokens && b_tokens);
  const std::size_t first_turn = first_tokens->prompt + first_tokens->schema(), b_turn = b_tokens->prompt + b_tokens->schema();
  ASSERT_LT(first_turn, b_turn);
  write(dir / "clef.yaml", "engine:\n  name: clef\n  model: " + release.string() + "\n  max_length: " +
                               std::to_string((first_turn + b_turn) / 2) + "\n" + tail);
  const auto narrow = cli({"check", "--config", (dir / "clef.yaml").string()});
  EXPECT_EQ(narrow.code, exit_config);
  EXPECT_TRUE(has(narrow.err, "the prompt without any history takes " + std::to_string(b_turn) +
                                  " tokens (the second stage of group `b`")) << narrow.err;
}

TEST(cli_check, the_examples) {
  const auto support = cli({"check", "--config", config_arg("config/examples/support/baton.yaml")});
  EXPECT_EQ(support.code, exit_ok) << support.err;
  EXPECT_TRUE(has(support.out, "\nno warnings\n")) << support.out;

  // The on-call registry asks customer_impact every turn; its policy reads only severity.
  const auto oncall = cli({"check", "--config", config_arg("config/examples/oncall/baton.yaml")});
  EXPECT_EQ(oncall.code, exit_ok) << oncall.err;
  EXPECT_TRUE(has(oncall.out, config_arg("config/examples/oncall/tools.yaml") + ":52: warning: question `customer_impact`"))
      << oncall.out;
  EXPECT_TRUE(has(oncall.out, "\n1 warning\n"));
  const auto strict = cli({"check", "--config", config_arg("config/examples/oncall/baton.yaml"), "--strict"});
  EXPECT_EQ(strict.code, exit_config);
  EXPECT_TRUE(has(strict.err, "1 warning(s), and --strict")) << strict.err;

  // Workers AI: serve needs the account and the token to start, so check does too; it calls nothing.
  {
    const test::env_var account("CLOUDFLARE_ACCOUNT_ID", nullptr);
    const test::env_var token("CLOUDFLARE_API_TOKEN", nullptr);
    const auto refused = cli({"check", "--config", config_arg("config/examples/workers-ai/baton.yaml")});
    EXPECT_EQ(refused.code, exit_config);
    EXPECT_TRUE(has(refused.err, "CLOUDFLARE_API_TOKEN")) << refused.err;
  }
  const test::env_var account("CLOUDFLARE_ACCOUNT_ID", "0123456789abcdef");
  const test::env_var token("CLOUDFLARE_API_TOKEN", "not-a-real-token-0123456789");
  const auto workers = cli({"check", "--config", config_arg("config/examples/workers-ai/baton.yaml")});
  EXPECT_EQ(workers.code, exit_ok) << workers.err;
  EXPECT_TRUE(has(workers.out, "engine systemone has no tokenizer here")) << workers.out;

  // docs/deploy.md's two machines: a routing instance on PostgreSQL and a model machine. check
  // reads them as serve would (the database password, the keys), reaching neither.
  const test::env_var model_key("BATON_MODEL_KEY", "a-model-key-0123456789");
  const test::env_var agent_key("BATON_AGENT_KEY", "an-agent-key-0123456789");
  const test::env_var reviewer_key("BATON_REVIEWER_KEY", "a-reviewer-key-0123456789");
  {
    const test::env_var password("BATON_DB_PASSWORD", nullptr);
    const auto refused = cli({"check", "--config", config_arg("config/examples/shared/instance.yaml")});
    EXPECT_EQ(refused.code, exit_config);
    EXPECT_TRUE(has(refused.err, "BATON_DB_PASSWORD")) << refused.err;
  }
  const test::env_var password("BATON_DB_PASSWORD", "a database password");
  const auto instance = cli({"check", "--config", config_arg("config/examples/shared/instance.yaml")});
  EXPECT_EQ(instance.code, exit_ok) << instance.err;
}

// A config whose policy has dead parts, with and without a fallback engine.
class check_warnings : public ::testing::Test {
 protected:
  void SetUp() override {
    write(dir_ / "tools.yaml", R"(tools:
  - id: pay
    description: Pay an invoice
    risk: high
    parameters:
      method: {type: choice, instructions: "How?", values: {card: Card, transfer: Transfer}}
  - {id: search, description: Search the docs}
  - {id: ask, description: Ask the user}
questions:
  needs_person: {type: noul, instructions: "Needs a person?"}
)");
    write(dir_ / "policy.yaml", R"(confidence: p_max
rules:
  deny: [pay]
  escalate_when:
    - {question: needs_person, noul_above: 0.5}
    - {question: needs_person, noul_above: 0.7}
lanes:
  default: {execute: 0.85, fallback: 0.3}
  tools:
    pay: {execute: 0.9, fallback: 0.6}
fallback_lanes:
  default: {execute: 0.7, fallback: 0.7}
on_engine_error: escalate
)");
    write(dir_ / "baton.yaml", "registry: tools.yaml\npolicy: policy.yaml\n");
    write(dir_ / "fallback.yaml",
          "registry: tools.yaml\npolicy: policy.yaml\nrouting:\n  fallback: {name: systemone, url: \"http://127.0.0.1:9\"}\n");
  }
  std::string file(const char* name) const { return (dir_ / name).string(); }
  test::scratch_dir dir_{"baton-check"};
};

TEST_F(check_warnings, each_points_at_its_line_and_says_what_to_do) {
  const auto r = cli({"check", "--config", file("baton.yaml")});
  EXPECT_EQ(r.code, exit_ok) << r.err;
  const std::string policy = file("policy.yaml");
  // 3 options (pay, search, ask): p_max is never below 1/3, so fallback 0.3 is always met.
  for (const std::string& line : {policy + ":3: warning: `pay` is denied", policy + ":6: warning: this trigger on `needs_person`",
                                  policy + ":8: warning: `lanes.default`'s fallback (0.3) is always met",
                                  policy + ":10: warning: the lane of `pay` in `lanes` never decides",
                                  policy + ":11: warning: `fallback_lanes` never apply"}) {
    EXPECT_TRUE(has(r.out, line)) << line << "\n" << r.out;
  }
  EXPECT_TRUE(has(r.out, "\n5 warnings\n"));

  const auto j = cli({"check", "--config", file("baton.yaml"), "--json", "--strict"});
  EXPECT_EQ(j.code, exit_config);
  const json o = test::parse(j.out);
  EXPECT_EQ(o["ok"], false);
  ASSERT_EQ(o["warnings"].size(), 5u);
  EXPECT_EQ(o["warnings"][0]["file"], policy);
  EXPECT_EQ(o["warnings"][0]["line"], 3);
  EXPECT_EQ(o["warnings"][0]["kind"], "denied_tool_offered");
  EXPECT_TRUE(has(o["warnings"][0]["message"].get<std::string>(), "`pay.method`"));
}

TEST_F(check_warnings, a_fallback_engine_is_checked_too_and_uses_the_fallback_lanes) {
  const auto r = cli({"check", "--config", file("fallback.yaml"), "--json"});
  EXPECT_EQ(r.code, exit_ok) << r.err;
  const json o = test::parse(r.out);
  ASSERT_EQ(o["engines"].size(), 2u);
  EXPECT_EQ(o["engines"][1]["role"], "routing.fallback");
  EXPECT_EQ(o["engines"][1]["name"], "systemone");
  EXPECT_EQ(o["engines"][1]["schema"], o["engines"][0]["schema"]);
  EXPECT_EQ(o["warnings"].size(), 4u);
  for (const json& w : o["warnings"]) EXPECT_NE(w["kind"], "fallback_lanes_unused") << w;
  const auto text = cli({"check", "--config", file("fallback.yaml")});
  EXPECT_TRUE(has(text.out, "the registry's questions fit its limits too")) << text.out;
}

TEST_F(check_warnings, what_serve_refuses_is_an_error_with_its_line) {
  write(dir_ / "policy.yaml", "confidence: p_max\nrules:\n  deny: [nope]\nlanes:\n  default: {execute: 0.8, fallback: 0.5}\n"
                              "on_engine_error: escalate\n");
  const auto r = cli({"check", "--config", file("baton.yaml")});
  EXPECT_EQ(r.code, exit_config);
  EXPECT_EQ(r.err, file("policy.yaml") + ":3: unknown tool `nope` in `rules.deny`\n");
  EXPECT_EQ(r.out, "");
  const auto j = cli({"check", "--config", file("baton.yaml"), "--json"});
  EXPECT_EQ(j.code, exit_config);
  EXPECT_EQ(test::parse(j.out)["error"], file("policy.yaml") + ":3: unknown tool `nope` in `rules.deny`");

  // A file that cannot be read has no line: the config's line that names it.
  write(dir_ / "missing.yaml", "# the registry\n\nregistry: none.yaml\npolicy: policy.yaml\n");
  const auto missing = cli({"check", "--config", file("missing.yaml")});
  EXPECT_EQ(missing.code, exit_config);
  EXPECT_EQ(missing.err, file("missing.yaml") + ":3: `registry` " + file("none.yaml") + ": cannot read the file (No such file or directory)\n");
  // A directory reads as nothing: it is named as what it is, not as an empty registry.
  std::filesystem::create_directories(dir_ / "tools.d");
  write(dir_ / "dir.yaml", "registry: tools.d\npolicy: policy.yaml\n");
  const auto dir = cli({"check", "--config", file("dir.yaml")});
  EXPECT_EQ(dir.code, exit_config);
  EXPECT_EQ(dir.err, file("dir.yaml") + ":1: `registry` " + file("tools.d") + ": is a directory, not a file\n");

  write(dir_ / "bad.yaml", "registry: tools.yaml\nengine:\n  name: gpt\n");
  const auto bad = cli({"check", "--config", file("bad.yaml")});
  EXPECT_EQ(bad.code, exit_config);
  EXPECT_TRUE(has(bad.err, file("bad.yaml") + ":3: ")) << bad.err;
}

TEST(cli_check, help_and_usage) {
  EXPECT_TRUE(has(cli({"--help"}).out, "check "));
  const auto help = cli({"check", "--help"});
  EXPECT_EQ(help.code, exit_ok);
  for (const char* flag : {"--config", "--tokenizer", "--json", "--strict", "Exit status", "FILE:LINE"}) {
    EXPECT_TRUE(has(help.out, flag)) << flag;
  }
  EXPECT_EQ(cli({"check", "extra"}).code, exit_usage);
  EXPECT_EQ(cli({"check", "--wat"}).code, exit_usage);
  EXPECT_EQ(cli({"check", "--tokenizer", "/nonexistent/release"}).code, exit_no_input);
  EXPECT_EQ(cli({"check", "--config", "/nonexistent/baton.yaml"}).code, exit_config);
}

}  // namespace
}  // namespace baton
