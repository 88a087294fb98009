// The clef engine as the commands configure it: config/examples/clef/baton.yaml through the
// configuration loader and under a real `baton serve` process, --model-id, and the messages for a
// model directory that is not there.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "adapters/cli/cli.hpp"
#include "adapters/runtime/server_config.hpp"
#include "adapters/server/running_server.hpp"
#include "adapters/log/log_reader.hpp"
#include "core/answers.hpp"
#include "engine/factory/make_engine.hpp"
#include "support/http_client.hpp"
#include "support/server_fixture.hpp"
#include "tools/schema_compiler.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

extern char** environ;

namespace baton {
namespace {

namespace fs = std::filesystem;

const fs::path example = test::source_dir() / "config/examples/clef/baton.yaml";
const fs::path tiny = test::data_dir() / "vectors/clef-omni-tiny";

// The tiny release's image record and what the reference answers for it.
std::pair<json, json> image_record() {
  std::ifstream records(tiny / "records.jsonl"), expected(tiny / "expected.jsonl");
  for (std::string a, b; std::getline(records, a) && std::getline(expected, b);) {
    if (json record = test::parse(a); record["id"] == "image_basic") return {record["request"], test::parse(b)["response"]};
  }
  ADD_FAILURE() << "no image_basic record in " << tiny;
  return {};
}

TEST(clef_example, loads_through_the_server_configuration_loader) {
  auto c = load_server_config(example);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.name, "clef");
  EXPECT_EQ(fs::weakly_canonical(c->engine.clef.model_dir), fs::weakly_canonical(tiny / "release"));
  EXPECT_EQ(c->engine.clef.model_id, "clef-omni-tiny");
  EXPECT_EQ(c->engine.clef.model.dtype, clef::compute_dtype::f32);
  ASSERT_EQ(c->engine.clef.media.sources.roots.size(), 1u);
  EXPECT_EQ(fs::weakly_canonical(c->engine.clef.media.sources.roots[0]), fs::weakly_canonical(tiny));
  EXPECT_FALSE(c->engine.clef.media.sources.urls);
  EXPECT_TRUE(fs::is_regular_file(c->registry)) << c->registry;
  EXPECT_TRUE(fs::is_regular_file(c->policy)) << c->policy;
  const auto engine = make_engine(c->engine);
  ASSERT_TRUE(engine) << engine.error().message;
  EXPECT_EQ((*engine)->describe().model_id, "clef-omni-tiny");
  EXPECT_EQ((*engine)->describe().limits.images.max_items, 4u);  // the tiny release has both towers
}

// `baton serve ARGS` as a child process; its standard output is read for the listening line,
// its standard error goes to `err_file` when one is given.
class serve_process {
 public:
  explicit serve_process(std::vector<std::string> args, const fs::path& err_file = {}) {
    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    if (!err_file.empty()) {
      posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    args.insert(args.begin(), {BATON_BINARY, "serve"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, BATON_BINARY, &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    out_ = out[0];
  }
  ~serve_process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }

  // The port of "baton: listening on http://HOST:PORT", 0 when no such line comes within 60 s.
  unsigned short port() {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      char c;
      if (read(out_, &c, 1) != 1) break;
      if (c != '\n') {
        line.push_back(c);
        continue;
      }
      std::smatch m;
      if (std::regex_match(line, m, std::regex(R"(baton: listening on http://127\.0\.0\.1:(\d+))"))) {
        return static_cast<unsigned short>(std::stoi(m[1]));
      }
      ADD_FAILURE() << "unexpected line: " << line;
      line.clear();
    }
    return 0;
  }

  // SIGTERM, then the exit status of the graceful stop (-1 when it took over 30 s).
  int stop() {
    kill(pid_, SIGTERM);
    return wait();
  }

  // The exit status once it has exited (-1 when it did not within 30 s, or was killed).
  int wait() {
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

TEST(clef_example, baton_serve_answers_a_decision_on_it) {
  serve_process server({"--config", example.string(), "--listen", "127.0.0.1:0"});
  const unsigned short port = server.port();
  ASSERT_NE(port, 0);
  test::http_client client(port);
  const auto models = client.get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.body_json()["models"][0]["name"], "clef-omni-tiny");
  // An image named by its path under the configured media root, answered as the reference does.
  const auto [request, want] = image_record();
  const auto res = client.post("/v1/systemone", render_json(request, false));
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(res.body_json()["model"], "clef-omni-tiny");
  EXPECT_EQ(res.body_json()["answers"], want["answers"]);
  EXPECT_EQ(res.body_json()["usage"]["cached_tokens"], 0);
  // The same state again with other questions: its prefix comes from the cache, and /metrics says so.
  json history = json::array();
  for (int i = 0; i < 12; ++i) history.push_back({{"turn", i}, {"text", "the parcel arrived damaged, order " + std::to_string(i)}});
  const json first{{"state", history}, {"questions", {{"refund", {{"type", "noul"}}}}}};
  const json second{{"state", history}, {"questions", {{"reply", {{"type", "noul"}, {"instructions", "Reply now?"}}}}}};
  const auto a = client.post("/v1/systemone", render_json(first, false));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.body_json()["usage"]["cached_tokens"], 0);
  const auto b = client.post("/v1/systemone", render_json(second, false));
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_GE(b.body_json()["usage"]["cached_tokens"].get<std::int64_t>(), 128) << b.body;
  const auto metrics = client.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("baton_prefix_cache_hits_total 1"), std::string::npos) << metrics.body;
  EXPECT_EQ(server.stop(), 0);
}

TEST(clef_example, baton_serve_model_id_overrides_the_config) {
  serve_process server({"--config", example.string(), "--listen", "127.0.0.1:0", "--model-id", "acme/clef-tiny"});
  const unsigned short port = server.port();
  ASSERT_NE(port, 0);
  test::http_client client(port);
  const auto models = client.get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.body_json()["models"][0]["name"], "acme/clef-tiny");
  const auto res = client.post("/v1/systemone",
                               R"({"state":"I was charged twice","questions":{"billing":{"type":"noul"}}})");
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(res.body_json()["model"], "acme/clef-tiny");
  EXPECT_EQ(server.stop(), 0);
}

using test_server::cli;

// A baton.yaml in `dir`: the clef engine on the tiny release (f32, one thread), media read under
// the vectors' folder, the repository's registry and policy, and a log in `dir` that keeps states.
fs::path media_config(const test::scratch_dir& dir) {
  const fs::path config = dir / "baton.yaml";
  std::ofstream(config) << "engine:\n"
                        << "  name: clef\n"
                        << "  model: " << (tiny / "release").string() << "\n"
                        << "  model_id: clef-omni-tiny\n"
                        << "  dtype: f32\n"
                        << "  threads: 1\n"
                        << "  max_length: 4096\n"
                        << "  media: {roots: [" << tiny.string() << "]}\n"
                        << "registry: " << (test::source_dir() / "config/tools.yaml").string() << "\n"
                        << "policy: " << (test::source_dir() / "config/policy.yaml").string() << "\n"
                        << "log: {path: " << (dir / "decisions.db").string() << ", store_state: true}\n";
  return config;
}

// An agent turn whose event carries an image and an audio clip, over the WebSocket to a real
// `baton serve --engine clef`, is decided exactly as `baton decide` decides the SystemOne request
// it stands for: the history with its placeholders as the state, the same media, the registry's
// questions.
TEST(clef_example, an_agent_turn_with_media_is_decided_as_its_systemone_request) {
  const test::scratch_dir dir("baton-clef-media-turn");
  const fs::path config = media_config(dir);
  const json event = {{"role", "user"},
                      {"content", "My parcel looks like this and makes this noise. Refund it?"},
                      {"images", json::array({"media/grad_64x96.png"})},
                      {"audio", json::array({"media/tone_16k_mono_2p5s.wav"})}};
  json frame_answers;
  {
    serve_process server({"--config", config.string(), "--listen", "127.0.0.1:0"});
    const unsigned short port = server.port();
    ASSERT_NE(port, 0);
    test::ws_client agent(port);
    const json d = agent.request({{"type", "decide"}, {"session", "parcel"}, {"history", json::array({event})}});
    ASSERT_EQ(d["type"], "decision") << d;
    EXPECT_EQ(d["model"], "clef-omni-tiny");
    EXPECT_EQ(d["usage"]["media_dropped"], 0);
    EXPECT_TRUE(d.value("error_code", "").empty()) << d;
    frame_answers = d["answers"];
    EXPECT_EQ(server.stop(), 0);
  }

  // The SystemOne request the turn stands for.
  auto c = load_server_config(config);
  ASSERT_TRUE(c) << c.error().message;
  auto engine = make_engine(c->engine);
  ASSERT_TRUE(engine) << engine.error().message;
  const request_limits& limits = (*engine)->describe().limits;
  auto registry = tools::load_registry(c->registry, limits);
  ASSERT_TRUE(registry) << registry.error().message;
  auto questions = tools::compile_questions(*registry, limits);
  ASSERT_TRUE(questions);
  std::string body_text;
  render_request(*questions, body_text);
  json body = test::parse(body_text);
  body["state"] = json::parse(R"([{"audio":["audio 1"],"content":"My parcel looks like this and makes this noise. Refund it?",)"
                              R"("images":["image 1"],"role":"user"}])");
  body["images"] = event["images"];
  body["audio"] = event["audio"];

  // `baton decide`: the frame's answers, rounded as both round them.
  const auto decided = cli({"decide", "--engine", "clef", "--model", (tiny / "release").string(), "--model-id",
                            "clef-omni-tiny", "--dtype", "f32", "--threads", "1", "--max-length", "4096", "--media-root",
                            tiny.string()},
                           render_json(body, false));
  ASSERT_EQ(decided.code, 0) << decided.err << decided.out;
  EXPECT_EQ(test::parse(decided.out)["answers"], frame_answers);

  // The log's unrounded answers: every probability as the engine gives it for that request.
  auto req = request_from_json(json(body), limits);
  ASSERT_TRUE(req) << req.error().message;
  auto results = (*engine)->decide(std::span<const request>(&*req, 1));
  ASSERT_TRUE(results.at(0)) << results[0].error().message;
  auto response = make_response(*req, *results[0], confidence_metric::p_max, "clef-omni-tiny");
  ASSERT_TRUE(response);
  std::string unrounded;
  render_answers(*response, unrounded, -1);
  auto log = log::log_reader::open(dir / "decisions.db");
  ASSERT_TRUE(log) << log.error().message;
  std::string logged, media;
  ASSERT_TRUE((*log)->sql("SELECT answers, media, state_hash FROM decisions", [](auto) {}, [&](std::span<const log::cell> row) {
    logged = std::string(std::get<std::string_view>(row[0]));
    media = std::string(std::get<std::string_view>(row[1]));
    EXPECT_EQ(std::string(std::get<std::string_view>(row[2])),
              state_hash(render_json(body["state"], true), &*req));  // the SystemOne row's hash of it
  }));
  EXPECT_EQ(logged, unrounded);
  // The same text without its media is another decision: the picture and the sound were read.
  request text_only = *req;
  text_only.images.clear();
  text_only.audio.clear();
  auto plain = (*engine)->decide(std::span<const request>(&text_only, 1));
  ASSERT_TRUE(plain.at(0));
  auto plain_response = make_response(text_only, *plain[0], confidence_metric::p_max, "clef-omni-tiny");
  ASSERT_TRUE(plain_response);
  std::string plain_answers;
  render_answers(*plain_response, plain_answers, -1);
  EXPECT_NE(plain_answers, unrounded);
  const json items = test::parse(media);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0], json::parse(R"({"field":"images","number":1,"event":0,"source":"path","path":"media/grad_64x96.png"})"));
  EXPECT_EQ(items[1]["field"], "audio");
}


// A media item the agent named that the engine cannot read (here a path under the media root that
// is not there) is the agent's to mend, as a SystemOne request gets its 4xx: an error frame naming
// the item, nothing logged, no on_engine_error lane, and the session as it was, so the turn sent
// again without it is decided.
TEST(clef_example, a_turn_naming_a_missing_media_file_is_an_error_to_the_agent_not_an_engine_failure) {
  const test::scratch_dir dir("baton-clef-media-missing");
  const fs::path config = media_config(dir);
  const json text = {{"role", "user"}, {"content", "Where is my parcel? Here is its label."}};
  json with_typo = text;
  with_typo["images"] = json::array({"media/no_such_label.png"});
  serve_process server({"--config", config.string(), "--listen", "127.0.0.1:0"});
  const unsigned short port = server.port();
  ASSERT_NE(port, 0);
  test::ws_client agent(port);
  const json refused =
      agent.request({{"type", "decide"}, {"id", 7}, {"session", "parcel"}, {"turn", 1}, {"history", json::array({with_typo})}});
  EXPECT_EQ(refused["type"], "error") << refused;
  EXPECT_EQ(refused["code"], "MEDIA_UNAVAILABLE") << refused;
  EXPECT_EQ(refused["ref"], 7);
  EXPECT_NE(refused.value("error", "").find("images[0]"), std::string::npos) << refused;
  // The same turn again, without the item: the session took nothing of the refused one.
  const json decided =
      agent.request({{"type", "decide"}, {"id", 8}, {"session", "parcel"}, {"turn", 1}, {"history", json::array({text})}});
  ASSERT_EQ(decided["type"], "decision") << decided;
  EXPECT_EQ(decided["turn"], 1);
  EXPECT_TRUE(decided.value("error_code", "").empty()) << decided;
  EXPECT_EQ(decided["lane"].get<std::string>().find("on_engine_error"), std::string::npos) << decided;
  EXPECT_EQ(server.stop(), 0);
  auto log = log::log_reader::open(dir / "decisions.db");
  ASSERT_TRUE(log) << log.error().message;
  std::vector<std::string> rows;
  // One decision, the second frame's, and no engine failure among the rows.
  ASSERT_TRUE((*log)->sql("SELECT count(*) || ' ' || sum(coalesce(error_code, '') != '') FROM decisions",
                          [](auto) {}, [&](std::span<const log::cell> row) {
                            rows.emplace_back(std::get<std::string_view>(row[0]));
                          }));
  EXPECT_EQ(rows, std::vector<std::string>{"1 0"});
}

TEST(clef_cli, decide_model_id_names_the_responses_model) {
  const std::string release = (tiny / "release").string();
  const std::string request = R"({"state":"hello","questions":{"q":{"type":"noul"}}})";
  const auto named =
      cli({"decide", "--engine", "clef", "--model", release, "--model-id", "acme/clef-tiny", "--threads", "1"}, request);
  ASSERT_EQ(named.code, 0) << named.err;
  EXPECT_EQ(test::parse(named.out)["model"], "acme/clef-tiny");
  const auto plain = cli({"decide", "--engine", "clef", "--model", release, "--threads", "1"}, request);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(test::parse(plain.out)["model"], "release");
  EXPECT_EQ(cli({"decide", "--engine", "clef", "--model", release, "--model-id", ""}, request).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--model-id", "acme/clef-tiny"}, request).code, exit_usage);
}

// The message names the model directory, whichever command loads it.
TEST(clef_cli, a_model_directory_that_is_not_there_is_named) {
  const std::string file = (tiny / "records.jsonl").string();
  const auto missing = cli({"decide", "--engine", "clef", "--model", "/nonexistent"}, "{}\n");
  EXPECT_EQ(missing.code, exit_engine_failed);
  EXPECT_NE(missing.err.find("model directory /nonexistent: does not exist"), std::string::npos) << missing.err;
  const auto not_dir = cli({"decide", "--engine", "clef", "--model", file}, "{}\n");
  EXPECT_EQ(not_dir.code, exit_engine_failed);
  EXPECT_NE(not_dir.err.find("model directory " + file + ": is not a directory"), std::string::npos) << not_dir.err;
  const auto encode = cli({"encode", "--model", "/nonexistent"}, "{}\n");
  EXPECT_EQ(encode.code, exit_engine_failed);
  EXPECT_NE(encode.err.find("model directory /nonexistent: does not exist"), std::string::npos) << encode.err;

  const test::scratch_dir dir("baton-clef-serve-test");
  std::ofstream(dir / "baton.yaml") << "engine: {name: clef, model: /nonexistent}\n"
                                    << "registry: " << (test::source_dir() / "config/tools.yaml").string() << "\n"
                                    << "policy: " << (test::source_dir() / "config/policy.yaml").string() << "\n"
                                    << "log: {path: " << (dir / "decisions.db").string() << "}\n";
  // A process of its own: `baton serve` installs its logger and signal mask for the process.
  serve_process serve({"--config", (dir / "baton.yaml").string(), "--listen", "127.0.0.1:0"}, dir / "stderr");
  EXPECT_EQ(serve.wait(), 78);
  const std::string err = test::read_file(dir / "stderr");
  EXPECT_NE(err.find("model directory /nonexistent: does not exist"), std::string::npos) << err;
}

}  // namespace
}  // namespace baton
