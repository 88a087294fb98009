// `baton pull` and `baton models` against a hub of the test's own on 127.0.0.1: the tiny release
// in the hub's URL layout (API listing with LFS sha256s, resolve/REV/FILE with ETag and
// X-Repo-Commit, LFS files redirected to a "CDN" on another port, Range), with a token it may
// require, a body it may cut and a file it may corrupt.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapters/cli/cli.hpp"
#include "adapters/cli/hub_cli.hpp"
#include "adapters/hub/hub_client.hpp"
#include "adapters/runtime/server_config.hpp"
#include "core/error_codes.hpp"
#include "core/sha256.hpp"
#include "engine/clef/clef_engine.hpp"
#include "support/env_var.hpp"
#include "support/cli_run.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace baton {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const std::string repo = "Cloudflare/clef-omni";
const std::string commit = "c0ffee0123456789abcdef0123456789abcdef01";
const std::string talker_shard = "model-00004-of-00004.safetensors";

using test::cli;
using test::cli_result;

using test::read_file;

std::string hex_sha256(const std::string& bytes) { return sha256_hex(bytes).substr(7); }

// The release the hub serves: the tiny test release copied, plus a shard holding only talker
// tensors (named in the index), a README the engine does not read.
fs::path make_release(const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(test::data_dir() / "vectors/clef-omni-tiny/release")) {
    fs::copy_file(e.path(), dir / e.path().filename());
  }
  nlohmann::json index = nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
  index["weight_map"]["talker.model.norm.weight"] = talker_shard;
  index["weight_map"]["talker.codec_head.weight"] = talker_shard;
  std::ofstream(dir / "model.safetensors.index.json", std::ios::binary) << index.dump(2);
  std::ofstream(dir / talker_shard, std::ios::binary) << std::string(300000, 't');
  std::ofstream(dir / "README.md", std::ios::binary) << "# clef-omni tiny\n";
  return dir;
}

struct hub_file {
  std::string content;
  bool lfs = false;
  std::string etag;  // sha256 for LFS files, a 40-hex blob id for the others
};

struct seen_request {
  std::string target;
  std::string range;
  std::string authorization;
  unsigned port;
};

// Serves `release` as the repository `repo_name`, each connection on a thread of its own (as a hub
// serves many clients: two pulls at once download side by side).
class fake_hub {
 public:
  explicit fake_hub(const fs::path& release, std::string repo_name = repo) : repo_(std::move(repo_name)) {
    for (const auto& e : fs::directory_iterator(release)) {
      hub_file f;
      f.content = read_file(e.path());
      f.lfs = e.path().extension() == ".safetensors";
      f.etag = f.lfs ? hex_sha256(f.content) : hex_sha256("blob " + f.content).substr(0, 40);
      files_[e.path().filename().string()] = std::move(f);
    }
    for (auto* a : {&hub_, &cdn_}) {
      a->open(tcp::v4());
      a->bind({net::ip::make_address("127.0.0.1"), 0});
      a->listen();
    }
    threads_.emplace_back([this] { serve(hub_); });
    threads_.emplace_back([this] { serve(cdn_); });
  }

  ~fake_hub() {
    stopping_ = true;
    for (auto* a : {&hub_, &cdn_}) {  // one connection each wakes the blocked accept
      tcp::socket s(io_);
      boost::system::error_code ec;
      s.connect(a->local_endpoint(), ec);
    }
    for (auto& t : threads_) t.join();
    for (auto& t : connections_) t.join();  // the acceptors are done: nothing adds to it
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_.local_endpoint().port()); }
  unsigned cdn_port() const { return cdn_.local_endpoint().port(); }

  std::vector<seen_request> seen() {
    std::lock_guard lock(m_);
    return seen_;
  }

  std::string token;                        // required when set
  std::map<std::string, std::size_t> cut;   // file → bytes sent before the connection drops (once)
  std::map<std::string, std::size_t> sigint;  // file → bytes sent before a SIGINT, as Ctrl-C would (once)
  std::set<std::string> corrupt;            // files whose bytes are served wrong
  bool gated = false;                       // files answer 403 GatedRepo (terms not accepted)
  std::set<std::string> moved;              // files whose ETag is not the listing's (the revision moved)
  std::map<std::string, long> listed_off;   // file → bytes its listed size is off by (non-LFS files)
  std::atomic<int> slow_ms{0};              // a pause after each 64 kB of a file's body

 private:
  void serve(tcp::acceptor& acceptor) {
    while (true) {
      tcp::socket s(io_);
      boost::system::error_code ec;
      acceptor.accept(s, ec);
      if (stopping_) return;
      if (ec) continue;
      const unsigned port = acceptor.local_endpoint().port();
      std::lock_guard lock(m_);
      connections_.emplace_back([this, port, s = std::move(s)]() mutable { handle(s, port); });
    }
  }

  void handle(tcp::socket& s, unsigned port) {
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    boost::system::error_code ec;
    http::read(s, buffer, req, ec);
    if (ec) return;
    const std::string target(req.target());
    {
      std::lock_guard lock(m_);
      seen_.push_back({target, std::string(req[http::field::range]), std::string(req[http::field::authorization]), port});
    }
    http::response<http::string_body> res(http::status::ok, 11);
    res.keep_alive(false);
    res.set("X-Repo-Commit", commit);
    const auto send = [&] {
      res.prepare_payload();
      http::write(s, res, ec);
    };
    const auto status = [&](http::status st, const std::string& error_code) {
      res.result(st);
      if (!error_code.empty()) res.set("X-Error-Code", error_code);
      res.body() = R"({"error":")" + error_code + R"("})";
      send();
    };
    const bool on_hub = port != cdn_port();
    if (on_hub && !token.empty() && req[http::field::authorization] != "Bearer " + token) {
      return status(http::status::unauthorized, "");
    }
    const std::string api = "/api/models/" + repo_ + "/revision/";
    const std::string resolve = "/" + repo_ + "/resolve/";
    if (on_hub && gated && target.starts_with(resolve)) return status(http::status::forbidden, "GatedRepo");
    if (on_hub && target.starts_with("/api/models/")) {
      if (!target.starts_with(api)) return status(http::status::not_found, "RepoNotFound");
      const std::string rev = target.substr(api.size(), target.find('?') - api.size());
      if (rev != "main" && rev != commit) return status(http::status::not_found, "RevisionNotFound");
      nlohmann::json siblings = nlohmann::json::array();
      for (const auto& [name, f] : files_) {
        // An LFS file's blobId is its pointer's: the blob is named by the sha256.
        const long off = listed_off.contains(name) ? listed_off.at(name) : 0;
        nlohmann::json entry = {{"rfilename", name},
                                {"size", static_cast<long>(f.content.size()) + off},
                                {"blobId", hex_sha256(name).substr(0, 40)}};
        if (f.lfs) entry["lfs"] = {{"sha256", f.etag}, {"size", f.content.size()}, {"pointerSize", 134}};
        else entry["blobId"] = f.etag;
        siblings.push_back(std::move(entry));
      }
      res.set(http::field::content_type, "application/json");
      res.body() = nlohmann::json{{"id", repo_}, {"sha", commit}, {"siblings", siblings}}.dump();
      return send();
    }
    if (on_hub && target.starts_with(resolve)) {
      const std::string rest = target.substr(resolve.size());
      const std::string rev = rest.substr(0, rest.find('/'));
      const auto f = files_.find(rest.substr(rev.size() + 1));
      if (rev != commit && rev != "main") return status(http::status::not_found, "RevisionNotFound");
      if (f == files_.end()) return status(http::status::not_found, "EntryNotFound");
      const std::string etag = moved.contains(f->first) ? std::string(64, '0') : f->second.etag;
      if (f->second.lfs) {
        // As the hub does: LFS files are on the CDN, another host (here another port).
        res.result(http::status::found);
        res.set(http::field::location, "http://127.0.0.1:" + std::to_string(cdn_port()) + "/cdn/" + f->second.etag);
        res.set("X-Linked-Etag", "\"" + etag + "\"");
        res.set("X-Linked-Size", std::to_string(f->second.content.size()));
        res.set(http::field::etag, "\"pointer-etag\"");
        return send();
      }
      res.set(http::field::etag, "\"" + etag + "\"");
      return send_content(s, res, req, f->first);
    }
    if (!on_hub && target.starts_with("/cdn/")) {
      for (const auto& [name, f] : files_) {
        if (f.lfs && target == "/cdn/" + f.etag) return send_content(s, res, req, name);
      }
    }
    status(http::status::not_found, "EntryNotFound");
  }

  void send_content(tcp::socket& s, http::response<http::string_body>& res, const http::request<http::string_body>& req,
                    const std::string& name) {
    std::string body = files_.at(name).content;
    if (corrupt.contains(name)) body[body.size() / 2] ^= 1;
    std::size_t from = 0;
    const std::string range(req[http::field::range]);
    if (range.starts_with("bytes=") && range.ends_with("-")) {
      from = std::stoull(range.substr(6));
      res.result(http::status::partial_content);
      res.set(http::field::content_range, "bytes " + std::to_string(from) + "-" + std::to_string(body.size() - 1) + "/" +
                                              std::to_string(body.size()));
    }
    res.set(http::field::accept_ranges, "bytes");
    res.body() = body.substr(from);
    res.prepare_payload();
    boost::system::error_code ec;
    if (const auto c = cut.find(name); c != cut.end()) {
      // The whole length announced, part of it sent, then the connection drops.
      http::response<http::empty_body> head(res.result(), 11);
      for (const auto& field : res.base()) head.set(field.name_string(), field.value());
      http::response_serializer<http::empty_body> sr(head);
      http::write_header(s, sr, ec);
      net::write(s, net::buffer(res.body().data(), c->second), ec);
      cut.erase(c);
      s.shutdown(tcp::socket::shutdown_both, ec);
      return;
    }
    if (const auto c = sigint.find(name); c != sigint.end()) {
      // The pull is inside its transfer, so its signal_set takes the signal; the connection
      // stays open until the client gives up on it.
      http::response<http::empty_body> head(res.result(), 11);
      for (const auto& field : res.base()) head.set(field.name_string(), field.value());
      http::response_serializer<http::empty_body> sr(head);
      http::write_header(s, sr, ec);
      net::write(s, net::buffer(res.body().data(), c->second), ec);
      sigint.erase(c);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the bytes are read first
      ::raise(SIGINT);
      char byte;
      s.read_some(net::buffer(&byte, 1), ec);
      return;
    }
    if (const int pause = slow_ms; pause > 0) {
      http::response<http::empty_body> head(res.result(), 11);
      for (const auto& field : res.base()) head.set(field.name_string(), field.value());
      http::response_serializer<http::empty_body> sr(head);
      http::write_header(s, sr, ec);
      for (std::size_t at = 0; at < res.body().size() && !ec; at += 65536) {
        std::this_thread::sleep_for(std::chrono::milliseconds(pause));
        net::write(s, net::buffer(res.body().data() + at, std::min<std::size_t>(65536, res.body().size() - at)), ec);
      }
      return;
    }
    http::write(s, res, ec);
  }

  std::string repo_;
  net::io_context io_;
  tcp::acceptor hub_{io_}, cdn_{io_};
  std::map<std::string, hub_file> files_;
  std::mutex m_;
  std::vector<seen_request> seen_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
  std::vector<std::thread> connections_;  // under m_
};

class pull : public ::testing::Test {
 protected:
  const test::scratch_dir dir_{"baton-pull"};
  fs::path release_;
  fs::path cache_;
  std::optional<fake_hub> hub_;
  std::string endpoint_, cache_arg_;
  // No token from the machine running the tests: neither HF_TOKEN nor a huggingface-cli login.
  test::env_var hf_token_{"HF_TOKEN", nullptr};
  test::env_var legacy_token_{"HUGGING_FACE_HUB_TOKEN", nullptr};
  test::env_var token_file_{"HF_TOKEN_PATH", (dir_ / "no-token").c_str()};
  test::env_var implicit_{"HF_HUB_DISABLE_IMPLICIT_TOKEN", nullptr};

  void SetUp() override {
    release_ = make_release(dir_ / "release");
    cache_ = dir_ / "cache";
    hub_.emplace(release_);
    endpoint_ = hub_->endpoint();
    cache_arg_ = cache_.string();
  }
  void TearDown() override { hub_.reset(); }

  cli_result run_pull(std::vector<std::string_view> extra = {}) {
    std::vector<std::string_view> args = {"pull", "--endpoint", endpoint_, "--dir", cache_arg_,
                                          "--token-env", "BATON_TEST_HUB_TOKEN"};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  }

  fs::path repo_dir() const { return cache_ / "models--Cloudflare--clef-omni"; }
  fs::path snapshot() const { return repo_dir() / "snapshots" / commit; }

  std::vector<fs::path> parts() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(repo_dir() / "blobs", ec)) {
      if (e.path().extension() == ".part") out.push_back(e.path());
    }
    return out;
  }
};

const std::vector<std::string> engine_files = {
    "config.json",           "joint_head.safetensors",          "joint_head_config.json",
    "merges.txt",            "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
    "model-00003-of-00003.safetensors", "model.safetensors.index.json", "preprocessor_config.json",
    "tokenizer.json",        "tokenizer_config.json",           "vocab.json"};

TEST_F(pull, fetches_what_the_engine_reads_into_the_hub_cache_and_the_model_loads_by_name) {
  const auto r = run_pull();
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_EQ(r.out, snapshot().string() + "\n");
  EXPECT_NE(r.err.find("skipping 1 shard holding only talker and code2wav tensors (speech output, never read): 300.00 kB saved"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("12 files the clef engine reads"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  model-00002-of-00003.safetensors  803.74 kB  verified"), std::string::npos) << r.err;

  // The layout huggingface-cli makes: refs/main, blobs by ETag, relative links in the snapshot.
  EXPECT_EQ(read_file(repo_dir() / "refs" / "main"), commit);
  std::set<std::string> got;
  for (const auto& e : fs::directory_iterator(snapshot())) {
    const std::string name = e.path().filename().string();
    got.insert(name);
    ASSERT_TRUE(fs::is_symlink(e.symlink_status())) << name;
    const std::string content = read_file(release_ / name);
    const bool lfs = name.ends_with(".safetensors");
    const std::string blob = lfs ? hex_sha256(content) : hex_sha256("blob " + content).substr(0, 40);
    EXPECT_EQ(fs::read_symlink(e.path()), fs::path("../../blobs") / blob) << name;
    EXPECT_EQ(read_file(e.path()), content) << name;
  }
  EXPECT_EQ(got, std::set<std::string>(engine_files.begin(), engine_files.end()));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / hex_sha256(read_file(release_ / talker_shard))));
  EXPECT_TRUE(parts().empty());
  // The talker shard was never asked for.
  for (const auto& s : hub_->seen()) EXPECT_EQ(s.target.find(talker_shard), std::string::npos) << s.target;

  // --model ORG/NAME finds the snapshot through HF_HUB_CACHE; the served name is the repo's.
  test::env_var cache("HF_HUB_CACHE", cache_arg_.c_str());
  const std::string request =
      R"({"state":"please reset my password","questions":{"tool":{"type":"choice","criteria":{"reset_password":"Send a reset link","refund":"Refund a charge"}}}})";
  const auto decided = cli({"decide", "--engine", "clef", "--model", "Cloudflare/clef-omni", "--threads", "1"}, request);
  ASSERT_EQ(decided.code, exit_ok) << decided.err << decided.out;
  EXPECT_EQ(test::parse(decided.out)["model"], "Cloudflare/clef-omni") << decided.out;

  // baton models: the snapshot, its ref, its size and the fingerprint the engine logs.
  const auto models = cli({"models", "--dir", cache_arg_});
  ASSERT_EQ(models.code, exit_ok) << models.err;
  std::uint64_t bytes = 0;
  for (const auto& name : engine_files) bytes += fs::file_size(release_ / name);
  std::istringstream lines(models.out);
  std::string header, row, extra;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_FALSE(std::getline(lines, extra)) << models.out;
  EXPECT_TRUE(header.starts_with("REPO")) << header;
  std::istringstream cols(row);
  std::string c_repo, c_rev, c_commit, c_size, c_unit, c_fp;
  cols >> c_repo >> c_rev >> c_commit >> c_size >> c_unit >> c_fp;
  EXPECT_EQ(c_repo, repo);
  EXPECT_EQ(c_rev, "main");
  EXPECT_EQ(c_commit, commit.substr(0, 12));
  char size[32];
  std::snprintf(size, sizeof size, "%.2f MB", static_cast<double>(bytes) / 1e6);
  EXPECT_EQ(c_size + " " + c_unit, size) << row;
  EXPECT_EQ(c_fp, clef::release_fingerprint(snapshot()));
  // The same weights as the whole release, talker shard and all: the same fingerprint.
  EXPECT_EQ(c_fp, clef::release_fingerprint(release_));
  EXPECT_TRUE(c_fp.starts_with("sha256:")) << row;
}

// Quantized releases as AutoRound / GPTQ (int4) and FP8 exports name their tensors: a linear P is
// P.qweight, P.qzeros, P.scales and P.g_idx, or P.weight (F8_E4M3) with P.weight_scale_inv, and
// config.json carries the quantization_config. A pull picks shards by the index's tensor names
// (skipping talker.* and code2wav.* only), never by a suffix such as `.weight`: every shard holding
// a thinker tensor comes, whatever its tensors are called, and nothing the loader does not read.
TEST_F(pull, a_quantized_release_comes_whole_without_what_the_loader_does_not_read) {
  struct variant {
    std::string repo;
    nlohmann::json quantization_config;
    std::vector<std::vector<std::string>> shards;  // the tensors of model-0000N-of-00004.safetensors
  };
  const std::vector<variant> variants = {
      {"dbirks/clef-omni-int4",
       {{"quant_method", "auto-round"}, {"bits", 4}, {"group_size", 128}, {"sym", true}, {"packing_format", "auto_gptq"}},
       {{"thinker.model.embed_tokens.weight", "thinker.model.layers.0.self_attn.q_proj.qweight",
         "thinker.model.layers.0.self_attn.q_proj.qzeros", "thinker.model.layers.0.self_attn.q_proj.scales",
         "thinker.model.layers.0.self_attn.q_proj.g_idx"},
        // Nothing named .weight: only the packed parts of experts.
        {"thinker.model.layers.0.mlp.experts.0.down_proj.qweight", "thinker.model.layers.0.mlp.experts.0.down_proj.qzeros",
         "thinker.model.layers.0.mlp.experts.0.down_proj.scales", "thinker.model.layers.0.mlp.experts.0.down_proj.g_idx"},
        {"thinker.lm_head.weight", "talker.model.layers.0.self_attn.q_proj.qweight"},  // mixed: needed
        {"talker.model.layers.0.mlp.gate_proj.qweight", "talker.model.layers.0.mlp.gate_proj.qzeros",
         "talker.model.layers.0.mlp.gate_proj.scales", "talker.model.layers.0.mlp.gate_proj.g_idx",
         "code2wav.decoder.0.conv.weight"}}},
      {"dbirks/clef-omni-fp8",
       {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}},
       {{"thinker.model.embed_tokens.weight", "thinker.model.layers.0.self_attn.q_proj.weight",
         "thinker.model.layers.0.self_attn.q_proj.weight_scale_inv"},
        // Only the scales: a shard of its own.
        {"thinker.model.layers.0.mlp.experts.0.down_proj.weight_scale_inv",
         "thinker.model.layers.0.mlp.experts.0.up_proj.weight_scale_inv"},
        {"thinker.lm_head.weight", "talker.model.layers.0.self_attn.q_proj.weight_scale_inv"},
        {"talker.model.layers.0.mlp.gate_proj.weight", "talker.model.layers.0.mlp.gate_proj.weight_scale_inv",
         "code2wav.decoder.0.conv.weight"}}},
  };
  // Files of such releases that the loader never opens (config.json holds what it reads of the
  // quantization): GPTQ's and AutoRound's own copies of it, generation settings, a README, and a
  // single-file checkpoint next to the index (the loader opens model.safetensors only without one).
  const std::vector<std::string> unread = {"quantize_config.json", "quantization_config.json", "generation_config.json",
                                           "README.md", "model.safetensors", "model-00004-of-00004.safetensors"};
  for (const auto& v : variants) {
    SCOPED_TRACE(v.repo);
    const fs::path dir = dir_ / v.repo;
    fs::create_directories(dir);
    for (const char* name : {"joint_head.safetensors", "joint_head_config.json", "merges.txt", "preprocessor_config.json",
                             "tokenizer.json", "tokenizer_config.json", "vocab.json"}) {
      fs::copy_file(release_ / name, dir / name);
    }
    nlohmann::json config = nlohmann::json::parse(read_file(release_ / "config.json"));
    config["quantization_config"] = v.quantization_config;
    std::ofstream(dir / "config.json", std::ios::binary) << config.dump(2);
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    for (std::size_t i = 0; i < v.shards.size(); ++i) {
      const std::string shard = "model-0000" + std::to_string(i + 1) + "-of-00004.safetensors";
      for (const auto& tensor : v.shards[i]) index["weight_map"][tensor] = shard;
      // Bytes a pull never parses; each shard its own, so each is its own blob.
      std::ofstream(dir / shard, std::ios::binary) << std::string(70000 + 1000 * i, static_cast<char>('a' + i)) << v.repo;
    }
    std::ofstream(dir / "model.safetensors.index.json", std::ios::binary) << index.dump(2);
    for (const auto& name : unread) {
      if (!fs::exists(dir / name)) std::ofstream(dir / name, std::ios::binary) << name << " of " << v.repo;
    }

    fake_hub hub(dir, v.repo);
    const std::string endpoint = hub.endpoint();
    const auto r = cli({"pull", "--endpoint", endpoint, "--dir", cache_arg_, "--token-env", "BATON_TEST_HUB_TOKEN", v.repo});
    ASSERT_EQ(r.code, exit_ok) << r.err;
    const fs::path snap = cache_ / ("models--dbirks--" + v.repo.substr(v.repo.find('/') + 1)) / "snapshots" / commit;
    EXPECT_EQ(r.out, snap.string() + "\n");
    const std::set<std::string> want = {"config.json", "model.safetensors.index.json", "model-00001-of-00004.safetensors",
                                        "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
                                        "joint_head.safetensors", "joint_head_config.json", "merges.txt",
                                        "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json"};
    std::set<std::string> got;
    for (const auto& e : fs::directory_iterator(snap)) {
      const std::string name = e.path().filename().string();
      got.insert(name);
      EXPECT_EQ(read_file(e.path()), read_file(dir / name)) << name;
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(nlohmann::json::parse(read_file(snap / "config.json"))["quantization_config"], v.quantization_config);
    EXPECT_NE(r.err.find("12 files the clef engine reads"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("skipping 1 shard holding only talker and code2wav tensors"), std::string::npos) << r.err;
    for (const auto& s : hub.seen()) {
      for (const auto& name : unread) EXPECT_FALSE(s.target.ends_with("/" + name)) << s.target;
      EXPECT_FALSE(s.target.ends_with(hex_sha256(read_file(dir / "model-00004-of-00004.safetensors")))) << s.target;
    }
  }
}

TEST_F(pull, resumes_a_cut_transfer_with_range) {
  const std::string shard = "model-00001-of-00003.safetensors";
  hub_->cut[shard] = 100000;
  const auto first = run_pull();
  EXPECT_EQ(first.code, exit_temp_fail) << first.err;
  EXPECT_NE(first.err.find(shard + ": the transfer stopped"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("run the same command again to resume"), std::string::npos) << first.err;
  const auto kept = parts();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(fs::file_size(kept[0]), 100000u);
  EXPECT_FALSE(fs::exists(snapshot() / shard));

  const auto second = run_pull();
  ASSERT_EQ(second.code, exit_ok) << second.err;
  EXPECT_NE(second.err.find(shard + "  806.22 kB  verified, resumed at 100.00 kB"), std::string::npos) << second.err;
  EXPECT_TRUE(parts().empty());
  EXPECT_EQ(read_file(snapshot() / shard), read_file(release_ / shard));
  std::vector<std::string> ranges;
  for (const auto& s : hub_->seen()) {
    if (!s.range.empty()) ranges.push_back(s.target + " " + s.range);
  }
  // Asked of the hub and again of the CDN it redirects to.
  const std::vector<std::string> want = {"/" + repo + "/resolve/" + commit + "/" + shard + " bytes=100000-",
                                         "/cdn/" + hex_sha256(read_file(release_ / shard)) + " bytes=100000-"};
  EXPECT_EQ(ranges, want);
  // Files finished by the first run were not fetched again.
  std::size_t config_gets = 0;
  for (const auto& s : hub_->seen()) config_gets += s.target.ends_with("/config.json");
  EXPECT_EQ(config_gets, 1u);
}

// A gated repository whose terms the token's user has not accepted: 403 GatedRepo on its files.
TEST_F(pull, a_gated_repository_says_to_accept_its_terms) {
  hub_->gated = true;
  test::env_var token("BATON_TEST_HUB_TOKEN", "hf_reader");
  const auto refused = run_pull();
  EXPECT_EQ(refused.code, exit_no_perm);
  EXPECT_NE(refused.err.find("the hub answered 403 (a gated repository: accept its terms on its page first)"),
            std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("the token in BATON_TEST_HUB_TOKEN was refused"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots"));
}

TEST_F(pull, a_refused_token_says_what_to_do_and_a_good_one_stays_on_the_hub) {
  hub_->token = "hf_secret";
  test::env_var none("BATON_TEST_HUB_TOKEN", nullptr);
  const auto refused = run_pull();
  EXPECT_EQ(refused.code, exit_no_perm);
  EXPECT_NE(refused.err.find("the hub answered 401"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("no token was sent: set BATON_TEST_HUB_TOKEN (or name another variable with --token-env)"),
            std::string::npos)
      << refused.err;
  // --token-env named the only source: no advice to log in, whose token would not be read.
  EXPECT_EQ(refused.err.find("auth login"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots"));

  test::env_var wrong("BATON_TEST_HUB_TOKEN", "hf_wrong");
  const auto bad = run_pull();
  EXPECT_EQ(bad.code, exit_no_perm);
  EXPECT_NE(bad.err.find("the token in BATON_TEST_HUB_TOKEN was refused"), std::string::npos) << bad.err;

  test::env_var good("BATON_TEST_HUB_TOKEN", "hf_secret");
  const auto ok = run_pull();
  ASSERT_EQ(ok.code, exit_ok) << ok.err;
  std::size_t cdn = 0;
  for (const auto& s : hub_->seen()) {
    if (s.port == hub_->cdn_port()) {
      ++cdn;
      EXPECT_EQ(s.authorization, "") << s.target;  // another host: the token is not sent
    }
  }
  EXPECT_EQ(cdn, 4u);  // three thinker shards and the head; not the talker shard
}

// Without HF_TOKEN, the token huggingface-cli login saved; a refused one is named by its file.
TEST_F(pull, the_token_huggingface_cli_login_saved_is_used_without_hf_token) {
  hub_->token = "hf_saved";
  const std::vector<std::string_view> args = {"pull", "--endpoint", endpoint_, "--dir", cache_arg_};
  // No HF_TOKEN and no saved token (the fixture points HF_TOKEN_PATH at no file): both are named.
  const auto none = cli(args);
  EXPECT_EQ(none.code, exit_no_perm);
  EXPECT_NE(none.err.find("no token was sent: set HF_TOKEN (or name another variable with --token-env) to a hub "
                          "token that may read it, or log in with `hf auth login` (formerly `huggingface-cli login`)"),
            std::string::npos)
      << none.err;

  const fs::path file = dir_ / "hf-home" / "token";
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "hf_wrong\n";
  test::env_var path("HF_TOKEN_PATH", file.c_str());
  const auto refused = cli(args);
  EXPECT_EQ(refused.code, exit_no_perm);
  EXPECT_NE(refused.err.find("the token in " + file.string() + " (the saved login) was refused"), std::string::npos)
      << refused.err;

  std::ofstream(file) << "hf_saved\n";
  const auto ok = cli(args);
  ASSERT_EQ(ok.code, exit_ok) << ok.err;
  // A variable named with --token-env is the only source: unset, no token is sent.
  test::env_var unset_named("BATON_TEST_HUB_TOKEN", nullptr);
  fs::remove_all(cache_);
  const auto named = run_pull();
  EXPECT_EQ(named.code, exit_no_perm);
  EXPECT_NE(named.err.find("no token was sent: set BATON_TEST_HUB_TOKEN"), std::string::npos) << named.err;
}

// huggingface_hub's order without --token-env (utils/_auth.py get_token, 1.28.0): HF_TOKEN, then
// HUGGING_FACE_HUB_TOKEN, then the file `hf auth login` writes, here found through HF_HOME; none of
// them under HF_HUB_DISABLE_IMPLICIT_TOKEN. The token goes to the hub and shows nowhere.
TEST_F(pull, the_token_is_looked_up_as_huggingface_hub_does_and_never_shown) {
  const std::string secret = "hf_Secret123", wrong = "hf_Wrong456";
  hub_->token = secret;
  const fs::path home = dir_ / "hf-home";
  fs::create_directories(home);
  std::ofstream(home / "token", std::ios::binary) << secret << "\r\n";  // as a Windows editor might leave it
  test::env_var no_path("HF_TOKEN_PATH", nullptr), hf_home("HF_HOME", home.c_str());
  const std::vector<std::string_view> args = {"pull", "--endpoint", endpoint_, "--dir", cache_arg_};
  const auto shown = [&](const cli_result& r) {
    return r.out.find("Secret123") != std::string::npos || r.err.find("Secret123") != std::string::npos ||
           r.err.find("Wrong456") != std::string::npos;
  };

  const auto from_file = cli(args);
  ASSERT_EQ(from_file.code, exit_ok) << from_file.err;
  EXPECT_FALSE(shown(from_file)) << from_file.err;
  std::size_t on_hub = 0;
  for (const auto& s : hub_->seen()) {
    if (s.port == hub_->cdn_port()) {
      EXPECT_EQ(s.authorization, "") << s.target;
    } else {
      ++on_hub;
      EXPECT_EQ(s.authorization, "Bearer " + secret) << s.target;
    }
  }
  EXPECT_GT(on_hub, 1u);

  // A refused one is named by where it came from, never shown.
  std::ofstream(home / "token", std::ios::binary) << wrong << "\n";
  fs::remove_all(cache_);
  const auto refused = cli(args);
  EXPECT_EQ(refused.code, exit_no_perm);
  EXPECT_NE(refused.err.find("the token in " + (home / "token").string() + " (the saved login) was refused"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(shown(refused)) << refused.err;

  // The legacy variable comes before the file.
  test::env_var legacy("HUGGING_FACE_HUB_TOKEN", secret.c_str());
  fs::remove_all(cache_);
  const auto from_legacy = cli(args);
  ASSERT_EQ(from_legacy.code, exit_ok) << from_legacy.err;
  EXPECT_FALSE(shown(from_legacy)) << from_legacy.err;

  // HF_TOKEN comes before both.
  {
    test::env_var hf("HF_TOKEN", wrong.c_str());
    fs::remove_all(cache_);
    const auto from_hf = cli(args);
    EXPECT_EQ(from_hf.code, exit_no_perm);
    EXPECT_NE(from_hf.err.find("the token in HF_TOKEN was refused"), std::string::npos) << from_hf.err;
    EXPECT_FALSE(shown(from_hf)) << from_hf.err;
  }

  // HF_HUB_DISABLE_IMPLICIT_TOKEN: nothing is sent, unless a variable is named with --token-env.
  test::env_var disable("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1");
  fs::remove_all(cache_);
  const std::size_t before = hub_->seen().size();
  const auto disabled = cli(args);
  EXPECT_EQ(disabled.code, exit_no_perm);
  EXPECT_NE(disabled.err.find("no token was sent: HF_HUB_DISABLE_IMPLICIT_TOKEN is set"), std::string::npos) << disabled.err;
  const auto seen = hub_->seen();
  ASSERT_GT(seen.size(), before);
  for (std::size_t i = before; i < seen.size(); ++i) EXPECT_EQ(seen[i].authorization, "") << seen[i].target;
  test::env_var named("BATON_TEST_HUB_TOKEN", (" " + secret + "\n").c_str());  // cleaned as the others are
  const auto explicit_one = run_pull();
  ASSERT_EQ(explicit_one.code, exit_ok) << explicit_one.err;
  EXPECT_FALSE(shown(explicit_one)) << explicit_one.err;
}

TEST_F(pull, unknown_repositories_and_revisions_are_404s) {
  const auto repo_missing = cli({"pull", "--endpoint", endpoint_, "--dir", cache_arg_, "Nobody/nothing"});
  EXPECT_EQ(repo_missing.code, exit_no_input);
  EXPECT_NE(repo_missing.err.find("Nobody/nothing@main: no repository Nobody/nothing"), std::string::npos) << repo_missing.err;
  const auto rev_missing = run_pull({"--revision", "v9"});
  EXPECT_EQ(rev_missing.code, exit_no_input);
  EXPECT_NE(rev_missing.err.find("no revision v9 in Cloudflare/clef-omni"), std::string::npos) << rev_missing.err;
  EXPECT_FALSE(fs::exists(cache_));
}

TEST_F(pull, a_wrong_checksum_deletes_the_download_and_names_the_file) {
  const std::string shard = "model-00002-of-00003.safetensors";
  hub_->corrupt.insert(shard);
  const auto r = run_pull();
  EXPECT_EQ(r.code, exit_data_error);
  EXPECT_NE(r.err.find("baton pull: " + shard + ": its sha256 is "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the download was deleted"), std::string::npos) << r.err;
  EXPECT_TRUE(parts().empty());
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / hex_sha256(read_file(release_ / shard))));
  EXPECT_FALSE(fs::exists(fs::symlink_status(snapshot() / shard)));
}

// A disk that fills during a transfer: /dev/full answers every write with ENOSPC, as a full disk
// does. The error says so and how to resume, and the partial download is left where it was.
TEST_F(pull, a_full_disk_says_so_and_how_to_resume) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string shard = "model-00001-of-00003.safetensors";
  const fs::path part = repo_dir() / "blobs" / (hex_sha256(read_file(release_ / shard)) + ".part");
  fs::create_directories(part.parent_path());
  fs::create_symlink("/dev/full", part);
  const auto r = run_pull();
  EXPECT_EQ(r.code, exit_io_error) << r.err;
  EXPECT_NE(r.err.find("no space left on the device of " + part.parent_path().string() + " while writing " + shard),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("run the same command: it resumes"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(part));
  EXPECT_FALSE(fs::exists(fs::symlink_status(snapshot() / shard)));
}

// A file the listing gives without LFS metadata is checked by its size: one of another size is
// refused, and nothing is kept under its name.
TEST_F(pull, a_plain_file_of_another_size_than_listed_is_refused) {
  const std::string name = "tokenizer_config.json";
  const auto size = static_cast<long>(fs::file_size(release_ / name));
  hub_->listed_off[name] = -5;  // the hub sends more than the listing said
  const auto more = run_pull();
  EXPECT_EQ(more.code, exit_data_error) << more.err;
  EXPECT_NE(more.err.find(name + ": the hub sent more than its " + std::to_string(size - 5) + " bytes"), std::string::npos)
      << more.err;
  EXPECT_TRUE(parts().empty());
  EXPECT_FALSE(fs::exists(fs::symlink_status(snapshot() / name)));

  hub_->listed_off[name] = 5;  // the hub sends fewer
  const auto fewer = run_pull();
  EXPECT_EQ(fewer.code, exit_temp_fail) << fewer.err;
  EXPECT_NE(fewer.err.find(name + ": the transfer ended early"), std::string::npos) << fewer.err;
  EXPECT_FALSE(fs::exists(fs::symlink_status(snapshot() / name)));
}

// An ostream one thread writes while another reads what it has so far.
class shared_text : public std::streambuf {
 public:
  std::string text() {
    std::lock_guard lock(m_);
    return text_;
  }

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      std::lock_guard lock(m_);
      text_ += static_cast<char>(c);
    }
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard lock(m_);
    text_.append(s, static_cast<std::size_t>(n));
    return n;
  }

 private:
  std::mutex m_;
  std::string text_;
};

// An exclusive flock on a blob's lock file, as another process downloading it holds it.
struct held_lock {
  int fd = -1;
  explicit held_lock(const fs::path& lock) {
    fs::create_directories(lock.parent_path());
    fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && ::flock(fd, LOCK_EX) != 0) release();
  }
  ~held_lock() { release(); }
  void release() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Another process downloading the same blob holds its lock (huggingface_hub takes the same one):
// the pull waits, says so while it waits, and then reuses the blob that process finished.
TEST_F(pull, waits_for_another_download_of_the_same_blob_and_reuses_it) {
  const std::string shard = "model-00002-of-00003.safetensors";
  const std::string blob = hex_sha256(read_file(release_ / shard));
  held_lock other(cache_ / ".locks" / "models--Cloudflare--clef-omni" / (blob + ".lock"));
  ASSERT_GE(other.fd, 0);
  shared_text err_text;
  std::ostream err(&err_text);
  std::ostringstream out;
  const std::vector<std::string_view> args = {"--endpoint", endpoint_, "--dir", cache_arg_, "--token-env", "BATON_TEST_HUB_TOKEN"};
  std::optional<int> code;
  std::thread t([&] { code = pull_main(args, out, err, false); });
  const std::string wait_line = shard + "  waiting: another process is downloading it into this cache";
  bool waited = false;
  for (int i = 0; i < 400 && !waited; ++i) {
    waited = err_text.text().find(wait_line) != std::string::npos;
    if (!waited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // still waiting, not downloading
  const bool linked_while_locked = fs::exists(fs::symlink_status(snapshot() / shard));
  // The other process finishes the blob, then lets go.
  fs::create_directories(repo_dir() / "blobs");
  fs::copy_file(release_ / shard, repo_dir() / "blobs" / blob);
  other.release();
  t.join();
  EXPECT_TRUE(waited) << err_text.text();
  EXPECT_FALSE(linked_while_locked);
  ASSERT_TRUE(code.has_value());
  const std::string e = err_text.text();
  ASSERT_EQ(*code, exit_ok) << e;
  const auto wait_at = e.find(wait_line);
  ASSERT_NE(wait_at, std::string::npos) << e;
  EXPECT_NE(e.find(shard + "  803.74 kB  in the cache", wait_at), std::string::npos) << e;
  EXPECT_EQ(read_file(snapshot() / shard), read_file(release_ / shard));
  for (const auto& s : hub_->seen()) {
    EXPECT_EQ(s.target.find(shard), std::string::npos) << s.target;
    EXPECT_FALSE(s.target.ends_with(blob)) << s.target;
  }
}

// The wait is bounded by the other download's progress, not by the clock: it lasts while the
// holder's file grows (reported as it goes), and ends with BLOB_LOCKED, naming the holder, once it
// stalls. Driven through hub_client, whose bounds a test may shorten.
TEST_F(pull, a_wait_for_another_download_lasts_while_it_grows_and_ends_when_it_stalls) {
  using namespace std::chrono_literals;
  const std::string shard = "model-00002-of-00003.safetensors";
  const std::string content = read_file(release_ / shard);
  const std::string blob = hex_sha256(content);
  hub::hub_options options;
  options.endpoint = endpoint_;
  options.lock_report_every = 200ms;
  options.lock_stall = 800ms;
  auto client = hub::hub_client::make(options);
  ASSERT_TRUE(client) << client.error().message;
  const hub::hub_revision rev{repo, "main", commit, {}};
  const hub::hub_file file{shard, content.size(), blob, ""};
  const fs::path lock = cache_ / ".locks" / "models--Cloudflare--clef-omni" / (blob + ".lock");
  const fs::path blobs = repo_dir() / "blobs";
  fs::create_directories(blobs);
  std::mutex m;
  std::vector<std::uint64_t> reports;
  const hub::progress_fn progress = [&](const hub::hub_file&, hub::fetch_stage stage, std::uint64_t done, std::uint64_t) {
    std::lock_guard l(m);
    if (stage == hub::fetch_stage::waiting) reports.push_back(done);
  };

  // The holder writes huggingface_hub's per-process temporary file: 20 kB every 200 ms for 2 s,
  // more than twice lock_stall; then the blob, and it lets go.
  auto other = std::make_unique<held_lock>(lock);
  ASSERT_GE(other->fd, 0);
  std::thread writer([&] {
    const fs::path tmp = blobs / (blob + ".1a2b3c4d.incomplete");
    {
      std::ofstream out(tmp, std::ios::binary);
      for (int i = 0; i < 10; ++i) {
        out << std::string(20000, 'x') << std::flush;
        std::this_thread::sleep_for(200ms);
      }
    }
    std::ofstream(blobs / blob, std::ios::binary) << content;
    fs::remove(tmp);
    other->release();
  });
  auto start = std::chrono::steady_clock::now();
  const auto got = client->fetch(cache_, rev, file, progress);
  const auto waited = std::chrono::steady_clock::now() - start;
  writer.join();
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_GE(waited, 1900ms);
  EXPECT_EQ(read_file(*got), content);
  {
    std::lock_guard l(m);
    ASSERT_GE(reports.size(), 4u);
    EXPECT_TRUE(std::is_sorted(reports.begin(), reports.end()));
    EXPECT_GT(reports.back(), reports.front());
  }

  // A holder whose download does not grow (stopped, hung): the wait ends after lock_stall.
  fs::remove(snapshot() / shard);
  fs::remove(blobs / blob);
  held_lock stuck(lock);
  ASSERT_GE(stuck.fd, 0);
  start = std::chrono::steady_clock::now();
  const auto stalled = client->fetch(cache_, rev, file, progress);
  const auto gave_up = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(stalled);
  EXPECT_EQ(stalled.error().code, codes::blob_locked);
  EXPECT_EQ(stalled.error().status, 503);
  const std::string& message = stalled.error().message;
  EXPECT_NE(message.find(shard + ": another process"), std::string::npos) << message;
  EXPECT_NE(message.find("(it holds " + lock.string() + ") and its download has not grown in"), std::string::npos) << message;
  if (fs::exists("/proc/locks")) {
    EXPECT_NE(message.find("(pid " + std::to_string(::getpid()) + ")"), std::string::npos) << message;
  }
  EXPECT_GE(gave_up, 800ms);
  EXPECT_LT(gave_up, 5s);
  EXPECT_FALSE(fs::exists(fs::symlink_status(snapshot() / shard)));
  for (const auto& s : hub_->seen()) EXPECT_EQ(s.target.find(shard), std::string::npos) << s.target;
}

// `baton pull ARGS` as a child process, its standard output and error into files.
pid_t spawn_pull(std::vector<std::string> args, const fs::path& out, const fs::path& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  args.insert(args.begin(), {BATON_BINARY, "pull"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, BATON_BINARY, &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Its exit status; -1 when it did not end within 60 s (it is killed then).
int wait_exit(pid_t pid) {
  for (int i = 0; i < 600; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// Two pulls into one cache at once, two processes as two terminals would run them, against a hub
// slow enough that they overlap: each file is downloaded once, under its blob's lock; the other
// pull waits for it and reuses it; both succeed, and the files are complete.
TEST_F(pull, two_pulls_into_one_cache_at_once_take_turns_per_file) {
  hub_->slow_ms = 40;  // a shard of 800 kB takes about half a second
  const std::vector<std::string> args = {"--endpoint", endpoint_, "--dir", cache_arg_, "--token-env", "BATON_TEST_HUB_TOKEN"};
  const pid_t a = spawn_pull(args, dir_ / "a.out", dir_ / "a.err");
  const pid_t b = spawn_pull(args, dir_ / "b.out", dir_ / "b.err");
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  const int code_a = wait_exit(a), code_b = wait_exit(b);
  const std::string err_a = read_file(dir_ / "a.err"), err_b = read_file(dir_ / "b.err");
  EXPECT_EQ(code_a, exit_ok) << err_a;
  EXPECT_EQ(code_b, exit_ok) << err_b;
  EXPECT_EQ(read_file(dir_ / "a.out"), snapshot().string() + "\n");
  EXPECT_EQ(read_file(dir_ / "b.out"), snapshot().string() + "\n");
  // They overlapped: one found the other downloading a file and waited for it.
  const std::string waiting = "  waiting: another process is downloading it into this cache";
  EXPECT_TRUE(err_a.find(waiting) != std::string::npos || err_b.find(waiting) != std::string::npos) << err_a << err_b;

  std::set<std::string> got;
  for (const auto& e : fs::directory_iterator(snapshot())) {
    const std::string name = e.path().filename().string();
    got.insert(name);
    EXPECT_EQ(read_file(e.path()), read_file(release_ / name)) << name;
  }
  EXPECT_EQ(got, std::set<std::string>(engine_files.begin(), engine_files.end()));
  EXPECT_TRUE(parts().empty());
  EXPECT_EQ(read_file(repo_dir() / "refs" / "main"), commit);
  std::size_t listings = 0;
  std::map<std::string, int> resolved;
  for (const auto& s : hub_->seen()) {
    if (s.target.starts_with("/api/models/")) ++listings;
    const std::string resolve = "/" + repo + "/resolve/" + commit + "/";
    if (s.target.starts_with(resolve)) ++resolved[s.target.substr(resolve.size())];
  }
  EXPECT_EQ(listings, 2u);
  for (const auto& name : engine_files) EXPECT_EQ(resolved[name], 1) << name;
  EXPECT_EQ(resolved.size(), engine_files.size());
}

// The hub's ETag for a file is not the one its listing gave: the revision moved under the pull.
TEST_F(pull, an_etag_that_is_not_the_listings_keeps_nothing) {
  const std::string shard = "model-00002-of-00003.safetensors";
  hub_->moved.insert(shard);
  const auto r = run_pull();
  EXPECT_EQ(r.code, exit_data_error);
  EXPECT_NE(r.err.find(shard + ": the hub's ETag " + std::string(64, '0') + " is not the listing's"), std::string::npos)
      << r.err;
  EXPECT_TRUE(parts().empty());
  EXPECT_FALSE(fs::exists(fs::symlink_status(snapshot() / shard)));
}

TEST_F(pull, a_cache_huggingface_cli_made_is_reused_without_a_download) {
  // Laid out by hand as huggingface-cli does: every file of the revision, talker shard included.
  for (const auto& e : fs::directory_iterator(release_)) {
    const std::string name = e.path().filename().string();
    const std::string content = read_file(e.path());
    const std::string blob = name.ends_with(".safetensors") ? hex_sha256(content) : hex_sha256("blob " + content).substr(0, 40);
    fs::create_directories(repo_dir() / "blobs");
    fs::create_directories(snapshot());
    fs::copy_file(e.path(), repo_dir() / "blobs" / blob);
    fs::create_symlink(fs::path("../../blobs") / blob, snapshot() / name);
  }
  fs::create_directories(repo_dir() / "refs");
  std::ofstream(repo_dir() / "refs" / "main") << commit;

  const auto r = run_pull();
  ASSERT_EQ(r.code, exit_ok) << r.err;
  const auto seen = hub_->seen();
  ASSERT_EQ(seen.size(), 1u);  // the listing, nothing else
  EXPECT_TRUE(seen[0].target.starts_with("/api/models/Cloudflare/clef-omni/revision/main")) << seen[0].target;
  for (const auto& name : engine_files) {
    EXPECT_NE(r.err.find("  " + name + "  "), std::string::npos) << name;
  }
  EXPECT_NE(r.err.find("config.json  3.34 kB  in the cache"), std::string::npos) << r.err;
}

TEST_F(pull, a_cached_release_is_named_by_repo_in_the_config_and_on_the_command_line) {
  ASSERT_EQ(run_pull().code, exit_ok);
  test::env_var cache("HF_HUB_CACHE", cache_arg_.c_str());
  const auto c = parse_server_config("engine: {name: clef, model: Cloudflare/clef-omni}\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->engine.clef.model_dir, snapshot());
  const auto pinned = parse_server_config("engine: {name: clef, model: Cloudflare/clef-omni@" + commit + "}\n", "/etc/baton/baton.yaml");
  ASSERT_TRUE(pinned) << pinned.error().message;
  EXPECT_EQ(pinned->engine.clef.model_dir, snapshot());

  const auto missing = parse_server_config("engine: {name: clef, model: Cloudflare/other@v2}\n", "/etc/baton/baton.yaml");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("Cloudflare/other is not in the model cache " + cache_arg_ +
                                         "; `baton pull Cloudflare/other --revision v2` downloads it"),
            std::string::npos)
      << missing.error().message;
  const auto decide = cli({"decide", "--engine", "clef", "--model", "Cloudflare/other"}, "{}");
  EXPECT_EQ(decide.code, exit_no_input);
  EXPECT_NE(decide.err.find("`baton pull Cloudflare/other` downloads it"), std::string::npos) << decide.err;
}

TEST_F(pull, ctrl_c_keeps_the_part_and_says_how_to_resume) {
  const std::string shard = "model-00003-of-00003.safetensors";
  hub_->sigint[shard] = 200000;
  const auto r = run_pull();
  EXPECT_EQ(r.code, exit_interrupted) << r.err;
  EXPECT_NE(r.err.find("baton pull: " + shard + ": interrupted; run the same command again to resume"), std::string::npos)
      << r.err;
  const auto kept = parts();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(fs::file_size(kept[0]), 200000u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(snapshot() / shard)));
  ASSERT_EQ(run_pull().code, exit_ok);
  EXPECT_EQ(read_file(snapshot() / shard), read_file(release_ / shard));
}

TEST_F(pull, a_terminal_gets_a_progress_bar) {
  const std::vector<std::string_view> args = {"--endpoint", endpoint_, "--dir", cache_arg_};
  std::ostringstream out, err;
  ASSERT_EQ(pull_main(args, out, err, true), exit_ok) << err.str();
  // Redrawn in place: bar, bytes of the size, rate, time left; then the file's own line.
  const std::string e = err.str();
  EXPECT_NE(e.find("\r\033[K  model-00001-of-00003.safetensors  ["), std::string::npos) << e;
  EXPECT_NE(e.find(" / 806.22 kB  "), std::string::npos) << e;
  EXPECT_NE(e.find(" left"), std::string::npos) << e;
  EXPECT_NE(e.find("\r\033[K  model-00001-of-00003.safetensors  806.22 kB  verified"), std::string::npos) << e;
}

}  // namespace
}  // namespace baton
