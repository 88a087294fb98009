// MCP servers as a registry source and the `mcp` executor, against real servers over stdio: the
// official reference server (@modelcontextprotocol/server-everything) and one of ours on the
// official SDK whose tools fail on purpose (tests/mcp/failing_server.mjs), both pinned by
// tests/mcp/package-lock.json and installed by scripts/setup.sh.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <sys/wait.h>

#include <filesystem>
#include <optional>

#include "core/error_codes.hpp"
#include "tools/arguments.hpp"
#include "tools/executor.hpp"
#include "tools/mcp_client.hpp"
#include "tools/registry.hpp"

namespace baton::tools {
namespace {

namespace net = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path source_dir = BATON_SOURCE_DIR;
const std::string everything = (source_dir / "tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js").string();
const std::string failing = (source_dir / "tests/mcp/failing_server.mjs").string();

class mcp : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(everything)) GTEST_SKIP() << "tests/mcp is not installed (scripts/setup.sh runs npm ci there)";
  }

  static mcp_server_config server(const std::string& name, const std::string& script, std::vector<std::pair<std::string, std::string>> env = {}) {
    mcp_server_config c;
    c.name = name;
    c.argv = {"node", script};
    c.env = std::move(env);
    c.timeout = 10s;
    return c;
  }

  static std::string registry_yaml(const std::string& extra = "") {
    return "mcp_servers:\n"
           "  everything: {command: node, args: [\"" + everything + "\"]}\n"
           "  failing:\n"
           "    command: node\n"
           "    args: [\"" + failing + "\"]\n"
           "    timeout_ms: 20000\n" + extra;
  }

  // One run of `t`'s executor on a fresh I/O context, run to the end (children reaped).
  tool_outcome run(const tool& t, json arguments, const executor_limits& limits = {}) {
    net::io_context io;
    std::optional<tool_outcome> got;
    {
      auto e = make_executor(t, io.get_executor(), limits);
      e->run({"d-1", t.id, std::move(arguments)}, [&](tool_outcome o) { got = std::move(o); });
      while (!got && io.run_one_for(30s) > 0) {
      }
    }
    io.restart();
    io.run_for(5s);
    EXPECT_TRUE(got.has_value()) << t.id << ": no outcome";
    return got.value_or(tool_outcome{});
  }

  registry load(const std::string& yaml) {
    auto r = parse_registry(yaml, "mcp.yaml", request_limits{});
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : registry{};
  }
};

bool no_children_left() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

TEST_F(mcp, the_reference_server_initializes_and_lists_its_tools) {
  auto [tools, failure] = discover_mcp_tools(server("everything", everything), executor_limits{});
  ASSERT_FALSE(failure) << failure->detail;
  const auto echo = std::find_if(tools.begin(), tools.end(), [](const mcp_tool_info& t) { return t.name == "echo"; });
  ASSERT_NE(echo, tools.end());
  EXPECT_EQ(echo->input_schema["required"], json::array({"message"}));
  EXPECT_TRUE(echo->annotations.value("readOnlyHint", false));
  EXPECT_TRUE(no_children_left());
}

TEST_F(mcp, servers_tools_become_registry_tools_with_choices_booleans_and_risk) {
  const registry r = load(registry_yaml("    risk: {echo: medium}\n    exclude: [crash]\n"));
  const tool* annotated = find_tool(r, "everything.get-annotated-message");
  ASSERT_NE(annotated, nullptr);
  ASSERT_EQ(annotated->parameters.size(), 2u);
  EXPECT_EQ(annotated->parameters[0].name, "messageType");
  EXPECT_EQ(annotated->parameters[0].type, parameter_type::choice);
  EXPECT_EQ(annotated->parameters[0].values.size(), 3u);
  EXPECT_EQ(annotated->parameters[1].type, parameter_type::boolean);
  EXPECT_EQ(annotated->risk, risk_level::low);  // readOnlyHint
  const tool* pick = find_tool(r, "failing.pick");
  ASSERT_NE(pick, nullptr);
  ASSERT_EQ(pick->parameters.size(), 3u);
  EXPECT_EQ(pick->parameters[0].type, parameter_type::choice);
  EXPECT_EQ(pick->parameters[1].type, parameter_type::boolean);
  EXPECT_EQ(pick->parameters[2].type, parameter_type::text);
  EXPECT_FALSE(pick->parameters[2].value.has_value());  // the agent's to give
  EXPECT_EQ(pick->executor["type"], "mcp");
  EXPECT_EQ(find_tool(r, "failing.delete_all")->risk, risk_level::high);  // destructiveHint
  EXPECT_EQ(find_tool(r, "failing.echo")->risk, risk_level::medium);      // the file's override
  EXPECT_EQ(find_tool(r, "failing.crash"), nullptr);                      // excluded
  // A reviewer's (or an MCP client's) arguments: an MCP text argument may be any JSON (a number
  // for get-sum), which its server checks; a choice must still be one of its values.
  json sum = {{"a", 2}, {"b", 40}};
  EXPECT_TRUE(complete_arguments(*find_tool(r, "everything.get-sum"), sum).empty());
  json wrong = {{"color", "purple"}, {"loud", true}, {"note", 7}};
  const auto issues = complete_arguments(*pick, wrong);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].loc, json::array({"arguments", "color"}));
  EXPECT_TRUE(no_children_left());
}

TEST_F(mcp, a_prefix_names_the_tools_and_a_clash_is_refused) {
  // A gateway that shows the tools as their server names them: `prefix: ""`.
  const registry bare = load("mcp_servers:\n  failing: {command: node, args: [\"" + failing + "\"], prefix: \"\"}\n");
  ASSERT_NE(find_tool(bare, "pick"), nullptr);
  EXPECT_EQ(find_tool(bare, "pick")->executor["tool"], "pick");
  EXPECT_EQ(find_tool(bare, "pick")->group, "failing");
  EXPECT_EQ(find_tool(bare, "failing.pick"), nullptr);
  const registry other = load("mcp_servers:\n  failing: {command: node, args: [\"" + failing + "\"], prefix: ops_}\n");
  EXPECT_NE(find_tool(other, "ops_pick"), nullptr);
  // Two servers whose tools come out with one name: the second is refused, named.
  auto clash = parse_registry("mcp_servers:\n  a: {command: node, args: [\"" + failing + "\"], prefix: \"\"}\n"
                              "  b: {command: node, args: [\"" + failing + "\"], prefix: \"\"}\n",
                              "mcp.yaml", request_limits{});
  ASSERT_FALSE(clash);
  EXPECT_NE(clash.error().message.find("duplicate tool id `"), std::string::npos) << clash.error().message;
  auto bad = parse_registry("mcp_servers:\n  a: {command: node, args: [\"" + failing + "\"], prefix: \"a b\"}\n",
                            "mcp.yaml", request_limits{});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bad prefix `a b`"), std::string::npos) << bad.error().message;
  EXPECT_TRUE(no_children_left());
}

TEST_F(mcp, a_server_that_cannot_be_listed_or_a_wrong_name_is_a_registry_error) {
  auto missing = parse_registry("mcp_servers:\n  gone: {command: /nonexistent/mcp-server}\n", "mcp.yaml", request_limits{});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, codes::invalid_registry);
  EXPECT_NE(missing.error().message.find("mcp.yaml:2: MCP server `gone`: "), std::string::npos) << missing.error().message;
  auto typo = parse_registry(registry_yaml("    include: [ecko]\n"), "mcp.yaml", request_limits{});
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("lists no tool `ecko`"), std::string::npos) << typo.error().message;
  // A server that never answers initialize: refused at its timeout, the child stopped.
  auto silent = parse_registry("mcp_servers:\n  silent: {command: node, args: [\"" + failing +
                                   "\"], env: {FAILING_SERVER_NO_INIT: \"1\"}, timeout_ms: 1500}\n",
                               "mcp.yaml", request_limits{});
  ASSERT_FALSE(silent);
  EXPECT_NE(silent.error().message.find("no answer to initialize within 1500 ms"), std::string::npos) << silent.error().message;
  EXPECT_TRUE(no_children_left());
}

TEST_F(mcp, the_executor_calls_the_tool_and_returns_its_content) {
  const registry r = load(registry_yaml());
  const tool_outcome echo = run(*find_tool(r, "everything.echo"), {{"message", "hello"}});
  ASSERT_TRUE(echo.ok) << echo.error_code << " " << echo.detail;
  EXPECT_EQ(echo.output["content"][0]["text"], "Echo: hello");
  const tool_outcome weather = run(*find_tool(r, "everything.get-structured-content"), {{"location", "Chicago"}});
  ASSERT_TRUE(weather.ok) << weather.detail;
  EXPECT_TRUE(weather.output["structuredContent"].contains("temperature")) << weather.output.dump();
  const tool_outcome pick = run(*find_tool(r, "failing.pick"), {{"color", "red"}, {"loud", true}, {"note", "hi"}});
  ASSERT_TRUE(pick.ok) << pick.detail;
  EXPECT_EQ(pick.output["content"][0]["text"], "red true hi");
  EXPECT_TRUE(no_children_left());
}

TEST_F(mcp, failures_are_outcomes_and_the_server_is_started_again) {
  const registry r = load(registry_yaml());
  const tool& fail = *find_tool(r, "failing.fail");
  const tool_outcome error = run(fail, json::object());
  EXPECT_FALSE(error.ok);
  EXPECT_EQ(error.error_code, codes::executor_tool_error);
  EXPECT_NE(error.detail.find("it failed"), std::string::npos) << error.detail;
  // What the tool said stays the output: the log and an MCP client of baton's see it.
  EXPECT_NE(error.output["content"][0]["text"].get<std::string>().find("it failed"), std::string::npos) << error.output;

  const tool_outcome lacking = run(*find_tool(r, "failing.pick"), {{"color", "red"}, {"loud", true}});
  EXPECT_EQ(lacking.error_code, codes::executor_invalid_arguments);
  EXPECT_NE(lacking.detail.find("`note`"), std::string::npos) << lacking.detail;

  // One I/O context and the same executors throughout: the server is one process, restarted.
  net::io_context io;
  std::map<std::string, std::unique_ptr<executor>> executors;
  for (const char* id : {"failing.slow", "failing.echo", "failing.crash", "failing.malformed", "failing.big", "failing.hostile"}) {
    tool t = *find_tool(r, id);
    if (t.id == "failing.slow") t.executor["timeout_ms"] = 500;
    executors[id] = make_executor(t, io.get_executor(), executor_limits{});
  }
  auto call = [&](const std::string& id, json arguments) {
    std::optional<tool_outcome> got;
    executors[id]->run({"d", id, std::move(arguments)}, [&](tool_outcome o) { got = std::move(o); });
    io.restart();
    while (!got && io.run_one_for(30s) > 0) {
    }
    EXPECT_TRUE(got) << id;
    return got.value_or(tool_outcome{});
  };
  const tool_outcome slow = call("failing.slow", {{"ms", 10000}});
  EXPECT_EQ(slow.error_code, codes::executor_timeout) << slow.detail;
  EXPECT_LT(slow.duration_ms, 5000);
  EXPECT_TRUE(call("failing.echo", {{"text", "still here"}}).ok);  // the cancelled call left it working
  const tool_outcome crash = call("failing.crash", json::object());
  EXPECT_EQ(crash.error_code, codes::executor_unreachable);
  EXPECT_NE(crash.detail.find("exited with status 3"), std::string::npos) << crash.detail;
  const tool_outcome again = call("failing.echo", {{"text", "restarted"}});
  ASSERT_TRUE(again.ok) << again.detail;
  EXPECT_EQ(again.output["content"][0]["text"], "restarted");
  const tool_outcome malformed = call("failing.malformed", json::object());
  EXPECT_TRUE(malformed.ok) << malformed.detail;  // the line that is not JSON is skipped
  // Wrong types where the protocol has its own are read as absent; a line nested 100,000 deep is
  // skipped, not parsed into the stack.
  const tool_outcome hostile = call("failing.hostile", json::object());
  EXPECT_TRUE(hostile.ok) << hostile.detail;
  EXPECT_EQ(hostile.output["content"], json::array());
  EXPECT_EQ(hostile.output["structuredContent"], 7);
  // An argument the agent gave as text is read as the number the schema asks for, or refused.
  EXPECT_TRUE(call("failing.slow", {{"ms", "20"}}).ok);
  const tool_outcome not_number = call("failing.slow", {{"ms", "soon"}});
  EXPECT_EQ(not_number.error_code, codes::executor_invalid_arguments);
  EXPECT_NE(not_number.detail.find("`ms` must be a number"), std::string::npos) << not_number.detail;
  const tool_outcome big = call("failing.big", {{"bytes", 2 << 20}});
  EXPECT_EQ(big.error_code, codes::executor_output_too_large) << big.detail;
  EXPECT_TRUE(call("failing.echo", {{"text", "after"}}).ok);
  executors.clear();
  io.restart();
  io.run_for(5s);
  EXPECT_TRUE(no_children_left());
}

// Calls made at once on a server not yet started share one start, and both are answered.
TEST_F(mcp, calls_at_once_share_one_start) {
  const registry r = load(registry_yaml());
  net::io_context io;
  std::vector<std::optional<tool_outcome>> got(3);
  {
    std::vector<std::unique_ptr<executor>> executors;
    for (int i = 0; i < 3; ++i) executors.push_back(make_executor(*find_tool(r, "failing.echo"), io.get_executor(), executor_limits{}));
    for (int i = 0; i < 3; ++i) {
      executors[static_cast<std::size_t>(i)]->run({"d", "failing.echo", {{"text", std::to_string(i)}}},
                                                  [&got, i](tool_outcome o) { got[static_cast<std::size_t>(i)] = std::move(o); });
    }
    while (!(got[0] && got[1] && got[2]) && io.run_one_for(30s) > 0) {
    }
  }
  io.restart();
  io.run_for(5s);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[static_cast<std::size_t>(i)]) << i;
    EXPECT_TRUE(got[static_cast<std::size_t>(i)]->ok) << got[static_cast<std::size_t>(i)]->detail;
    EXPECT_EQ(got[static_cast<std::size_t>(i)]->output["content"][0]["text"], std::to_string(i));
  }
  EXPECT_TRUE(no_children_left());
}

TEST_F(mcp, a_changed_tool_list_is_announced) {
  net::io_context io;
  bool changed = false, done = false;
  {
    auto client = mcp_client::make(server("failing", failing), io.get_executor(), executor_limits{});
    client->on_tools_changed([&] { changed = true; });
    client->start([&](std::optional<mcp_failure> f) {
      ASSERT_FALSE(f) << f->detail;
      EXPECT_FALSE(client->protocol_version().empty());
      client->call_tool("add_tool", json::object(), 10s, [&](tool_outcome o) {
        EXPECT_TRUE(o.ok) << o.detail;
        EXPECT_EQ(client->skipped_lines(), 0u);
        client->list_tools([&](std::vector<mcp_tool_info> tools, std::optional<mcp_failure> f2) {
          EXPECT_FALSE(f2);
          EXPECT_TRUE(std::any_of(tools.begin(), tools.end(), [](const mcp_tool_info& t) { return t.name == "added"; }));
          done = true;
          client->stop();
        });
      });
    });
    io.run_for(30s);
  }
  io.restart();
  io.run_for(5s);
  EXPECT_TRUE(done);
  EXPECT_TRUE(changed);
  EXPECT_TRUE(no_children_left());
}

}  // namespace
}  // namespace baton::tools
