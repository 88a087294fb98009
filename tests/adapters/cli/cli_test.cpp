#include <gtest/gtest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "adapters/cli/cli.hpp"
#include "core/answers.hpp"
#include "engine/keyword/keyword_engine.hpp"
#include "support/env_var.hpp"
#include "support/cli_run.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace baton {
namespace {

using test::cli;
using test::cli_result;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);) out.push_back(l);
  return out;
}

const std::string good = R"({"state":"please reset my password","questions":{"tool":{"type":"choice","criteria":{"reset_password":"Send a reset link","refund":"Refund a charge"}}}})";
const std::string bad = R"({"questions":{"tool":{"type":"choice","criteria":{"a":null}}}})";

TEST(cli_decide, single_request_gives_one_response) {
  const auto r = cli({"decide"}, good);
  EXPECT_EQ(r.code, exit_ok) << r.err;
  const auto resp = response_from_json(test::parse(r.out));
  ASSERT_TRUE(resp) << r.out;
  EXPECT_EQ(resp->model, "baton-keyword-1");
  EXPECT_EQ(std::get<choice_answer>(resp->answers[0].second).choice, "reset_password");
  EXPECT_EQ(resp->usage.state_truncated, false);
}

TEST(cli_decide, pretty_printed_single_request_is_one_request) {
  const auto r = cli({"decide", "-"}, "{\n  \"state\": \"s\",\n  \"questions\": {\"q\": {\"type\": \"noul\"}}\n}\n");
  EXPECT_EQ(r.code, exit_ok);
  EXPECT_EQ(lines(r.out).size(), 1u);
  EXPECT_NE(r.out.find(R"("q":{"type":"noul","noul":0.5})"), std::string::npos) << r.out;
}

TEST(cli_decide, refused_single_request_exits_2_with_the_error_body) {
  const auto r = cli({"decide"}, bad);
  EXPECT_EQ(r.code, exit_refused);
  const json body = test::parse(r.out);
  EXPECT_EQ(body["code"], "INVALID_REQUEST");
  EXPECT_EQ(body["detail"][0]["loc"], json::array({"body", "state"}));

  const auto empty = cli({"decide"}, "\n\n");
  EXPECT_EQ(empty.code, exit_refused);
  EXPECT_EQ(test::parse(empty.out)["code"], "INVALID_JSON");
}

TEST(cli_decide, jsonl_answers_each_line_in_order) {
  const auto r = cli({"decide"}, good + "\n" + bad + "\n\n" + "not json\n" + good + "\r\n");
  EXPECT_EQ(r.code, exit_ok);
  const auto out = lines(r.out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(response_from_json(test::parse(out[0])));
  EXPECT_EQ(test::parse(out[1])["code"], "INVALID_REQUEST");
  EXPECT_EQ(test::parse(out[2])["code"], "INVALID_JSON");
  EXPECT_EQ(out[3], out[0]);
}

// A first line refused for its content (not for ending too soon) still starts a JSONL stream.
TEST(cli_decide, a_refused_first_line_does_not_swallow_the_rest) {
  const std::string overflow = R"({"state":"a","questions":{"q":{"type":"noul"}},"x":1e400})";
  const auto r = cli({"decide"}, overflow + "\n" + good + "\n" + good + "\n");
  EXPECT_EQ(r.code, exit_ok);
  const auto out = lines(r.out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(test::parse(out[0])["detail"][0]["type"], "finite_number");
  EXPECT_TRUE(response_from_json(test::parse(out[1])));
  EXPECT_TRUE(response_from_json(test::parse(out[2])));
}

class failing_engine final : public decision_engine {
 public:
  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override {
    return std::vector<result<decision>>(batch.size(), result<decision>(make_error(500, "INFERENCE_FAILED", "broken")));
  }

 private:
  engine_description description_{"broken", "none", request_limits{}, "", ""};
};

TEST(cli_decide, engine_failures_set_the_exit_status) {
  failing_engine engine;
  decide_options options;
  std::istringstream one(good);
  std::ostringstream out;
  EXPECT_EQ(run_decide(one, out, engine, options), exit_engine_failed);
  EXPECT_EQ(test::parse(out.str())["code"], "INFERENCE_FAILED");
  std::istringstream many(good + "\n" + good + "\n");
  std::ostringstream many_out;
  EXPECT_EQ(run_decide(many, many_out, engine, options), exit_engine_failed);
  EXPECT_EQ(lines(many_out.str()).size(), 2u);
}

TEST(cli_decide, jsonl_batches_keep_order_across_batch_boundaries) {
  keyword_engine engine;
  decide_options options;
  options.jsonl = true;
  options.batch_size = 3;
  std::string input;
  for (int i = 0; i < 20; ++i) input += (i % 4 == 1 ? bad : good) + "\n";
  std::istringstream in(input);
  std::ostringstream out;
  EXPECT_EQ(run_decide(in, out, engine, options), exit_ok);
  const auto got = lines(out.str());
  ASSERT_EQ(got.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(test::parse(got[i]).contains("error"), i % 4 == 1) << i;
}

TEST(cli_decide, confidence_metric_is_selectable) {
  const auto pmax = test::parse(cli({"decide", "--confidence", "p_max"}, good).out);
  const auto margin = test::parse(cli({"decide", "--confidence=margin"}, good).out);
  const double p = pmax["answers"]["tool"]["confidence"].get<double>();
  const double m = margin["answers"]["tool"]["confidence"].get<double>();
  EXPECT_NEAR(m, 2 * p - 1, 2e-4);  // K = 2: (2·p_max − 1)/(2 − 1)
  EXPECT_LT(m, p);
}

TEST(cli, help_documents_every_flag) {
  const auto main_help = cli({"--help"});
  EXPECT_EQ(main_help.code, exit_ok);
  EXPECT_NE(main_help.out.find("decide"), std::string::npos);
  const auto help = cli({"decide", "--help"});
  EXPECT_EQ(help.code, exit_ok);
  for (const char* flag : {"--engine", "--confidence", "p_max", "margin", "--jsonl", "FILE", "Exit status", "--model",
                           "--dtype", "--device", "--max-length", "--threads", "--prefix-cache", "--dump", "--media-root",
                           "clef"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  EXPECT_EQ(cli({"--version"}).out, std::string("baton ") + baton_version + "\n");
}

TEST(cli, usage_errors) {
  EXPECT_EQ(cli({}).code, exit_usage);
  EXPECT_EQ(cli({"frobnicate"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--wat"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--confidence", "entropy"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--engine"}).code, exit_usage);
  const auto unknown = cli({"decide", "--engine", "gpt"});
  EXPECT_EQ(unknown.code, exit_usage);
  EXPECT_NE(unknown.err.find("known engines: keyword"), std::string::npos);
  EXPECT_EQ(cli({"decide", "a.json", "b.json"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "/nonexistent/requests.json"}).code, exit_no_input);
  const test::scratch_dir dir("baton-decide-dir");
  const std::string dir_arg = dir.path().string();
  const auto directory = cli({"decide", dir_arg});
  EXPECT_EQ(directory.code, exit_no_input);
  EXPECT_EQ(directory.err, "baton decide: cannot read " + dir_arg + ": it is a directory\n");
}

// The keyword engine with a small body limit, to test limits without megabytes of input.
class small_body_engine final : public decision_engine {
 public:
  explicit small_body_engine(std::size_t max_body) : description_(inner_.describe()) {
    description_.limits.max_body_bytes = max_body;
  }
  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override { return inner_.decide(batch); }

 private:
  keyword_engine inner_;
  engine_description description_;
};

TEST(cli_decide, lines_over_the_limit_are_refused_on_their_line) {
  small_body_engine engine(400);
  decide_options options;
  const std::string huge = R"({"state":")" + std::string(100000, 'x') + R"(","questions":{"q":{"type":"noul"}}})";
  std::istringstream in(good + "\n" + huge + "\n" + good + "\n");
  std::ostringstream out;
  EXPECT_EQ(run_decide(in, out, engine, options), exit_ok);
  const auto got = lines(out.str());
  ASSERT_EQ(got.size(), 3u);
  const json refused = test::parse(got[1]);
  EXPECT_EQ(refused["code"], "REQUEST_TOO_LARGE");
  EXPECT_EQ(refused["error"], "request body is " + std::to_string(huge.size()) + " bytes; the limit is 400");
  EXPECT_EQ(got[2], got[0]);

  std::istringstream single("{\n\"state\": \"" + std::string(1000, 'y') + "\",\n\"questions\": {}\n}\n");
  std::ostringstream single_out;
  EXPECT_EQ(run_decide(single, single_out, engine, options), exit_refused);
  EXPECT_EQ(test::parse(single_out.str())["code"], "REQUEST_TOO_LARGE");
}

std::string read_line_within(int fd, int timeout_ms) {
  std::string line;
  char c;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return line + "<timeout>";
    if (read(fd, &c, 1) != 1) return line + "<eof>";
    if (c == '\n') return line;
    line.push_back(c);
  }
}

// A process that writes one request and waits gets its answer before it writes the next.
TEST(cli_binary, answers_each_jsonl_line_as_it_arrives) {
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    execl(BATON_BINARY, BATON_BINARY, "decide", "--jsonl", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  for (int i = 0; i < 3; ++i) {
    const std::string line = good + "\n";
    ASSERT_EQ(write(to_child[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
    const std::string answer = read_line_within(from_child[0], 10000);
    EXPECT_TRUE(response_from_json(test::parse(answer))) << answer;
  }
  close(to_child[1]);
  EXPECT_EQ(read_line_within(from_child[0], 10000), "<eof>");
  close(from_child[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// The real binary on the examples that scripts/run.sh serves.
TEST(cli_binary, answers_the_config_examples) {
  const std::string command = std::string(BATON_BINARY) + " decide " + (test::source_dir() / "config/examples/requests.jsonl").string();
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto got = lines(out);
  const auto requests = lines(test::read_file(test::source_dir() / "config/examples/requests.jsonl"));
  ASSERT_EQ(got.size(), requests.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    auto resp = response_from_json(test::parse(got[i]));
    ASSERT_TRUE(resp) << got[i];
    EXPECT_EQ(resp->answers.size(), test::parse(requests[i])["questions"].size());
  }
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

const std::filesystem::path tiny = test::data_dir() / "vectors/clef-omni-tiny";

// The tiny release's reference records with media, or the text ones, with their expected outcomes.
std::pair<std::string, std::vector<json>> reference_records(bool media) {
  const auto records = lines(test::read_file(tiny / "records.jsonl"));
  const auto expected = lines(test::read_file(tiny / "expected.jsonl"));
  std::string input;
  std::vector<json> want;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const json record = test::parse(records[i]);
    const json& r = record["request"];
    if ((r.contains("images") || r.contains("audio") || r.contains("videos")) != media) continue;
    input += records[i] + "\n";
    want.push_back(test::parse(expected[i]));
  }
  return {input, want};
}
std::pair<std::string, std::vector<json>> text_records() { return reference_records(false); }

void expect_same_encoding(const json& got, const json& want) {
  EXPECT_EQ(got["num_tokens"], want["num_tokens"]);
  EXPECT_EQ(got["input_ids"], want["input_ids"]);
  ASSERT_EQ(got["questions"].size(), want["questions"].size());
  for (std::size_t q = 0; q < got["questions"].size(); ++q) {
    for (const char* key : {"id", "type", "question_span", "option_ids", "option_spans"}) {
      EXPECT_EQ(got["questions"][q][key], want["questions"][q][key]) << key;
    }
  }
}

// --dump naming the input file would truncate it before it is read.
TEST(cli_clef, decide_refuses_to_dump_over_its_input) {
  const test::scratch_dir scratch("baton-dump-input");
  const auto input = scratch / "one.json";
  const std::string request = R"({"state":"s","questions":{"q":{"type":"noul","instructions":"i"}}})";
  std::ofstream(input, std::ios::binary) << request;
  const std::string input_arg = input.string(), model_arg = (tiny / "release").string();
  const auto r = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1", "--dump", input_arg, input_arg});
  EXPECT_EQ(r.code, exit_cant_create) << r.err;
  EXPECT_NE(r.err.find("--dump " + input_arg + " is the input"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_file(input), request);
}

// The executable's log lines (the clef engine's start-up lines among them) go to standard error:
// standard output is the command's JSON.
TEST(cli, log_lines_go_to_standard_error) {
  log_to_stderr();
  log_to_stderr();  // again: no "logger already exists"
  const auto sinks = spdlog::default_logger()->sinks();
  ASSERT_EQ(sinks.size(), 1u);
  EXPECT_NE(std::dynamic_pointer_cast<spdlog::sinks::stderr_color_sink_mt>(sinks[0]), nullptr);
}

TEST(cli_clef, decide_dump_matches_the_reference_trace) {
  const auto [input, want] = text_records();
  const test::scratch_dir scratch("baton-dump");
  const auto dump = scratch / "dump.jsonl";
  const std::string dump_arg = dump.string(), model_arg = (tiny / "release").string();
  const auto r = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1", "--jsonl", "--dump",
                      dump_arg},
                     input);
  EXPECT_EQ(r.code, exit_ok) << r.err;
  const auto answers = lines(r.out);
  const auto traces = lines(test::read_file(dump));
  ASSERT_EQ(answers.size(), want.size());
  ASSERT_EQ(traces.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i]["id"].get<std::string>());
    const json got = test::parse(traces[i]);
    EXPECT_EQ(got["id"], want[i]["id"]);
    EXPECT_EQ(got["ok"], want[i]["ok"]);
    if (!want[i]["ok"].get<bool>()) {
      EXPECT_TRUE(test::parse(answers[i]).contains("error"));
      if (want[i]["error"].get<std::string>().starts_with("schema requires")) {
        EXPECT_EQ(got["error"], want[i]["error"]);
      }
      continue;
    }
    expect_same_encoding(got, want[i]);
    for (std::size_t q = 0; q < got["questions"].size(); ++q) {
      const json& a = got["questions"][q]["logits"];
      const json& b = want[i]["questions"][q]["logits"];
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k].get<double>(), b[k].get<double>(), 1e-4);
    }
    EXPECT_EQ(got["response"]["answers"], want[i]["response"]["answers"]);
    EXPECT_EQ(test::parse(answers[i])["answers"], want[i]["response"]["answers"]);
  }
}

// A media id in config.json that is another token would fail every media request as the caller's
// fault (one past the vocabulary, as an engine failure): the load refuses it.
TEST(cli_clef, a_media_token_id_the_tokenizer_disagrees_with_is_refused_at_load) {
  const test::scratch_dir scratch("baton-media-id");
  const auto release = scratch / "release";
  std::filesystem::copy(tiny / "release", release);
  for (const char* wrong : {"332", "1000"}) {
    std::string config = test::read_file(tiny / "release" / "config.json");
    config.replace(config.find("\"image_token_id\": 343"), std::strlen("\"image_token_id\": 343"),
                   std::string("\"image_token_id\": ") + wrong);
    std::ofstream(release / "config.json", std::ios::trunc) << config;
    const std::string model_arg = release.string();
    const auto r = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1"},
                       R"({"state":"hi","questions":{"q":{"type":"noul"}}})");
    EXPECT_EQ(r.code, exit_engine_failed) << wrong;
    EXPECT_NE(r.err.find(std::string("image_token_id is ") + wrong + " but the tokenizer reads <|image_pad|> as 343"),
              std::string::npos)
        << r.err;
  }
}

// Blank lines are skipped; a request with no id is named in the dump by its line in the input.
TEST(cli_clef, decide_dump_names_a_request_without_id_by_its_line) {
  const test::scratch_dir scratch("baton-dump-lines");
  const auto dump = scratch / "dump.jsonl";
  const std::string dump_arg = dump.string(), model_arg = (tiny / "release").string();
  const std::string request = R"({"state":"hi","questions":{"q":{"type":"noul","question":"Is it?"}}})";
  const auto r = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1", "--jsonl", "--dump",
                      dump_arg},
                     "\n" + request + "\n\r\n\n" + request + "\n");
  EXPECT_EQ(r.code, exit_ok) << r.err;
  EXPECT_EQ(lines(r.out).size(), 2u) << r.out;
  const auto traces = lines(test::read_file(dump));
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_EQ(test::parse(traces[0])["id"], 2);
  EXPECT_EQ(test::parse(traces[1])["id"], 5);
}

// The media records name files under the vectors' folder: --media-root lets them be read from
// there and nowhere else; --dump shows where each item's placeholders sit.
TEST(cli_clef, decide_reads_media_under_the_media_root_only) {
  const auto [input, want] = reference_records(true);
  ASSERT_EQ(want.size(), 3u);
  const test::scratch_dir scratch("baton-media-dump");
  const auto dump = scratch / "dump.jsonl";
  const std::string dump_arg = dump.string(), model_arg = (tiny / "release").string(), root = tiny.string();
  const auto r = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1", "--jsonl", "--media-root",
                      root, "--dump", dump_arg},
                     input);
  EXPECT_EQ(r.code, exit_ok) << r.err;
  const auto answers = lines(r.out);
  const auto traces = lines(test::read_file(dump));
  ASSERT_EQ(answers.size(), 3u);
  ASSERT_EQ(traces.size(), 3u);
  const std::vector<std::string> kinds = {"image", "audio", "video+audio"};
  const std::vector<std::int64_t> pads = {6, 33, 264 + 27};
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i]["id"].get<std::string>());
    EXPECT_EQ(test::parse(answers[i])["answers"], want[i]["response"]["answers"]);
    const json got = test::parse(traces[i]);
    expect_same_encoding(got, want[i]);
    ASSERT_TRUE(got.contains("media"));
    EXPECT_EQ(got["media"]["use_audio_in_video"], want[i]["media"]["use_audio_in_video"]);
    ASSERT_EQ(got["media"]["placeholders"].size(), 1u);
    const json& p = got["media"]["placeholders"][0];
    EXPECT_EQ(p["kind"], kinds[i]);
    EXPECT_EQ(p["pads"], pads[i]);
    // The block runs from its start token to its end token, the pads in between.
    const auto begin = p["span"][0].get<std::size_t>(), end = p["span"][1].get<std::size_t>();
    const json& ids = got["input_ids"];
    const std::size_t markers = kinds[i] == "video+audio" ? 4 : 2;
    EXPECT_EQ(end - begin, static_cast<std::size_t>(pads[i]) + markers);
    EXPECT_NE(ids[begin], ids[begin + markers / 2]);  // a start token, then a pad
    EXPECT_NE(ids[end - 1], ids[end - markers / 2 - 1]);  // the last pad, then an end token
    if (kinds[i] != "video+audio") {
      EXPECT_EQ(ids[begin + markers / 2], ids[end - markers / 2 - 1]);
    }
  }

  // Without a root the same paths are refused, naming the item; the other lines still run.
  const auto refused = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1", "--jsonl"}, input);
  EXPECT_EQ(refused.code, exit_ok);
  for (const auto& line : lines(refused.out)) {
    const json e = test::parse(line);
    EXPECT_EQ(e["code"], "MEDIA_SOURCE_REFUSED") << line;
  }
  EXPECT_NE(refused.out.find("images[0]: "), std::string::npos);
  // A root elsewhere: the files are not under it.
  const std::string elsewhere = (tiny / "release").string();
  const auto outside = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1", "--media-root",
                            elsewhere},
                           lines(input)[0] + "\n");
  EXPECT_EQ(outside.code, exit_refused);
  EXPECT_NE(outside.out.find("images[0]: "), std::string::npos) << outside.out;
  EXPECT_EQ(cli({"decide", "--engine", "clef", "--model", model_arg, "--media-root", "/nonexistent"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--media-root", root}).code, exit_usage);  // clef only
}

TEST(cli_clef, encode_needs_no_weights_and_matches_the_reference_ids) {
  const auto [input, want] = text_records();
  // A directory holding only the tokenizer: encode must not look for weights.
  const test::scratch_dir dir("baton-tok");
  std::filesystem::copy_file(tiny / "release/tokenizer.json", dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string dir_arg = dir.path().string();
  const auto r = cli({"encode", "--model", dir_arg}, input);
  EXPECT_EQ(r.code, exit_ok) << r.err;
  const auto got = lines(r.out);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const json line = test::parse(got[i]);
    EXPECT_EQ(line["id"], want[i]["id"]);
    if (want[i]["ok"].get<bool>()) {
      EXPECT_FALSE(line.contains("response"));
      EXPECT_FALSE(line["questions"][0].contains("logits"));
      expect_same_encoding(line, want[i]);
    } else {
      EXPECT_EQ(line["ok"], false);
    }
  }
  EXPECT_EQ(cli({"encode"}).code, exit_usage);
  EXPECT_EQ(cli({"encode", "--model", "/nonexistent"}).code, exit_engine_failed);
}

TEST(cli_clef, tokenize_writes_one_id_array_per_line) {
  const std::string model_arg = (tiny / "release").string();
  const json invoice = test::parse(lines(test::read_file(tiny / "expected.jsonl"))[0]);
  // The prompt prefix holds newlines: as a JSON string it is one line.
  const std::string prefix = "<|im_start|>system\nRead the complete state";
  const auto r = cli({"tokenize", "--tokenizer", model_arg, "--jsonl"}, json(prefix).dump() + "\n\"\"\n42\n");
  EXPECT_EQ(r.code, exit_refused);
  const auto got = lines(r.out);
  ASSERT_EQ(got.size(), 3u);
  const json ids = test::parse(got[0]);
  ASSERT_GT(ids.size(), 5u);
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], invoice["input_ids"][i]) << i;
  EXPECT_EQ(got[1], "[]");
  EXPECT_EQ(test::parse(got[2])["code"], "INVALID_TEXT");

  const auto plain = cli({"tokenize", "--tokenizer", model_arg}, "STATE:\n\xff\xfe\n");
  EXPECT_EQ(plain.code, exit_refused);
  const auto plain_lines = lines(plain.out);
  ASSERT_EQ(plain_lines.size(), 2u);
  EXPECT_EQ(plain_lines[0].front(), '[');
  EXPECT_EQ(test::parse(plain_lines[1])["code"], "INVALID_TEXT");
  EXPECT_EQ(cli({"tokenize"}).code, exit_usage);
  EXPECT_EQ(cli({"tokenize", "--tokenizer", "/nonexistent"}).code, exit_engine_failed);
}

// The prefix cache changes what is computed again, not the answers: records that share a prefix
// (the second and third start as the first) are answered as without it, within the rounding of
// kernels run on other shapes.
TEST(cli_clef, decide_answers_the_same_with_the_prefix_cache_on_or_off) {
  const std::string model_arg = (tiny / "release").string();
  json longer = test::parse(good);
  longer["state"] = "please reset my password, I cannot log in since this morning";
  const std::string input = good + "\n" + good + "\n" + render_json(longer, false) + "\n";
  auto run = [&](const char* cache) {
    const auto r = cli({"decide", "--engine", "clef", "--model", model_arg, "--threads", "1", "--jsonl", "--prefix-cache", cache}, input);
    EXPECT_EQ(r.code, exit_ok) << r.err;
    std::vector<json> out;
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) out.push_back(test::parse(l));
    return out;
  };
  const auto with = run("on"), without = run("off");
  ASSERT_EQ(with.size(), 3u);
  ASSERT_EQ(without.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("record " + std::to_string(i));
    EXPECT_EQ(without[i]["usage"]["cached_tokens"], 0);
    EXPECT_EQ(with[i]["usage"]["input_tokens"], without[i]["usage"]["input_tokens"]);
    const json& a = with[i]["answers"]["tool"];
    const json& b = without[i]["answers"]["tool"];
    EXPECT_EQ(a["choice"], b["choice"]);
    for (const auto& [option, p] : b["probabilities"].items()) {
      EXPECT_NEAR(a["probabilities"][option].get<double>(), p.get<double>(), 1e-3) << option;
    }
  }
}

TEST(cli_clef, usage_errors) {
  EXPECT_EQ(cli({"decide", "--engine", "clef"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--engine", "clef", "--model", "x", "--dtype", "f16"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--engine", "clef", "--model", "x", "--max-length", "0"}).code, exit_usage);
  EXPECT_EQ(cli({"decide", "--dump", "x.jsonl"}).code, exit_usage);
  const auto cache_value = cli({"decide", "--engine", "clef", "--model", "x", "--prefix-cache", "yes"});
  EXPECT_EQ(cache_value.code, exit_usage);
  EXPECT_NE(cache_value.err.find("--prefix-cache takes on or off"), std::string::npos) << cache_value.err;
  const auto cache_keyword = cli({"decide", "--prefix-cache", "off"});
  EXPECT_EQ(cache_keyword.code, exit_usage);
  EXPECT_NE(cache_keyword.err.find("--prefix-cache"), std::string::npos) << cache_keyword.err;
  const auto missing = cli({"decide", "--engine", "clef", "--model", "/nonexistent"}, "{}\n");
  EXPECT_EQ(missing.code, exit_engine_failed);
  EXPECT_NE(missing.err.find("/nonexistent"), std::string::npos);
  const std::string model_arg = (tiny / "release").string();
  EXPECT_EQ(cli({"decide", "--engine", "clef", "--model", model_arg, "--device", "tpu"}).code, exit_engine_failed);
}

// `baton quantize --int8 SRC DST` on the tiny release: DST is an int8 release `baton decide`
// loads; each refusal has its exit status and names what is wrong.
TEST(cli_quantize, writes_an_int8_release_that_decide_loads) {
  const test::scratch_dir dir("baton-quantize");
  const std::string src = (tiny / "release").string(), dst = (dir / "int8").string();
  const auto r = cli({"quantize", "--int8", src, dst});
  EXPECT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.out.find(dst + ": int8 release written"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("100 %"), std::string::npos) << r.err;
  const auto decided = cli({"decide", "--engine", "clef", "--model", dst, "--threads", "1"}, good);
  EXPECT_EQ(decided.code, exit_ok) << decided.err;
  EXPECT_TRUE(response_from_json(test::parse(decided.out))) << decided.out;

  const auto again = cli({"quantize", "--int8", src, dst});
  EXPECT_EQ(again.code, exit_cant_create);
  EXPECT_NE(again.err.find("exists and is not an empty directory"), std::string::npos) << again.err;
  const auto twice = cli({"quantize", "--int8", dst, (dir / "twice").string()});
  EXPECT_EQ(twice.code, exit_no_input);
  EXPECT_NE(twice.err.find("already int8"), std::string::npos) << twice.err;
  const auto missing = cli({"quantize", "--int8", "/nonexistent", (dir / "x").string()});
  EXPECT_EQ(missing.code, exit_no_input);
  EXPECT_NE(missing.err.find("model directory /nonexistent: does not exist"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x"));

  // A destination inside the source would be copied into itself.
  std::filesystem::copy(tiny / "release", dir / "fp32");
  const auto inside = cli({"quantize", "--int8", (dir / "fp32").string(), (dir / "fp32" / "int8").string()});
  EXPECT_EQ(inside.code, exit_cant_create);
  EXPECT_NE(inside.err.find("is inside the source release"), std::string::npos) << inside.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "fp32" / "int8.partial"));

  // The copy takes SRC's tokenizer as it is: one `decide` would refuse is refused before anything
  // is written (it was copied, and quantize said "written").
  std::filesystem::copy(tiny / "release", dir / "badtok");
  std::ofstream(dir / "badtok" / "tokenizer.json", std::ios::trunc) << "not json";
  const auto badtok = cli({"quantize", "--int8", (dir / "badtok").string(), (dir / "badtok-int8").string()});
  EXPECT_EQ(badtok.code, exit_no_input) << badtok.err;
  EXPECT_NE(badtok.err.find("tokenizer.json"), std::string::npos) << badtok.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "badtok-int8"));
  std::filesystem::copy(tiny / "release", dir / "badid");
  {
    std::string config = test::read_file(dir / "badid" / "config.json");
    const auto at = config.find("\"im_start_token_id\": 332");
    ASSERT_NE(at, std::string::npos);
    config.replace(at, std::strlen("\"im_start_token_id\": 332"), "\"im_start_token_id\": 5");
    std::ofstream(dir / "badid" / "config.json", std::ios::trunc) << config;
  }
  const auto badid = cli({"quantize", "--int8", (dir / "badid").string(), (dir / "badid-int8").string()});
  EXPECT_EQ(badid.code, exit_no_input) << badid.err;
  EXPECT_NE(badid.err.find("im_start_token_id is 5 but the tokenizer reads <|im_start|> as 332"), std::string::npos)
      << badid.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "badid-int8"));

  // A NaN in a source weight is the source's fault: 66, as for any release that cannot be read.
  std::filesystem::copy(tiny / "release", dir / "nan");
  {
    const auto shard = dir / "nan" / "model-00002-of-00003.safetensors";
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    std::uint64_t header_bytes = 0;
    f.read(reinterpret_cast<char*>(&header_bytes), 8);
    std::string header(header_bytes, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_bytes));
    const auto begin = test::parse(header)["thinker.model.layers.0.mlp.experts.0.gate_proj.weight"]["data_offsets"][0];
    const float nan = std::numeric_limits<float>::quiet_NaN();
    f.seekp(static_cast<std::streamoff>(8 + header_bytes + begin.get<std::uint64_t>()));
    f.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  }
  const auto nan = cli({"quantize", "--int8", (dir / "nan").string(), (dir / "nan-int8").string()});
  EXPECT_EQ(nan.code, exit_no_input) << nan.err;
  EXPECT_NE(nan.err.find("experts.0.gate_proj.weight: non-finite weights in row 0"), std::string::npos) << nan.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "nan-int8"));
  EXPECT_FALSE(std::filesystem::exists(dir / "nan-int8.partial"));

  // SRC by repository name, from the Hugging Face cache as every --model takes it.
  const auto cache = dir / "hub";
  const std::string commit(40, 'e');
  std::filesystem::create_directories(cache / "models--Cloudflare--clef-omni" / "snapshots");
  std::filesystem::create_directories(cache / "models--Cloudflare--clef-omni" / "refs");
  std::filesystem::create_directory_symlink(std::filesystem::absolute(tiny / "release"),
                                            cache / "models--Cloudflare--clef-omni" / "snapshots" / commit);
  std::ofstream(cache / "models--Cloudflare--clef-omni" / "refs" / "main") << commit;
  const test::env_var hub_cache("HF_HUB_CACHE", cache.c_str());
  const auto named = cli({"quantize", "--int8", "Cloudflare/clef-omni", (dir / "named").string()});
  const auto unknown = cli({"quantize", "--int8", "Cloudflare/other", (dir / "other").string()});
  EXPECT_EQ(named.code, exit_ok) << named.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "named" / "config.json"));
  EXPECT_EQ(unknown.code, exit_no_input);
  EXPECT_NE(unknown.err.find("baton pull Cloudflare/other"), std::string::npos) << unknown.err;
}

TEST(cli_quantize, usage_errors) {
  EXPECT_EQ(cli({"quantize", "a", "b"}).code, exit_usage);  // --int8 or --int4 is required
  EXPECT_EQ(cli({"quantize", "--int8", "a"}).code, exit_usage);
  EXPECT_EQ(cli({"quantize", "--int8", "a", "b", "c"}).code, exit_usage);
  EXPECT_EQ(cli({"quantize", "--int8", "--int4", "a", "b"}).code, exit_usage);  // one scheme
  EXPECT_EQ(cli({"quantize", "--int8", "--group-size", "64", "a", "b"}).code, exit_usage);  // int4's
  const auto group = cli({"quantize", "--int4", "--group-size", "48", "a", "b"});
  EXPECT_EQ(group.code, exit_usage);
  EXPECT_NE(group.err.find("--group-size must be 32, 64 or 128 (not 48)"), std::string::npos) << group.err;
  EXPECT_EQ(cli({"quantize", "--int4", "a", "b", "--group-size"}).code, exit_usage);
  // A valid command line on a source that is not a release: the loader's refusal, not a usage error.
  EXPECT_EQ(cli({"quantize", "--int4", "--group-size", "32", "/nonexistent-release", "b"}).code, exit_no_input);
  const auto help = cli({"quantize", "--help"});
  EXPECT_EQ(help.code, exit_ok);
  EXPECT_NE(help.out.find("Usage: baton quantize (--int8 | --int4 [--group-size N]) SRC DST"), std::string::npos);
  EXPECT_NE(cli({"--help"}).out.find("quantize"), std::string::npos);
}

}  // namespace
}  // namespace baton
