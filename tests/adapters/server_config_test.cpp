#include <gtest/gtest.h>

#include <sstream>

#include "adapters/cli.hpp"
#include "adapters/server_config.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

std::string problem(const std::string& yaml) {
  auto c = parse_server_config(yaml, "/etc/baton/baton.yaml");
  return c ? "" : c.error().message;
}

TEST(server_config, defaults_and_paths_relative_to_the_file) {
  auto c = parse_server_config("", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->server.host, "127.0.0.1");
  EXPECT_EQ(c->server.port, 8470);
  EXPECT_EQ(c->engine.name, "keyword");
  EXPECT_EQ(c->registry, "/etc/baton/tools.yaml");
  EXPECT_EQ(c->policy, "/etc/baton/policy.yaml");
  EXPECT_TRUE(c->durable_ack);

  c = parse_server_config(R"(server: {listen: "[::1]:9000", io_threads: 4, max_frame_bytes: 2048}
engine: {name: clef, model: release, dtype: bf16, timeout_ms: 500}
registry: /srv/tools.yaml
log: {path: db/decisions.db, durable_ack: false, synchronous: normal, store_state: true}
executors: {timeout_ms: 250, max_output_bytes: 4096}
)",
                          "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->server.host, "::1");
  EXPECT_EQ(c->server.port, 9000);
  EXPECT_EQ(c->server.io_threads, 4u);
  EXPECT_EQ(c->server.max_frame_bytes, 2048u);
  EXPECT_EQ(c->engine.model, "/etc/baton/release");
  EXPECT_EQ(c->engine.timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c->registry, "/srv/tools.yaml");
  EXPECT_EQ(c->log.path, "/etc/baton/db/decisions.db");
  EXPECT_EQ(c->log.synchronous, log::log_options::sync_mode::normal);
  EXPECT_TRUE(c->log.store_state);
  EXPECT_FALSE(c->durable_ack);
  EXPECT_EQ(c->executors.default_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(c->executors.max_output_bytes, 4096u);
}

TEST(server_config, problems_name_the_file_and_line) {
  EXPECT_EQ(problem("server:\n  listen: nowhere\n"),
            "/etc/baton/baton.yaml:2: `server.listen` must be HOST:PORT, e.g. 127.0.0.1:8470");
  EXPECT_EQ(problem("server: {colour: red}\n"), "/etc/baton/baton.yaml:1: unknown key `colour` in `server`");
  EXPECT_EQ(problem("engine: {name: clef}\n"),
            "/etc/baton/baton.yaml:1: `engine.name: clef` needs `engine.model`, a release directory");
  EXPECT_EQ(problem("engine: {name: gpt}\n"), "/etc/baton/baton.yaml:1: `engine.name` must be keyword or clef");
  EXPECT_EQ(problem("log: {synchronous: sometimes}\n"),
            "/etc/baton/baton.yaml:1: `log.synchronous` must be off, normal or full");
  EXPECT_EQ(problem("server: {io_threads: 0}\n"),
            "/etc/baton/baton.yaml:1: `server.io_threads` must be an integer within [1, 256]");
  EXPECT_EQ(problem("engines: {}\n").substr(0, 26), "/etc/baton/baton.yaml:1: u");
}

TEST(server_config, listen_addresses) {
  server_options o;
  EXPECT_TRUE(parse_listen("0.0.0.0:0", o));
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.port, 0);
  EXPECT_TRUE(parse_listen("localhost:8080", o));
  EXPECT_EQ(o.port, 8080);
  for (const char* bad : {"8470", ":8470", "host:", "host:70000", "host:80x", "[::1:80"}) {
    EXPECT_FALSE(parse_listen(bad, o)) << bad;
  }
}

TEST(server_config, the_shipped_configs_load) {
  for (const char* f : {"config/baton.yaml", "config/examples/support/baton.yaml", "config/examples/oncall/baton.yaml"}) {
    auto c = load_server_config(test::source_dir() / f);
    EXPECT_TRUE(c) << f << ": " << c.error().message;
  }
}

TEST(serve_cli, usage_and_configuration_errors) {
  auto run = [](std::vector<std::string_view> args) {
    std::istringstream in;
    std::ostringstream out, err;
    const int code = run_cli(args, in, out, err);
    return std::make_tuple(code, out.str(), err.str());
  };
  auto [help, help_out, help_err] = run({"serve", "--help"});
  EXPECT_EQ(help, 0);
  EXPECT_NE(help_out.find("Usage: baton serve"), std::string::npos);
  auto [missing, m_out, m_err] = run({"serve", "--config", "/nonexistent/baton.yaml"});
  EXPECT_EQ(missing, 78);
  EXPECT_EQ(m_err, "baton serve: /nonexistent/baton.yaml: cannot read the file\n");
  auto [listen, l_out, l_err] =
      run({"serve", "--config", (test::source_dir() / "config/baton.yaml").c_str(), "--listen", "nowhere"});
  EXPECT_EQ(listen, 64);
  EXPECT_NE(l_err.find("--listen takes HOST:PORT"), std::string::npos);
}

}  // namespace
}  // namespace baton
