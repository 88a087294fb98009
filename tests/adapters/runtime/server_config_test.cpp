#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "adapters/cli/cli.hpp"
#include "adapters/runtime/server_config.hpp"
#include "support/env_var.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

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
  EXPECT_EQ(c->engine.clef.model_dir, "/etc/baton/release");
  EXPECT_EQ(c->engine.timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c->registry, "/srv/tools.yaml");
  EXPECT_EQ(c->log.path, "/etc/baton/db/decisions.db");
  EXPECT_EQ(c->log.synchronous, log::log_options::sync_mode::normal);
  EXPECT_TRUE(c->log.store_state);
  EXPECT_FALSE(c->durable_ack);
  EXPECT_EQ(c->executors.default_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(c->executors.max_output_bytes, 4096u);
}

// scripts/run.sh passes ROOT/config/baton.yaml, whose log is ../var/baton.db: the path baton logs
// and serves is ROOT/var/baton.db, not ROOT/config/../var/baton.db.
TEST(server_config, relative_paths_are_lexically_normal) {
  auto c = parse_server_config("registry: ../tools/./tools.yaml\nlog: {path: ../var/baton.db}\n",
                               "/srv/baton/config/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->log.path, "/srv/baton/var/baton.db");
  EXPECT_EQ(c->registry, "/srv/baton/tools/tools.yaml");
  EXPECT_EQ(c->policy, "/srv/baton/config/policy.yaml");
  c = parse_server_config("", "./config/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->registry, "config/tools.yaml");
}

TEST(server_config, problems_name_the_file_and_line) {
  EXPECT_EQ(problem("server:\n  listen: nowhere\n"),
            "/etc/baton/baton.yaml:2: `server.listen` must be HOST:PORT, e.g. 127.0.0.1:8470");
  EXPECT_EQ(problem("server: {colour: red}\n"), "/etc/baton/baton.yaml:1: unknown key `colour` in `server`");
  EXPECT_EQ(problem("engine: {name: clef}\n"),
            "/etc/baton/baton.yaml:1: `engine.name: clef` needs `engine.model`, a release directory");
  EXPECT_EQ(problem("engine: {name: gpt}\n"), "/etc/baton/baton.yaml:1: `engine.name` must be keyword, clef or systemone");
  EXPECT_EQ(problem("log: {synchronous: sometimes}\n"),
            "/etc/baton/baton.yaml:1: `log.synchronous` must be off, normal or full");
  EXPECT_EQ(problem("server: {io_threads: 0}\n"),
            "/etc/baton/baton.yaml:1: `server.io_threads` must be an integer within [1, 256]");
  EXPECT_EQ(problem("engines: {}\n").substr(0, 26), "/etc/baton/baton.yaml:1: u");
}

TEST(server_config, api_keys_rate_limits_and_the_systemone_section) {
  ::setenv("BATON_CONFIG_TEST_KEY", "  key-from-the-environment-42\n", 1);
  const char* yaml = R"(auth:
  requests_per_second: 50
  keys:
    - {name: bot, role: agent, env: BATON_CONFIG_TEST_KEY}
    - {name: ops, role: admin, env: BATON_CONFIG_TEST_KEY_2, requests_per_second: 0.5}
systemone: {model_aliases: [jev-latest, jev-1.13.0], confidence: margin}
server: {max_body_bytes: 1024, request_deadline_ms: 1500}
)";
  auto c = parse_server_config(yaml, "/etc/baton/baton.yaml");
  EXPECT_FALSE(c);
  EXPECT_EQ(c.error().message,
            "/etc/baton/baton.yaml:5: key `ops`: the environment variable `BATON_CONFIG_TEST_KEY_2` is not set");
  ::setenv("BATON_CONFIG_TEST_KEY_2", "another-key-0123456789", 1);
  c = parse_server_config(yaml, "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_EQ(c->auth.keys.size(), 2u);
  EXPECT_EQ(c->auth.keys[0].secret, "key-from-the-environment-42");  // white space around it is not the key
  EXPECT_EQ(c->auth.keys[0].role, role::agent);
  EXPECT_FALSE(c->auth.keys[0].limit);
  EXPECT_EQ(c->auth.keys[1].role, role::admin);
  ASSERT_TRUE(c->auth.keys[1].limit);
  EXPECT_EQ(c->auth.keys[1].limit->per_second, 0.5);
  EXPECT_EQ(c->auth.keys[1].limit->burst, 1.0);
  ASSERT_TRUE(c->auth.limit);
  EXPECT_EQ(c->auth.limit->burst, 50.0);
  EXPECT_EQ(c->systemone.model_aliases, (std::vector<std::string>{"jev-latest", "jev-1.13.0"}));
  EXPECT_EQ(c->systemone.confidence, confidence_metric::margin);
  EXPECT_EQ(c->server.max_body_bytes, 1024u);
  EXPECT_EQ(c->server.request_deadline, std::chrono::milliseconds(1500));
  // Defaults: no keys, the SDKs' default model name as an alias, the reference's confidence.
  c = parse_server_config("auth:\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->auth.keys.empty());
  EXPECT_EQ(c->systemone.model_aliases, std::vector<std::string>{"jev-latest"});
  EXPECT_EQ(c->systemone.confidence, confidence_metric::p_max);

  const std::string key = "{name: a, role: agent, env: BATON_CONFIG_TEST_KEY}";
  EXPECT_EQ(problem("auth: {keys: [{name: a, role: boss, env: BATON_CONFIG_TEST_KEY}]}\n"),
            "/etc/baton/baton.yaml:1: `auth.keys[0].role` must be agent, reviewer, auditor or admin");
  EXPECT_EQ(problem("auth: {keys: [" + key + ", " + key + "]}\n"), "/etc/baton/baton.yaml:1: two keys are named `a`");
  EXPECT_EQ(problem("auth: {keys: [" + key + ", {name: b, role: agent, env: BATON_CONFIG_TEST_KEY}]}\n"),
            "/etc/baton/baton.yaml:1: key `b` has the same secret as another key");
  EXPECT_EQ(problem("auth: {keys: [{name: a, role: agent}]}\n"),
            "/etc/baton/baton.yaml:1: key `a` needs exactly one of `env` (an environment variable) or `file`");
  ::setenv("BATON_CONFIG_TEST_SHORT", "short", 1);
  const std::string short_key = problem("auth: {keys: [{name: a, role: agent, env: BATON_CONFIG_TEST_SHORT}]}\n");
  EXPECT_EQ(short_key, "/etc/baton/baton.yaml:1: key `a`: the key must be at least 16 characters");
  EXPECT_EQ(short_key.find("short\n"), std::string::npos);
  EXPECT_EQ(problem("auth: {keys: [{name: a, role: agent, file: /nonexistent/key}]}\n"),
            "/etc/baton/baton.yaml:1: key `a`: /nonexistent/key: cannot read the file (No such file or directory)");
  EXPECT_EQ(problem("auth: {requests_per_second: 0}\n"),
            "/etc/baton/baton.yaml:1: `auth.requests_per_second` must be a number above 0");
  EXPECT_EQ(problem("auth: {burst: 5}\n"), "/etc/baton/baton.yaml:1: `auth.burst` needs `auth.requests_per_second`");
  EXPECT_EQ(problem("systemone: {confidence: vibes}\n"),
            "/etc/baton/baton.yaml:1: `systemone.confidence` must be p_max or margin");
}

TEST(server_config, the_systemone_engine) {
  ::setenv("BATON_CONFIG_UPSTREAM_KEY", "upstream-key-0123456789", 1);
  auto c = parse_server_config(R"(engine: {model: jev-latest, name: systemone, url: "http://10.0.0.7:8470",
  key_env: BATON_CONFIG_UPSTREAM_KEY, connections: 4, retries: 0, connect_timeout_ms: 500, request_timeout_ms: 3000}
)",
                               "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.systemone.model, "jev-latest");  // a name, not a path, whatever the key order
  EXPECT_TRUE(c->engine.clef.model_dir.empty());
  EXPECT_EQ(c->engine.systemone.api_key, "upstream-key-0123456789");
  EXPECT_EQ(c->engine.systemone.connections, 4u);
  EXPECT_EQ(c->engine.systemone.retries, 0);
  EXPECT_EQ(c->engine.systemone.timeout, std::chrono::milliseconds(3000));
  EXPECT_TRUE(c->engine.systemone.ca_file.empty());  // https: the system's CAs
  // A private CA, relative to the config file as every path.
  c = parse_server_config("engine: {name: systemone, url: \"https://models.internal\", ca_file: certs/ca.pem}\n"
                          "routing: {fallback: {name: systemone, url: \"https://big.internal\", ca_file: /etc/ssl/big.pem}}\n",
                          "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.systemone.ca_file, "/etc/baton/certs/ca.pem");
  EXPECT_EQ(c->fallback->systemone.ca_file, "/etc/ssl/big.pem");
  EXPECT_EQ(problem("engine: {name: keyword, ca_file: ca.pem}\n"),
            "/etc/baton/baton.yaml:1: `engine.ca_file` is read only by the systemone engine");
  EXPECT_EQ(problem("engine: {name: systemone}\n"),
            "/etc/baton/baton.yaml:1: `engine.name: systemone` needs `engine.url`, the server's base URL");
  EXPECT_EQ(problem("engine: {name: keyword, url: \"http://x\"}\n"),
            "/etc/baton/baton.yaml:1: `engine.url` is read only by the systemone engine");
  EXPECT_EQ(problem("engine: {name: systemone, url: \"http://x\", key_env: BATON_CONFIG_NOT_SET}\n"),
            "/etc/baton/baton.yaml:1: `engine.key_env`: the environment variable `BATON_CONFIG_NOT_SET` is not set");
}

TEST(server_config, the_workers_ai_flavor) {
  // Cloudflare's variables unless told others; the URL and the model are the engine's defaults.
  {
    const test::env_var account("CLOUDFLARE_ACCOUNT_ID", "0123456789abcdef");
    auto c = [] {
      const test::env_var token("CLOUDFLARE_API_TOKEN", "cf-token-0123456789");
      return parse_server_config("engine: {name: systemone, flavor: workers-ai}\n", "/etc/baton/baton.yaml");
    }();
    ASSERT_TRUE(c) << c.error().message;
    const systemone_engine_options& o = c->engine.systemone;
    EXPECT_EQ(o.flavor, systemone_flavor::workers_ai);
    EXPECT_EQ(o.account, "0123456789abcdef");
    EXPECT_EQ(o.api_key, "cf-token-0123456789");
    EXPECT_EQ(o.account_env, "CLOUDFLARE_ACCOUNT_ID");
    EXPECT_EQ(o.key_env, "CLOUDFLARE_API_TOKEN");
    EXPECT_TRUE(o.url.empty());
    EXPECT_TRUE(o.model.empty());
    const test::env_var no_token("CLOUDFLARE_API_TOKEN", nullptr);
    EXPECT_EQ(problem("engine:\n  name: systemone\n  flavor: workers-ai\n"),
              "/etc/baton/baton.yaml:3: `engine.flavor: workers-ai` needs a Cloudflare API token in the environment variable "
              "`CLOUDFLARE_API_TOKEN` (`engine.key_env` names another), which is unset or empty");
  }

  // As the larger model, with variables of its own, another base URL and model.
  const test::env_var account("BATON_CONFIG_CF_ACCOUNT", "fedcba9876543210"),
      token("BATON_CONFIG_CF_TOKEN", "cf-token-9876543210"), empty("BATON_CONFIG_EMPTY", "");
  auto c = parse_server_config(R"(routing:
  fallback: {name: systemone, flavor: workers-ai, url: "http://127.0.0.1:8788", model: "@cf/cloudflare/clef-omni",
             account_env: BATON_CONFIG_CF_ACCOUNT, key_env: BATON_CONFIG_CF_TOKEN, retries: 3}
)",
                          "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.name, "keyword");
  const systemone_engine_options& f = c->fallback->systemone;
  EXPECT_EQ(f.flavor, systemone_flavor::workers_ai);
  EXPECT_EQ(f.url, "http://127.0.0.1:8788");
  EXPECT_EQ(f.model, "@cf/cloudflare/clef-omni");
  EXPECT_EQ(f.account, "fedcba9876543210");
  EXPECT_EQ(f.api_key, "cf-token-9876543210");
  EXPECT_EQ(f.key_env, "BATON_CONFIG_CF_TOKEN");
  EXPECT_EQ(f.retries, 3);
  EXPECT_EQ(problem("routing: {fallback: {name: systemone, flavor: workers-ai, key_env: BATON_CONFIG_CF_TOKEN, "
                    "account_env: BATON_CONFIG_EMPTY}}\n"),
            "/etc/baton/baton.yaml:1: `routing.fallback.flavor: workers-ai` needs the Cloudflare account id in the environment "
            "variable `BATON_CONFIG_EMPTY` (`routing.fallback.account_env` names another), which is unset or empty");
  EXPECT_EQ(problem("engine: {name: systemone, flavor: openai}\n"),
            "/etc/baton/baton.yaml:1: `engine.flavor` must be systemone or workers-ai");
  EXPECT_EQ(problem("engine: {name: keyword, flavor: workers-ai}\n"),
            "/etc/baton/baton.yaml:1: `engine.flavor` is read only by the systemone engine");
  EXPECT_EQ(problem("engine: {name: systemone, url: \"http://x\", account_env: BATON_CONFIG_CF_ACCOUNT}\n"),
            "/etc/baton/baton.yaml:1: `engine.account_env` is read only by the workers-ai flavor (`engine.flavor: workers-ai`)");
  // The plain flavor keeps its own: a URL is needed, and its key's variable is named.
  c = parse_server_config("engine: {name: systemone, flavor: systemone, url: \"http://x\", key_env: BATON_CONFIG_CF_TOKEN}\n",
                          "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.systemone.flavor, systemone_flavor::systemone);
  EXPECT_EQ(c->engine.systemone.key_env, "BATON_CONFIG_CF_TOKEN");
  EXPECT_EQ(c->engine.systemone.api_key, "cf-token-9876543210");
}

// config/examples/workers-ai/baton.yaml as README's commands use it.
TEST(server_config, the_workers_ai_example) {
  const auto example = test::source_dir() / "config/examples/workers-ai/baton.yaml";
  const test::env_var token("CLOUDFLARE_API_TOKEN", "cf-token-0123456789");
  auto account = std::make_optional<test::env_var>("CLOUDFLARE_ACCOUNT_ID", "0123456789abcdef");
  auto c = load_server_config(example);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.name, "systemone");
  EXPECT_EQ(c->engine.systemone.flavor, systemone_flavor::workers_ai);
  EXPECT_EQ(c->engine.systemone.account, "0123456789abcdef");
  EXPECT_EQ(c->engine.systemone.api_key, "cf-token-0123456789");
  EXPECT_TRUE(std::filesystem::exists(c->registry)) << c->registry;
  EXPECT_TRUE(std::filesystem::exists(c->policy)) << c->policy;
  // Without the account, `baton serve` stops before it starts, saying which variable to set.
  account.emplace("CLOUDFLARE_ACCOUNT_ID", nullptr);
  std::istringstream in;
  std::ostringstream out, err;
  const std::vector<std::string_view> args = {"serve", "--config", example.c_str()};
  EXPECT_EQ(run_cli(args, in, out, err), 78);
  EXPECT_NE(err.str().find("needs the Cloudflare account id in the environment variable `CLOUDFLARE_ACCOUNT_ID`"), std::string::npos)
      << err.str();
}

TEST(server_config, the_clef_engines_media_section) {
  auto c = parse_server_config(R"(engine:
  name: clef
  model: release
  media:
    roots: [media, /srv/clips]
    max_images: 8
    max_videos: 1
    max_bytes: 1048576
    max_pixels: 4000000
    max_audio_seconds: 120
    max_video_seconds: 30
    decode_timeout_ms: 5000
    urls: {enabled: true, hosts: [cdn.example.com], ca_file: certs/ca.pem, timeout_ms: 2500}
)",
                               "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  const auto& m = c->engine.clef.media;
  ASSERT_EQ(m.sources.roots.size(), 2u);
  EXPECT_EQ(m.sources.roots[0], "/etc/baton/media");
  EXPECT_EQ(m.sources.roots[1], "/srv/clips");
  EXPECT_TRUE(m.sources.urls);
  EXPECT_EQ(m.sources.url_hosts, std::vector<std::string>{"cdn.example.com"});
  EXPECT_EQ(m.sources.ca_file, "/etc/baton/certs/ca.pem");
  EXPECT_EQ(m.sources.url_timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(m.sources.max_bytes, 1048576u);
  EXPECT_EQ(m.max_images, 8u);
  EXPECT_EQ(m.max_audio, 4u);
  EXPECT_EQ(m.max_videos, 1u);
  EXPECT_EQ(m.images.max_bytes, 1048576u);
  EXPECT_EQ(m.videos.max_pixels, 4000000);
  EXPECT_EQ(m.audio.max_seconds, 120);
  EXPECT_EQ(m.videos.max_seconds, 30);
  EXPECT_EQ(m.images.time_budget, std::chrono::milliseconds(5000));

  // Defaults: no local paths, no URLs, Workers AI's durations.
  c = parse_server_config("engine: {name: clef, model: release}\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->engine.clef.media.sources.roots.empty());
  EXPECT_FALSE(c->engine.clef.media.sources.urls);
  EXPECT_EQ(c->engine.clef.media.audio.max_seconds, 300);
  EXPECT_EQ(c->engine.clef.media.videos.max_seconds, 60);

  EXPECT_EQ(problem("engine: {name: keyword, media: {roots: [x]}}\n"),
            "/etc/baton/baton.yaml:1: `engine.media` is read only by the clef engine");
  EXPECT_EQ(problem("engine: {name: clef, model: r, media: {urls: {enabled: true}}}\n"),
            "/etc/baton/baton.yaml:1: `engine.media.urls`: enabled URLs need `hosts`, the host names media may be "
            "fetched from");
  EXPECT_EQ(problem("engine: {name: clef, model: r, media: {roots: x}}\n"),
            "/etc/baton/baton.yaml:1: `engine.media.roots` must be a list");
  EXPECT_NE(problem("engine: {name: clef, model: r, media: {colour: x}}\n").find("colour"), std::string::npos);
}

TEST(server_config, the_clef_model_id) {
  auto c = parse_server_config("engine: {name: clef, model: release, model_id: Cloudflare/clef-omni}\n",
                               "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.clef.model_id, "Cloudflare/clef-omni");
  c = parse_server_config("engine: {name: clef, model: release}\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.clef.model_id, "");
  EXPECT_EQ(problem("engine: {name: clef, model: release, model_id: \"\"}\n"),
            "/etc/baton/baton.yaml:1: `engine.model_id` must not be empty");
  EXPECT_EQ(problem("engine: {name: keyword, model_id: mine}\n"),
            "/etc/baton/baton.yaml:1: `engine.model_id` is read only by the clef engine");
}

TEST(server_config, the_clef_engines_prefix_cache) {
  auto c = parse_server_config("engine: {name: clef, model: release}\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->engine.clef.model.prefix_cache.enabled);
  EXPECT_EQ(c->engine.clef.model.prefix_cache.max_bytes, 0);
  EXPECT_EQ(c->engine.clef.model.prefix_cache.block_tokens, 16);

  c = parse_server_config(R"(engine:
  name: clef
  model: release
  prefix_cache: {enabled: false, max_bytes: 8589934592, block_tokens: 128}
routing:
  fallback: {name: clef, model: big, prefix_cache: {block_tokens: 16}}
)",
                          "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE(c->engine.clef.model.prefix_cache.enabled);
  EXPECT_EQ(c->engine.clef.model.prefix_cache.max_bytes, std::int64_t(8) << 30);
  EXPECT_EQ(c->engine.clef.model.prefix_cache.block_tokens, 128);
  ASSERT_TRUE(c->fallback);
  EXPECT_TRUE(c->fallback->clef.model.prefix_cache.enabled);
  EXPECT_EQ(c->fallback->clef.model.prefix_cache.block_tokens, 16);

  const std::string clef = "engine: {name: clef, model: r, prefix_cache: ";
  EXPECT_EQ(problem("engine: {name: keyword, prefix_cache: {enabled: true}}\n"),
            "/etc/baton/baton.yaml:1: `engine.prefix_cache` is read only by the clef engine");
  EXPECT_EQ(problem(clef + "{enabled: sometimes}}\n"),
            "/etc/baton/baton.yaml:1: `engine.prefix_cache.enabled` must be true or false");
  EXPECT_EQ(problem(clef + "{max_bytes: -1}}\n"),
            "/etc/baton/baton.yaml:1: `engine.prefix_cache.max_bytes` must be an integer within [0, 1125899906842624]");
  EXPECT_EQ(problem(clef + "{max_bytes: 8GB}}\n"),
            "/etc/baton/baton.yaml:1: `engine.prefix_cache.max_bytes` must be an integer within [0, 1125899906842624]");
  EXPECT_EQ(problem(clef + "{block_tokens: 8}}\n"),
            "/etc/baton/baton.yaml:1: `engine.prefix_cache.block_tokens` must be an integer within [16, 4096]");
  EXPECT_EQ(problem(clef + "{block_tokens: 8192}}\n"),
            "/etc/baton/baton.yaml:1: `engine.prefix_cache.block_tokens` must be an integer within [16, 4096]");
  EXPECT_EQ(problem(clef + "{block_tokens: 64.5}}\n"),
            "/etc/baton/baton.yaml:1: `engine.prefix_cache.block_tokens` must be an integer within [16, 4096]");
  EXPECT_EQ(problem(clef + "true}\n"), "/etc/baton/baton.yaml:1: `engine.prefix_cache` must be a mapping");
  EXPECT_NE(problem(clef + "{size: 1}}\n").find("size"), std::string::npos);
}

TEST(server_config, how_a_history_is_fitted_to_the_window) {
  auto c = parse_server_config("", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->history.keep_first, 1u);
  EXPECT_EQ(c->history.fraction, 0.25);
  EXPECT_FALSE(c->fallback);

  c = parse_server_config("routing: {keep_first: 0, drop_fraction: 1}\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->history.keep_first, 0u);
  EXPECT_EQ(c->history.fraction, 1.0);
  EXPECT_FALSE(c->fallback);  // routing's other keys configure no fallback engine
  c = parse_server_config("routing: {keep_first: 3, drop_fraction: 0.1}\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->history.keep_first, 3u);
  EXPECT_EQ(c->history.fraction, 0.1);

  EXPECT_EQ(problem("routing: {keep_first: -1}\n"),
            "/etc/baton/baton.yaml:1: `routing.keep_first` must be an integer within [0, 1048576]");
  EXPECT_EQ(problem("routing: {keep_first: first}\n"),
            "/etc/baton/baton.yaml:1: `routing.keep_first` must be an integer within [0, 1048576]");
  for (const char* fraction : {"0", "-0.25", "1.5", "quarter", "true"}) {
    EXPECT_EQ(problem(std::string("routing: {drop_fraction: ") + fraction + "}\n"),
              "/etc/baton/baton.yaml:1: `routing.drop_fraction` must be a number above 0 and at most 1 (the share "
              "of the droppable events that fit which one cut drops)")
        << fraction;
  }
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
  for (const char* f : {"config/baton.yaml", "config/examples/support/baton.yaml", "config/examples/oncall/baton.yaml",
                        "config/examples/clef/baton.yaml"}) {
    auto c = load_server_config(test::source_dir() / f);
    EXPECT_TRUE(c) << f << ": " << c.error().message;
  }
}

// The real model's example names it by repository: found in the Hugging Face cache `baton pull`
// fills, and when it is not there the error says which command fetches it.
TEST(server_config, the_real_model_example_reads_the_release_from_the_cache) {
  namespace fs = std::filesystem;
  const test::scratch_dir scratch("baton-real-model");
  const fs::path cache = scratch / "hub";  // not there yet
  const test::env_var hub_cache("HF_HUB_CACHE", cache.c_str());
  const auto example = test::source_dir() / "config/examples/clef/real-model.yaml";
  const auto missing = load_server_config(example);

  const std::string commit(40, 'c');
  const fs::path snapshot = cache / "models--Cloudflare--clef-omni" / "snapshots" / commit;
  fs::create_directories(snapshot);
  fs::create_directories(cache / "models--Cloudflare--clef-omni" / "refs");
  std::ofstream(cache / "models--Cloudflare--clef-omni" / "refs" / "main") << commit;
  const auto c = load_server_config(example);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("`baton pull Cloudflare/clef-omni` downloads it"), std::string::npos)
      << missing.error().message;
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.name, "clef");
  EXPECT_EQ(c->engine.clef.model_dir, snapshot);
  ASSERT_TRUE(c->engine.clef.model.dtype.has_value());
  EXPECT_EQ(*c->engine.clef.model.dtype, clef::compute_dtype::bf16);
  EXPECT_TRUE(fs::exists(c->registry)) << c->registry;
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
  EXPECT_EQ(m_err, "baton serve: /nonexistent/baton.yaml: cannot read the file (No such file or directory)\n");
  auto [listen, l_out, l_err] =
      run({"serve", "--config", (test::source_dir() / "config/baton.yaml").c_str(), "--listen", "nowhere"});
  EXPECT_EQ(listen, 64);
  EXPECT_NE(l_err.find("--listen takes HOST:PORT"), std::string::npos);
  EXPECT_NE(help_out.find("--db PATH"), std::string::npos);
  auto [db, d_out, d_err] = run({"serve", "--config", (test::source_dir() / "config/baton.yaml").c_str(), "--db", ""});
  EXPECT_EQ(db, 64);
  EXPECT_NE(d_err.find("--db needs a path"), std::string::npos) << d_err;
  // --model-id names the clef engine's model: the keyword engine has its own name.
  auto [model_id, i_out, i_err] =
      run({"serve", "--config", (test::source_dir() / "config/baton.yaml").c_str(), "--model-id", "mine"});
  EXPECT_EQ(model_id, 64);
  EXPECT_NE(i_err.find("--model-id names the clef engine's model"), std::string::npos) << i_err;
}

TEST(server_config, the_postgresql_log) {
  ::setenv("BATON_CONFIG_TEST_DB", "  a pass phrase  \n", 1);
  auto c = parse_server_config("log:\n  url: postgresql://baton@db.example:5432/baton\n"
                               "  password: {env: BATON_CONFIG_TEST_DB}\n  instance: baton-1\n  chains: global\n"
                               "  retry_ms: 2500\n",
                               "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->log.shared());
  EXPECT_EQ(c->log.url, "postgresql://baton@db.example:5432/baton");
  EXPECT_EQ(c->log.password, "a pass phrase");  // white space inside a password is kept
  EXPECT_EQ(c->log.instance, "baton-1");
  EXPECT_EQ(c->log.chains, log::log_options::chain_mode::global);
  EXPECT_EQ(c->log.retry_ms, 2500);
  EXPECT_EQ(c->log.where(), "postgresql://baton@db.example:5432/baton");

  // The password never in the URL, and the error does not repeat it.
  const std::string in_url = problem("log: {url: 'postgresql://baton:hunter22@db/baton'}\n");
  EXPECT_NE(in_url.find("the URL holds a password"), std::string::npos) << in_url;
  EXPECT_EQ(in_url.find("hunter22"), std::string::npos) << in_url;
  EXPECT_EQ(problem("log: {url: 'mysql://db/baton'}\n"),
            "/etc/baton/baton.yaml:1: `log.url`: must start with postgresql://");
  EXPECT_EQ(problem("log: {url: 'postgresql://db/baton', path: x.db}\n"),
            "/etc/baton/baton.yaml:1: `log.url` and `log.path` exclude each other: the log is a PostgreSQL database or a SQLite file");
  EXPECT_EQ(problem("log: {instance: a}\n"),
            "/etc/baton/baton.yaml:1: `log.instance` is for the PostgreSQL store: it needs `log.url`");
  EXPECT_EQ(problem("log: {url: 'postgresql://db/baton', chains: per_row}\n"),
            "/etc/baton/baton.yaml:1: `log.chains` must be instance or global");
  ::unsetenv("BATON_CONFIG_TEST_DB_UNSET");
  EXPECT_NE(problem("log: {url: 'postgresql://db/baton', password: {env: BATON_CONFIG_TEST_DB_UNSET}}\n")
                .find("BATON_CONFIG_TEST_DB_UNSET"),
            std::string::npos);
}

}  // namespace
}  // namespace baton
