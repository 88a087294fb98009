// A client of the Hugging Face hub for `baton pull`: a revision's file list through the hub's API,
// and files into the hub cache as huggingface_hub lays it out (core/hf_cache.hpp): resumed with
// HTTP Range on blobs/HASH.part, verified (sha256 for LFS files, size for the others) and renamed
// into place only then, linked from snapshots/COMMIT/FILE. Errors are values whose message says
// what to do; the codes are listed on hub_client's functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/http_url.hpp"

namespace baton::hub {

inline constexpr std::string_view default_endpoint = "https://huggingface.co";

struct hub_options {
  std::string endpoint = std::string(default_endpoint);  // http:// or https://host[:port][/prefix]
  std::string token;      // sent as a bearer token to the endpoint's host only, never to a CDN
  std::string token_env = "HF_TOKEN";  // the variable for it: the 401 message names it
  std::string token_file;              // set when the token came from the login's token file
  bool token_file_read = false;        // whether that file was asked (no --token-env given)
  bool implicit_token_disabled = false;  // HF_HUB_DISABLE_IMPLICIT_TOKEN: only --token-env is read
  std::chrono::seconds timeout{60};    // for each connect and each read: a stalled transfer fails
  bool stop_on_sigint = false;         // SIGINT and SIGTERM end a transfer, keeping its .part
  // A wait for another process's download of the same blob (its lock) is reported at once and
  // then every `lock_report_every` (huggingface_hub logs every 10 s), and fails when that
  // download has not grown for `lock_stall`: a stopped or hung holder, not a slow one (whose own
  // reads time out after `timeout` and free the lock).
  std::chrono::milliseconds lock_report_every{10000};
  std::chrono::milliseconds lock_stall{std::chrono::minutes(5)};
  // https peers are verified against the system's CAs (core/http_client.hpp).
};

// One file of a revision, as the listing gives it.
struct hub_file {
  std::string path;    // "config.json", "sub/dir/file"
  std::uint64_t size = 0;
  std::string sha256;  // LFS files: the content's sha256 (hex), also their blob's name
  std::string blob_id; // the git blob id: the blob's name for files outside LFS

  const std::string& blob_name() const { return sha256.empty() ? blob_id : sha256; }
};

struct hub_revision {
  std::string repo;      // ORG/NAME
  std::string revision;  // as asked: a branch, tag or commit
  std::string commit;    // the commit it names (40 hex digits)
  std::vector<hub_file> files;
};

// What a fetch reports as it goes: a wait for another process downloading the same blob (a
// pull or huggingface_hub: both lock it; `done` is what that download has so far, reported again
// every hub_options::lock_report_every), a file reused from the cache, its bytes arriving (`done`
// of `file.size`, `resumed_from` bytes were already on disk), or its end.
enum class fetch_stage { waiting, reused, transferring, verified };
using progress_fn = std::function<void(const hub_file& file, fetch_stage stage, std::uint64_t done,
                                       std::uint64_t resumed_from)>;

class hub_client {
 public:
  // 400 BAD_ENDPOINT for an endpoint that is not an http(s) URL.
  static result<hub_client> make(hub_options options);

  // GET /api/models/REPO/revision/REV?blobs=true. 401 / 403 HUB_UNAUTHORIZED (gated, private or a
  // bad token: what to do), 404 HUB_NOT_FOUND (no such repository or revision), 502
  // HUB_UNAVAILABLE (the hub cannot be reached or answers something else).
  result<hub_revision> list(std::string_view repo, std::string_view revision) const;

  // The file under ROOT/models--ORG--NAME/snapshots/COMMIT/, reusing its blob when the cache has
  // it, else downloading blobs/HASH.part (resumed when there is one) from resolve/COMMIT/FILE,
  // following redirects. The blob is checked and written under an exclusive flock on
  // ROOT/.locks/models--ORG--NAME/BLOB.lock, huggingface_hub's lock for it, so concurrent pulls
  // (and huggingface_hub) download it once: a waiter then reuses it. The list's errors, and 507
  // DISK_FULL, 502 CHECKSUM_MISMATCH (the .part is deleted, also when another writer, unlocked,
  // appended to it), 503 BLOB_LOCKED (the lock's holder stalled: hub_options::lock_stall), 503
  // TRANSFER_INCOMPLETE (the connection failed or was cut) and 503 INTERRUPTED (a signal): the
  // .part is kept for the next run, whose message says so.
  result<std::filesystem::path> fetch(const std::filesystem::path& cache_root, const hub_revision& revision,
                                      const hub_file& file, const progress_fn& progress) const;

  // refs/REVISION holding the commit, as huggingface_hub writes it (no newline); nothing for a
  // revision that is the commit itself.
  static result<void> write_ref(const std::filesystem::path& cache_root, const hub_revision& revision);

 private:
  hub_client(hub_options options, http_url endpoint);
  hub_options options_;
  http_url endpoint_;  // options_.endpoint, checked and parsed once by make()
  // The TLS context, made on the first https hop and kept for every request of this client: the
  // system's CA bundle is read once per pull, not once per file.
  struct tls_context;
  std::shared_ptr<tls_context> tls_;
};

// "1.23 GB": decimal units, as the hub shows sizes.
std::string format_bytes(std::uint64_t bytes);

}  // namespace baton::hub
