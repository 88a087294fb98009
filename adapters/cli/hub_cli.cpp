#include "adapters/cli/hub_cli.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/exit_codes.hpp"
#include "adapters/hub/hub_client.hpp"
#include "core/error_codes.hpp"
#include "core/hf_cache.hpp"
#include "engine/clef/clef_engine.hpp"
#include "engine/clef/release_reads.hpp"

namespace baton {

namespace {

constexpr std::string_view default_repo = "Cloudflare/clef-omni";

constexpr const char* pull_help = R"(Usage: baton pull [--endpoint URL] [--revision REV] [--dir DIR] [--token-env NAME] [REPO]

Downloads a Clef-Omni release (REPO, default Cloudflare/clef-omni; ORG/NAME[@REV] also names the
revision) from the Hugging Face hub into the Hugging Face cache, as huggingface-cli lays it out:
DIR/models--ORG--NAME/snapshots/COMMIT/FILE. Afterwards the release is `--model ORG/NAME` for
`baton decide`, and `engine.model: ORG/NAME` in config/baton.yaml.

What is fetched: only what the clef engine reads. config.json (with its quantization_config, for
a quantized release), model.safetensors.index.json, joint_head_config.json and
joint_head.safetensors, the tokenizer files (tokenizer.json, vocab.json, merges.txt,
tokenizer_config.json, added_tokens.json) and preprocessor_config.json, when the revision has
them; then every shard the index maps a tensor other than talker.* or code2wav.* to, whatever the
tensor is called (a quantized linear's qweight, qzeros, scales and g_idx, or its weight and
weight_scale_inv, come like any weight), or model.safetensors for a release without an index.
Skipped: shards holding only talker or code2wav tensors (speech output), and every other file
(README, generation_config.json, quantize_config.json, ...).

Files already in the cache (from an earlier pull or from huggingface-cli) are reused; a cut
transfer resumes where it stopped (HTTP Range on a .part file); every file is verified (sha256
for LFS files, size for the others) before it appears under its name. Two pulls into one cache
(or a pull and huggingface_hub) take turns per file: each writes a blob under an flock on
DIR/.locks/models--ORG--NAME/BLOB.lock, huggingface_hub's lock; the other waits, says so (again
every 10 s), and reuses the finished file. It gives up (exit 75) when the download it waits for
has not grown in 5 minutes (a stopped or hung process).

The token (sent to the hub's own host only, never to its CDN, never printed): with --token-env
NAME, that variable only. Otherwise as huggingface_hub looks it up: $HF_TOKEN, else
$HUGGING_FACE_HUB_TOKEN (its older name), else the file `hf auth login` (formerly
`huggingface-cli login`) saved: $HF_TOKEN_PATH, else $HF_HOME/token, else
$XDG_CACHE_HOME/huggingface/token, else ~/.cache/huggingface/token. Line breaks and surrounding
spaces are dropped. HF_HUB_DISABLE_IMPLICIT_TOKEN=1 turns all of these off. Gated and private
repositories need a token; public ones do not.

Options:
  --endpoint URL    the hub (default: $HF_ENDPOINT, else https://huggingface.co); http:// too
  --revision REV    a branch, tag or commit (default main)
  --dir DIR         the cache (default: $HF_HUB_CACHE, else $HF_HOME/hub, else
                    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub)
  --token-env NAME  read the hub token from this variable only (see above)
  -h, --help        show this help

Standard output: the snapshot directory. Standard error: what is fetched and skipped, then a
progress bar on a terminal, else one line per file.

Exit status:
  0   the release is complete in the cache
  64  usage error
  65  a file's checksum does not match (it was deleted; the message names it)
  66  no such repository, revision or file (404), or not a release (no config.json)
  69  the hub cannot be reached or answers something unexpected
  74  the disk is full, or the cache cannot be written
  75  a transfer was cut short: run the same command again to resume; or another process's
      download of the same file stalled
  77  401 or 403: a gated or private repository, or a wrong token
  130 interrupted (SIGINT): run the same command again to resume
)";

constexpr const char* models_help = R"(Usage: baton models [--dir DIR]

Lists the models in the Hugging Face cache (the one `baton pull` writes; default: $HF_HUB_CACHE,
else $HF_HOME/hub, else ~/.cache/huggingface/hub), one line per snapshot: the repository, the
revisions naming it (refs/), its commit, its size on disk, and the release fingerprint the clef
engine logs with every decision ("-" when the snapshot is not a loadable release). Use one as
`--model ORG/NAME[@REV]`.

Options:
  --dir DIR   the cache
  -h, --help  show this help

Exit status: 0; 64 usage error.
)";

int exit_for(const error& e) {
  if (e.code == codes::hub_unauthorized) return exit_no_perm;
  if (e.code == codes::hub_not_found || e.code == codes::not_a_release) return exit_no_input;
  if (e.code == codes::checksum_mismatch) return exit_data_error;
  if (e.code == codes::disk_full || e.code == codes::cannot_write) return exit_io_error;
  if (e.code == codes::transfer_incomplete || e.code == codes::blob_locked) return exit_temp_fail;
  if (e.code == codes::interrupted) return exit_interrupted;
  if (e.code == codes::bad_endpoint || e.code == codes::bad_revision) return exit_usage;
  return exit_unavailable;
}

std::string seconds_text(double s) {
  const long t = static_cast<long>(s + 0.5);
  char text[32];
  if (t >= 3600) std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(text, sizeof text, "%ld:%02ld", t / 60, t % 60);
  return text;
}

// Progress on standard error: a bar redrawn in place on a terminal (bytes, rate, time left), else
// one line per file when it is verified or found in the cache.
class progress_view {
 public:
  progress_view(std::ostream& err, bool bar) : err_(err), bar_(bar) {}

  void operator()(const hub::hub_file& f, hub::fetch_stage stage, std::uint64_t done, std::uint64_t resumed_from) {
    using clock = std::chrono::steady_clock;
    const auto now = clock::now();
    if (stage == hub::fetch_stage::waiting) {
      if (f.path != waiting_) {
        waiting_ = f.path;
        wait_started_ = now;
        err_ << "  " << f.path << "  waiting: another process is downloading it into this cache\n" << std::flush;
        return;
      }
      err_ << "  " << f.path << "  still waiting ("
           << seconds_text(std::chrono::duration<double>(now - wait_started_).count()) << "): the other download has "
           << hub::format_bytes(done) << " of " << hub::format_bytes(f.size) << "\n" << std::flush;
      return;
    }
    if (stage == hub::fetch_stage::reused) {
      err_ << "  " << f.path << "  " << hub::format_bytes(f.size) << "  in the cache\n";
      return;
    }
    if (f.path != current_) {
      current_ = f.path;
      started_ = now;
      drawn_ = {};
      resumed_from_ = resumed_from;
    }
    const double elapsed = std::chrono::duration<double>(now - started_).count();
    const double rate = elapsed > 0 ? static_cast<double>(done - resumed_from_) / elapsed : 0;
    if (stage == hub::fetch_stage::verified) {
      if (bar_) err_ << "\r\033[K";
      err_ << "  " << f.path << "  " << hub::format_bytes(f.size) << "  verified";
      if (resumed_from_ > 0) err_ << ", resumed at " << hub::format_bytes(resumed_from_);
      if (rate > 0) err_ << " (" << hub::format_bytes(static_cast<std::uint64_t>(rate)) << "/s)";
      err_ << "\n";
      current_.clear();
      return;
    }
    if (!bar_ || now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    constexpr int width = 30;
    const int filled = f.size == 0 ? width : static_cast<int>(width * static_cast<double>(done) / static_cast<double>(f.size));
    const std::string left = rate > 0 ? seconds_text(static_cast<double>(f.size - done) / rate) : "?";
    err_ << "\r\033[K  " << f.path << "  [" << std::string(filled, '#') << std::string(width - filled, '.') << "] "
         << hub::format_bytes(done) << " / " << hub::format_bytes(f.size) << "  "
         << hub::format_bytes(static_cast<std::uint64_t>(rate)) << "/s  " << left << " left" << std::flush;
  }

 private:
  std::ostream& err_;
  bool bar_;
  std::string current_;
  std::string waiting_;  // the file a wait was last reported for: its first report says why
  std::chrono::steady_clock::time_point started_, drawn_, wait_started_;
  std::uint64_t resumed_from_ = 0;
};

// What a pull fetches: the files the clef engine reads, the index's thinker shards among them.
struct pull_plan {
  std::vector<const hub::hub_file*> fetch;
  std::vector<const hub::hub_file*> skipped_shards;  // only talker / code2wav tensors
  std::uint64_t fetch_bytes = 0, skipped_bytes = 0;
};

// `shards`: the index's shards_read; `named`: every shard it names (empty without an index).
result<pull_plan> plan_pull(const hub::hub_revision& rev, const std::set<std::string>& shards,
                            const std::set<std::string>& named) {
  pull_plan plan;
  std::set<std::string> listed;
  bool indexed = false;
  for (const auto& f : rev.files) indexed = indexed || f.path == clef::release_files::index_json;
  for (const auto& f : rev.files) {
    listed.insert(f.path);
    if (clef::engine_reads(f.path, indexed, shards)) {
      plan.fetch.push_back(&f);
      plan.fetch_bytes += f.size;
    } else if (named.contains(f.path)) {
      plan.skipped_shards.push_back(&f);
      plan.skipped_bytes += f.size;
    }
  }
  const std::string what = rev.repo + "@" + rev.revision;
  if (!listed.contains(std::string(clef::release_files::config_json))) {
    return make_error(404, codes::not_a_release, what + " has no config.json: it is not a Clef-Omni release");
  }
  for (const auto& shard : shards) {
    if (!listed.contains(shard)) {
      return make_error(404, codes::not_a_release, what + ": the index names " + shard + ", which the revision does not have");
    }
  }
  return plan;
}

}  // namespace

int pull_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err, bool progress_bar) {
  command_args a;
  if (auto problem = parse_args(args, {"--endpoint", "--revision", "--dir", "--token-env"}, {}, a)) {
    return usage_error(err, *problem, "pull");
  }
  if (a.help) {
    out << pull_help;
    return exit_ok;
  }
  const std::string repo_arg = a.file.value_or(std::string(default_repo));
  auto ref = hf_cache::parse_model_ref(repo_arg);
  if (!ref) return usage_error(err, "`" + repo_arg + "` is not a repository ORG/NAME[@REV]", "pull");
  if (auto rev = a.get("--revision")) {
    if (repo_arg.find('@') != std::string::npos) return usage_error(err, "give the revision once: @REV or --revision", "pull");
    if (rev->empty()) return usage_error(err, "--revision needs a branch, tag or commit", "pull");
    ref->revision = std::string(*rev);
  }
  hub::hub_options options;
  options.endpoint = a.get("--endpoint") ? std::string(*a.get("--endpoint")) : hf_cache::env("HF_ENDPOINT").value_or(options.endpoint);
  options.token_env = a.get("--token-env") ? std::string(*a.get("--token-env")) : options.token_env;
  if (options.token_env.empty()) return usage_error(err, "--token-env needs a variable name", "pull");
  if (a.get("--token-env")) {
    // A variable named on the command line is the only source asked for.
    options.token = hf_cache::clean_token(hf_cache::env(options.token_env.c_str()).value_or("")).value_or("");
  } else if (hf_cache::implicit_token_disabled()) {
    options.implicit_token_disabled = true;
  } else {
    // huggingface_hub's order: HF_TOKEN, HUGGING_FACE_HUB_TOKEN, then the saved login's file.
    options.token_file_read = true;
    if (auto found = hf_cache::implicit_token()) {
      options.token = std::move(found->token);
      if (found->from_file) options.token_file = std::move(found->source);
      else options.token_env = std::move(found->source);
    }
  }
  options.stop_on_sigint = true;
  const std::filesystem::path root = a.get("--dir") ? std::filesystem::path(*a.get("--dir")) : hf_cache::default_root();
  auto client = hub::hub_client::make(std::move(options));
  auto fail = [&](const error& e) {
    err << "baton pull: " << e.message << "\n";
    return exit_for(e);
  };
  if (!client) return fail(client.error());

  const auto rev = client->list(ref->repo, ref->revision);
  if (!rev) return fail(rev.error());
  err << "pulling " << rev->repo << "@" << rev->revision << " (commit " << rev->commit.substr(0, 12) << ") into "
      << root.string() << "\n";
  progress_view view(err, progress_bar);
  const hub::progress_fn progress = std::ref(view);

  // The index first: which shards hold thinker tensors is in it.
  std::set<std::string> shards, named;
  for (const auto& f : rev->files) {
    if (f.path != clef::release_files::index_json) continue;
    const auto index_path = client->fetch(root, *rev, f, progress);
    if (!index_path) return fail(index_path.error());
    std::ifstream in(*index_path, std::ios::binary);
    const auto index = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!index.is_object()) {
      return fail(make_error(404, codes::not_a_release, rev->repo + ": " + f.path + " is not a JSON object"));
    }
    shards = clef::release_files::shards_read(index);
    if (const auto map = index.find("weight_map"); map != index.end() && map->is_object()) {
      for (const auto& [tensor, file] : map->items()) {
        if (file.is_string()) named.insert(file.get<std::string>());
      }
    }
  }
  const auto plan = plan_pull(*rev, shards, named);
  if (!plan) return fail(plan.error());

  err << plan->fetch.size() << " files the clef engine reads: " << hub::format_bytes(plan->fetch_bytes) << "\n";
  if (!plan->skipped_shards.empty()) {
    err << "skipping " << plan->skipped_shards.size() << (plan->skipped_shards.size() == 1 ? " shard" : " shards")
        << " holding only talker and code2wav tensors (speech output, never read): "
        << hub::format_bytes(plan->skipped_bytes) << " saved\n";
  }
  for (const hub::hub_file* f : plan->fetch) {
    if (f->path == clef::release_files::index_json) continue;  // fetched above
    const auto got = client->fetch(root, *rev, *f, progress);
    if (!got) return fail(got.error());
  }
  if (auto r = hub::hub_client::write_ref(root, *rev); !r) return fail(r.error());
  const auto snapshot = hf_cache::repo_dir(root, rev->repo) / "snapshots" / rev->commit;
  out << snapshot.string() << "\n";
  const std::string model = rev->repo + (rev->revision == "main" ? "" : "@" + rev->revision);
  err << "done: " << rev->repo << "@" << rev->revision << " is in " << snapshot.string()
      << "; use it as `baton decide --engine clef --model " << model << "`\n";
  return exit_ok;
}

int models_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  command_args a;
  if (auto problem = parse_args(args, {"--dir"}, {}, a)) return usage_error(err, *problem, "models");
  if (a.help) {
    out << models_help;
    return exit_ok;
  }
  if (a.file) return usage_error(err, "unexpected argument `" + *a.file + "`", "models");
  const std::filesystem::path root = a.get("--dir") ? std::filesystem::path(*a.get("--dir")) : hf_cache::default_root();
  const auto snapshots = hf_cache::list_snapshots(root);
  if (snapshots.empty()) {
    err << "no models in " << root.string() << " (`baton pull` downloads Cloudflare/clef-omni)\n";
    return exit_ok;
  }
  std::vector<std::array<std::string, 5>> rows = {{"REPO", "REVISION", "COMMIT", "SIZE", "FINGERPRINT"}};
  for (const auto& s : snapshots) {
    std::string refs;
    for (const auto& r : s.refs) refs += (refs.empty() ? "" : ",") + r;
    std::string fingerprint = "-";
    // Only a directory the engine could load has a fingerprint worth logging against.
    try {
      if (std::filesystem::exists(s.dir / clef::release_files::config_json)) fingerprint = clef::release_fingerprint(s.dir);
    } catch (const std::exception&) {
      fingerprint = "-";
    }
    rows.push_back({s.repo, refs.empty() ? "-" : refs, s.commit.substr(0, 12), hub::format_bytes(s.bytes), fingerprint});
  }
  std::array<std::size_t, 5> width{};
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
  return exit_ok;
}

}  // namespace baton
