#include "adapters/hub/hub_client.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error_codes.hpp"
#include "core/hf_cache.hpp"
#include "core/http_client.hpp"
#include "core/http_url.hpp"
#include "core/sha256.hpp"

namespace baton::hub {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace http = boost::beast::http;

namespace {

constexpr int max_redirects = 10;
constexpr std::size_t max_listing_bytes = 64u << 20;  // a listing of a million files is ~100 MB: far beyond a model

// What a body is written to: begin() sees the final response's status and headers before any byte.
struct body_sink {
  virtual ~body_sink() = default;
  virtual result<void> begin(const http::response_header<>& head) = 0;
  virtual result<void> write(const char* data, std::size_t size) = 0;
};

// Error bodies and listings: kept in memory up to a limit.
struct string_sink : body_sink {
  std::string body;
  std::size_t limit;
  explicit string_sink(std::size_t l) : limit(l) {}
  result<void> begin(const http::response_header<>&) override { return {}; }
  result<void> write(const char* data, std::size_t size) override {
    if (body.size() + size > limit) return make_error(502, codes::hub_unavailable, "the hub's answer is over " + format_bytes(limit));
    body.append(data, size);
    return {};
  }
};

// A path segment or a whole path (`keep_slash`) for a URL: unreserved characters as they are.
std::string percent_encode(std::string_view s, bool keep_slash) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (std::isalnum(b) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += c;
    } else {
      out += '%';
      out += hex[b >> 4];
      out += hex[b & 15];
    }
  }
  return out;
}

// An ETag as the hub sends it ("W/\"abc\"" or "\"abc\"") as huggingface_hub names blobs by it.
std::string normalize_etag(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  while (!etag.empty() && etag.front() == '"') etag.remove_prefix(1);
  while (!etag.empty() && etag.back() == '"') etag.remove_suffix(1);
  return std::string(etag);
}

// The one outcome of a GET: the final status (after redirects), and the sink's or the transport's error.
struct get_outcome {
  unsigned status = 0;
  std::string error_code;   // the hub's X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo)
  std::string first_etag;   // the hub's own X-Linked-Etag or ETag, before any redirect to a CDN
  std::optional<error> failed;
  bool interrupted = false;  // a signal ended it
};

// One GET with redirects over a private io_context, the body streamed to a sink for 200 and 206
// (and kept, small, for error statuses). The token goes to the endpoint's host only. `tls` is the
// client's context, made here on the first https hop (a CDN may be https behind an http hub).
class getter {
 public:
  getter(const hub_options& options, const http_url& endpoint, std::optional<ssl::context>& tls)
      : options_(options), endpoint_(endpoint), tls_(tls) {}

  get_outcome run(std::string url, std::uint64_t range_from, body_sink& sink, string_sink& error_body) {
    get_outcome out;
    net::io_context io;
    std::optional<net::signal_set> signals;
    if (options_.stop_on_sigint) {
      signals.emplace(io, SIGINT, SIGTERM);
      signals->async_wait([&](const boost::system::error_code& ec, int) {
        if (ec) return;
        out.interrupted = true;
        if (conn_ != nullptr) conn_->cancel();
      });
    }
    net::co_spawn(io, follow(std::move(url), range_from, sink, error_body, out), [&](std::exception_ptr e) {
      if (e) out.failed = make_error(502, codes::hub_unavailable, "the transfer failed unexpectedly");
      if (signals) signals->cancel();
    });
    io.run();
    return out;
  }

 private:
  error transport(const http_client::failure& f, const std::string& url) const {
    using http_client::step;
    const std::string doing = f.at == step::handshake     ? "the TLS handshake with"
                              : f.at == step::write       ? "sending the request to"
                              : f.at == step::read_header ? "reading the answer of"
                              : f.at == step::read_body   ? "reading"
                                                          : "connecting to";
    if (f.why == http_client::fault::timeout) {
      return make_error(504, codes::hub_unavailable, doing + " " + url + ": no answer within " +
                                                    std::to_string(options_.timeout.count()) + " s");
    }
    return make_error(502, codes::hub_unavailable, doing + " " + url + ": " + f.detail);
  }

  net::awaitable<void> follow(std::string url, std::uint64_t range_from, body_sink& sink, string_sink& error_body,
                              get_outcome& out) {
    for (int hop = 0; hop <= max_redirects; ++hop) {
      std::string reason;
      const auto u = parse_http_url(url, reason, true);
      if (!u) {
        out.failed = make_error(502, codes::hub_unavailable, "the hub sent to `" + url + "`, which " + reason);
        co_return;
      }
      if (u->tls && !tls_) {
        auto made = http_client::tls_context({});
        if (!made) {
          out.failed = make_error(502, codes::hub_unavailable, "the CA certificates for https do not load: " + made.error().message());
          co_return;
        }
        tls_.emplace(std::move(*made));
      }
      http_client::connection conn(co_await net::this_coro::executor, u->tls ? &*tls_ : nullptr);
      conn_ = &conn;
      const std::optional<std::string> next = co_await exchange(conn, *u, url, hop == 0, range_from, sink, error_body, out);
      conn_ = nullptr;
      if (!next) co_return;
      // A Location may be relative to the host that sent it (the hub's own renames are).
      url = next->starts_with("/") ? std::string(u->tls ? "https://" : "http://") + u->host_header + *next : *next;
    }
    out.failed = make_error(502, codes::hub_unavailable, "more than " + std::to_string(max_redirects) + " redirects");
  }

  // One request on a fresh connection; the next URL for a redirect, else nullopt (done or failed).
  net::awaitable<std::optional<std::string>> exchange(http_client::connection& conn, const http_url& u, const std::string& url,
                                                      bool first, std::uint64_t range_from,
                                                      body_sink& sink, string_sink& error_body, get_outcome& out) {
    // Whether the transfer ends after a step, failed or stopped by a signal: out.failed says why
    // (INTERRUPTED after a signal, whatever the step did: a failure then is the signal's doing).
    auto stopped = [&](const auto& step_outcome) {
      if (!out.interrupted && step_outcome) return false;
      out.failed = out.interrupted ? make_error(503, codes::interrupted, "interrupted") : transport(step_outcome.error(), url);
      return true;
    };
    // The lookup, the connection, the TLS handshake and the request: one timeout.
    const auto deadline = http_client::clock_type::now() + options_.timeout;
    const auto found = co_await http_client::resolve(u.host, u.port, deadline);
    if (stopped(found)) co_return std::nullopt;
    const auto connected = co_await conn.connect(*found, u.host, deadline);
    if (stopped(connected)) co_return std::nullopt;
    auto req = http_client::request_to(http::verb::get, u);
    req.set(http::field::user_agent, "baton/0.1");
    req.set(http::field::accept, "*/*");
    // A CDN gets no token: huggingface_hub drops it too when a redirect leaves the hub's host.
    if (!options_.token.empty() && u.host_header == endpoint_.host_header && u.tls == endpoint_.tls) {
      req.set(http::field::authorization, "Bearer " + options_.token);
    }
    if (range_from > 0) req.set(http::field::range, "bytes=" + std::to_string(range_from) + "-");
    req.keep_alive(false);
    const auto sent = co_await conn.write(req);
    if (stopped(sent)) co_return std::nullopt;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    conn.expires_after(options_.timeout);
    const auto answered = co_await conn.read_header(parser);
    if (stopped(answered)) co_return std::nullopt;
    const auto& head = parser.get();
    out.status = head.result_int();
    if (first) {
      const auto linked = head.find("X-Linked-Etag");
      const auto etag = head.find(http::field::etag);
      if (linked != head.end()) out.first_etag = normalize_etag(linked->value());
      else if (etag != head.end()) out.first_etag = normalize_etag(etag->value());
    }
    if (const auto code = head.find("X-Error-Code"); code != head.end()) out.error_code = std::string(code->value());
    if (out.status >= 300 && out.status < 400 && head.find(http::field::location) != head.end()) {
      co_return std::string(head[http::field::location]);
    }
    const bool ok = out.status == 200 || out.status == 206;
    body_sink& to = ok ? sink : static_cast<body_sink&>(error_body);
    if (ok) {
      if (auto r = sink.begin(head.base()); !r) {
        out.failed = r.error();
        co_return std::nullopt;
      }
    }
    std::vector<char> chunk(1 << 18);
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      conn.expires_after(options_.timeout);
      const auto read_some = co_await conn.read_body(parser);
      const std::size_t got = chunk.size() - parser.get().body().size;
      if (got > 0) {
        if (auto r = to.write(chunk.data(), got); !r) {
          out.failed = r.error();
          co_return std::nullopt;
        }
      }
      if (stopped(read_some)) co_return std::nullopt;
    }
    co_return std::nullopt;
  }

  const hub_options& options_;
  const http_url& endpoint_;
  std::optional<ssl::context>& tls_;
  http_client::connection* conn_ = nullptr;  // the connection a signal cancels
};

// What a status other than 200 / 206 means for `what` (the repository, or one of its files).
error status_error(const hub_options& o, std::string_view repo, std::string_view revision, const get_outcome& g,
                   const std::string& what, const std::string& body) {
  const std::string pull = "baton pull " + std::string(repo);
  if (g.status == 401 || g.status == 403) {
    const std::string gated = g.error_code == "GatedRepo" ? " (a gated repository: accept its terms on its page first)" : "";
    const std::string fix =
        o.token.empty() && o.implicit_token_disabled
            ? "no token was sent: HF_HUB_DISABLE_IMPLICIT_TOKEN is set, so neither HF_TOKEN nor the saved login is "
              "read; name a variable holding a hub token that may read it with --token-env"
        : o.token.empty()
            ? "no token was sent: set " + o.token_env +
                  " (or name another variable with --token-env) to a hub token that may read it" +
                  (o.token_file_read ? ", or log in with `hf auth login` (formerly `huggingface-cli login`)" : "")
        : !o.token_file.empty()
            ? "the token in " + o.token_file + " (the saved login) was refused: check that it is valid and may read this repository (or set " +
                  o.token_env + " to another)"
            : "the token in " + o.token_env + " was refused: check that it is valid and may read this repository (or name another variable with --token-env)";
    return make_error(static_cast<int>(g.status), codes::hub_unauthorized,
                      what + ": the hub answered " + std::to_string(g.status) + gated +
                          ": the repository is gated or private, or the token is wrong; " + fix + " (tokens: " +
                          std::string(default_endpoint) + "/settings/tokens)");
  }
  if (g.status == 404) {
    std::string missing = "no such repository, revision or file";
    if (g.error_code == "RepoNotFound") missing = "no repository " + std::string(repo) + " (or it is private: set " + o.token_env + ")";
    else if (g.error_code == "RevisionNotFound") missing = "no revision " + std::string(revision) + " in " + std::string(repo);
    else if (g.error_code == "EntryNotFound") missing = "no such file in " + std::string(repo) + "@" + std::string(revision);
    return make_error(404, codes::hub_not_found, what + ": " + missing + " (the hub answered 404)");
  }
  std::string detail = body.substr(0, 200);
  for (char& c : detail) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return make_error(502, codes::hub_unavailable, what + ": the hub answered " + std::to_string(g.status) +
                                                (detail.empty() ? "" : ": " + detail) + "; `" + pull + "` again later");
}

// The .part file of one transfer, written with write(2) so that a full disk is ENOSPC, not a
// silently failed stream; hashed as it goes.
class part_sink : public body_sink {
 public:
  part_sink(fs::path part, const hub_file& file, std::uint64_t have, const progress_fn& progress)
      : part_(std::move(part)), file_(file), have_(have), resumed_from_(have), progress_(progress) {}
  ~part_sink() override {
    if (fd_ >= 0) ::close(fd_);
  }

  result<void> open_and_hash() {
    fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) return make_error(500, codes::cannot_write, part_.string() + ": " + std::strerror(errno));
    if (have_ == 0 || file_.sha256.empty()) return {};
    // A resumed LFS file is hashed whole: the bytes already there first.
    std::ifstream in(part_, std::ios::binary);
    std::vector<char> buffer(1 << 20);
    std::uint64_t read = 0;
    while (in && read < have_) {
      in.read(buffer.data(), static_cast<std::streamsize>(std::min<std::uint64_t>(buffer.size(), have_ - read)));
      hash_->update(buffer.data(), static_cast<std::size_t>(in.gcount()));
      read += static_cast<std::uint64_t>(in.gcount());
    }
    if (read != have_) return make_error(500, codes::cannot_write, part_.string() + ": cannot read it back");
    return {};
  }

  result<void> begin(const http::response_header<>& head) override {
    if (head.result_int() == 206) {
      // "bytes START-END/TOTAL": it must start where the .part ends.
      const std::string range(head[http::field::content_range]);
      if (range.starts_with("bytes " + std::to_string(have_) + "-")) return {};
    }
    // A whole body (the server ignored Range, or answered another one): start over.
    if (have_ > 0 && ::ftruncate(fd_, 0) != 0) {
      return make_error(500, codes::cannot_write, part_.string() + ": " + std::strerror(errno));
    }
    have_ = resumed_from_ = 0;
    hash_.emplace();
    return {};
  }

  result<void> write(const char* data, std::size_t size) override {
    if (have_ + size > file_.size) {
      return make_error(502, codes::checksum_mismatch, file_.path + ": the hub sent more than its " +
                                                      std::to_string(file_.size) + " bytes");
    }
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        if (errno == ENOSPC || errno == EDQUOT) {
          return make_error(507, codes::disk_full, "no space left on the device of " + part_.parent_path().string() +
                                                  " while writing " + file_.path + "; free " +
                                                  format_bytes(file_.size - have_) +
                                                  " there (or pull with --dir elsewhere) and run the same command: it resumes");
        }
        return make_error(500, codes::cannot_write, part_.string() + ": " + std::strerror(errno));
      }
      done += static_cast<std::size_t>(n);
    }
    if (!file_.sha256.empty()) hash_->update(data, size);
    have_ += size;
    if (progress_) progress_(file_, fetch_stage::transferring, have_, resumed_from_);
    return {};
  }

  result<void> finish() {
    const int fd = fd_;
    fd_ = -1;
    // Durable before the rename makes it visible under its name.
    if (::fdatasync(fd) != 0 || ::close(fd) != 0) {
      return make_error(500, codes::cannot_write, part_.string() + ": " + std::strerror(errno));
    }
    return {};
  }

  std::uint64_t have() const noexcept { return have_; }
  std::string digest() { return hash_->digest(); }

 private:
  fs::path part_;
  const hub_file& file_;
  std::uint64_t have_;
  std::uint64_t resumed_from_;
  const progress_fn& progress_;
  int fd_ = -1;
  std::optional<sha256> hash_{std::in_place};
};

// The process holding the flock on `fd`'s file, from /proc/locks ("1: FLOCK  ADVISORY  WRITE PID
// MAJ:MIN:INODE 0 EOF"; waiters' lines have "->"): 0 when it cannot be told.
long lock_holder(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  char id[64];
  std::snprintf(id, sizeof id, "%02x:%02x:%lu", major(st.st_dev), minor(st.st_dev), static_cast<unsigned long>(st.st_ino));
  std::ifstream locks("/proc/locks");
  for (std::string line; std::getline(locks, line);) {
    std::istringstream fields(line);
    std::string number, kind, mode, access, pid, file;
    if (!(fields >> number >> kind >> mode >> access >> pid >> file) || kind != "FLOCK" || file != id) continue;
    try {
      return std::stol(pid);
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

// An exclusive flock(2) on CACHE/.locks/models--ORG--NAME/BLOB.lock while a blob is checked and
// written: the lock huggingface_hub takes for the same blob (filelock's UnixFileLock is flock, on a
// file of mode 0664 so that a group sharing the cache can wait on it), so two pulls, or a pull and
// huggingface_hub, never write one blob at once. The file stays, as the hub's do.
class blob_lock {
 public:
  blob_lock() = default;
  blob_lock(const blob_lock&) = delete;
  blob_lock& operator=(const blob_lock&) = delete;
  ~blob_lock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

  // Waits while another process holds it, polling: a blocking flock could not be bounded.
  // `others_bytes` is the holder's download so far; `on_wait` hears it at once and every
  // `report_every`; the wait fails once it has not changed for `stall`.
  result<void> acquire(const fs::path& path, const std::function<std::uint64_t()>& others_bytes,
                       const std::function<void(std::uint64_t)>& on_wait, std::chrono::milliseconds report_every,
                       std::chrono::milliseconds stall, const std::string& what) {
    using clock = std::chrono::steady_clock;
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec) return make_error(500, codes::cannot_write, path.parent_path().string() + ": " + ec.message());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
    if (fd_ < 0) return make_error(500, codes::cannot_write, path.string() + ": " + std::strerror(errno));
    (void)::fchmod(fd_, 0664);  // as filelock does; another user's file keeps its mode
    const auto start = clock::now();
    auto changed = start, next_report = start + report_every;
    std::uint64_t seen = 0;
    for (bool first = true;; first = false) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return {};
      if (errno != EWOULDBLOCK && errno != EINTR) return make_error(500, codes::cannot_write, path.string() + ": " + std::strerror(errno));
      const auto now = clock::now();
      const std::uint64_t bytes = others_bytes();
      if (first || bytes != seen) {
        seen = bytes;
        changed = now;
      }
      if (first || now >= next_report) {
        if (on_wait) on_wait(seen);
        if (!first) next_report += report_every;
      }
      if (now - changed >= stall) {
        const long pid = lock_holder(fd_);
        const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
        const auto still = std::chrono::duration_cast<std::chrono::seconds>(now - changed).count();
        return make_error(503, codes::blob_locked,
                          what + ": another process" + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "") +
                              " is downloading it into this cache (it holds " + path.string() + ") and its download has not grown in " +
                              std::to_string(still) + " s (waited " + std::to_string(waited) +
                              " s): it may be stopped or hung; end it, or let it finish, and run the same command again");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

 private:
  int fd_ = -1;
};

// The bytes another process has of `blob` so far: baton's BLOB.part, huggingface_hub's
// BLOB.incomplete or BLOB.XXXXXXXX.incomplete (one per process since 1.x), or the finished blob.
std::uint64_t download_bytes(const fs::path& blobs, const std::string& blob) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(blobs, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool partial = name.starts_with(blob + ".") && (name.ends_with(".part") || name.ends_with(".incomplete"));
    if (!partial && name != blob) continue;
    std::error_code size_ec;
    const auto size = fs::file_size(it->path(), size_ec);
    if (!size_ec) total += size;
  }
  return total;
}

// snapshots/COMMIT/FILE → ../../blobs/HASH (one more ../ per folder in FILE), replaced atomically.
result<void> link_snapshot(const fs::path& blob, const fs::path& link) {
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  const fs::path tmp = link.string() + ".link";
  fs::remove(tmp, ec);
  fs::create_symlink(fs::relative(blob, link.parent_path()), tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) return make_error(500, codes::cannot_write, link.string() + ": " + ec.message());
  return {};
}

std::uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  return ec ? 0 : size;
}

// obj[key] when it is a string, else "" (nlohmann's value() throws on another type).
std::string string_field(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Whether a file name from the listing is a plain relative path inside the snapshot.
bool safe_relative(std::string_view name) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute() || name.find('\\') != std::string_view::npos) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".." || part == "." || part.empty(); });
}

}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return text;
}

struct hub_client::tls_context {
  std::optional<ssl::context> context;
};

hub_client::hub_client(hub_options options, http_url endpoint)
    : options_(std::move(options)), endpoint_(std::move(endpoint)), tls_(std::make_shared<tls_context>()) {}

result<hub_client> hub_client::make(hub_options options) {
  while (options.endpoint.ends_with("/")) options.endpoint.pop_back();
  std::string reason;
  auto endpoint = parse_http_url(options.endpoint, reason, true);
  if (!endpoint) return make_error(400, codes::bad_endpoint, "the hub endpoint `" + options.endpoint + "` " + reason);
  return hub_client(std::move(options), std::move(*endpoint));
}

result<hub_revision> hub_client::list(std::string_view repo, std::string_view revision) const {
  getter get(options_, endpoint_, tls_->context);
  string_sink body(max_listing_bytes), error_body(64 << 10);
  const std::string what = std::string(repo) + "@" + std::string(revision);
  const get_outcome g = get.run(options_.endpoint + "/api/models/" + percent_encode(repo, true) + "/revision/" +
                                    percent_encode(revision, false) + "?blobs=true",
                                0, body, error_body);
  if (g.failed) {
    error e = *g.failed;
    e.message = what + ": listing the files: " + e.message;
    return e;
  }
  if (g.status != 200) return status_error(options_, repo, revision, g, what, error_body.body);

  const auto j = nlohmann::json::parse(body.body, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) { return make_error(502, codes::hub_unavailable, what + ": the hub's file list " + why); };
  if (!j.is_object()) return bad("is not a JSON object");
  hub_revision out{std::string(repo), std::string(revision), string_field(j, "sha"), {}};
  if (!hf_cache::is_commit(out.commit)) return bad("has no commit `sha`");
  const auto siblings = j.find("siblings");
  if (siblings == j.end() || !siblings->is_array()) return bad("has no `siblings`");
  for (const auto& s : *siblings) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) return bad("has an entry without `rfilename`");
    hub_file f;
    f.path = s["rfilename"].get<std::string>();
    if (!safe_relative(f.path)) return bad("names `" + f.path + "`, which is not a path inside the repository");
    f.blob_id = string_field(s, "blobId");
    if (const auto lfs = s.find("lfs"); lfs != s.end() && lfs->is_object()) {
      f.sha256 = string_field(*lfs, "sha256");
      if (!hf_cache::is_lower_hex(f.sha256, 64)) return bad("has no sha256 for the LFS file " + f.path);
      const auto size = lfs->find("size");
      if (size == lfs->end() || !size->is_number_unsigned()) return bad("has no size for " + f.path);
      f.size = size->get<std::uint64_t>();
    } else {
      if (!hf_cache::is_lower_hex(f.blob_id, 40)) return bad("has no blobId for " + f.path + " (is ?blobs=true supported?)");
      if (!s.contains("size") || !s["size"].is_number_unsigned()) return bad("has no size for " + f.path);
      f.size = s["size"].get<std::uint64_t>();
    }
    out.files.push_back(std::move(f));
  }
  return out;
}

result<fs::path> hub_client::fetch(const fs::path& cache_root, const hub_revision& rev, const hub_file& file,
                                   const progress_fn& progress) const {
  const fs::path repo = hf_cache::repo_dir(cache_root, rev.repo);
  const fs::path blobs = repo / "blobs";
  const fs::path blob = blobs / file.blob_name();
  const fs::path link = repo / "snapshots" / rev.commit / file.path;
  std::error_code ec;
  // Reused as huggingface_hub reuses it: a blob of the right size is trusted (it was verified
  // when it was written). Without the lock, as there: a complete cache may be read-only.
  if (fs::is_regular_file(link, ec) && size_or_zero(link) == file.size) {
    if (progress) progress(file, fetch_stage::reused, file.size, file.size);
    return link;
  }
  blob_lock lock;
  if (auto r = lock.acquire(
          cache_root / ".locks" / repo.filename() / (file.blob_name() + ".lock"),
          [&] { return download_bytes(blobs, file.blob_name()); },
          [&](std::uint64_t others) {
            if (progress) progress(file, fetch_stage::waiting, others, 0);
          },
          options_.lock_report_every, options_.lock_stall, file.path);
      !r) {
    return r.error();
  }
  if (fs::is_regular_file(blob, ec) && size_or_zero(blob) == file.size) {
    if (auto r = link_snapshot(blob, link); !r) return r.error();
    if (progress) progress(file, fetch_stage::reused, file.size, file.size);
    return link;
  }
  fs::create_directories(blobs, ec);
  if (ec) return make_error(500, codes::cannot_write, blobs.string() + ": " + ec.message());

  const fs::path part = blob.string() + ".part";
  std::uint64_t have = size_or_zero(part);
  if (have > file.size) {
    fs::remove(part, ec);
    have = 0;
  }
  // Refused before a byte is written: a full disk found halfway wastes the transfer.
  const auto space = fs::space(blobs, ec);
  if (!ec && space.available < file.size - have) {
    return make_error(507, codes::disk_full, file.path + " needs " + format_bytes(file.size - have) + " more but " +
                                            blobs.string() + " has " + format_bytes(space.available) +
                                            " free; free space there or pull with --dir elsewhere");
  }

  part_sink sink(part, file, have, progress);
  if (auto r = sink.open_and_hash(); !r) return r.error();
  if (have < file.size) {
    getter get(options_, endpoint_, tls_->context);
    string_sink error_body(64 << 10);
    // By commit, not branch: every file of one pull comes from the same revision.
    const get_outcome g = get.run(options_.endpoint + "/" + percent_encode(rev.repo, true) + "/resolve/" + rev.commit +
                                      "/" + percent_encode(file.path, true),
                                  have, sink, error_body);
    const std::string resume = "; run the same command again to resume (" + part.string() + " keeps " +
                               format_bytes(sink.have()) + " of " + format_bytes(file.size) + ")";
    if (g.interrupted) {
      return make_error(503, codes::interrupted, file.path + ": interrupted" + resume);
    }
    if (g.failed) {
      if (g.failed->code == codes::checksum_mismatch) fs::remove(part, ec);
      if (g.failed->code != codes::hub_unavailable) return *g.failed;
      return make_error(503, codes::transfer_incomplete, file.path + ": the transfer stopped: " + g.failed->message + resume);
    }
    if (g.status != 200 && g.status != 206) {
      return status_error(options_, rev.repo, rev.revision, g, rev.repo + ": " + file.path, error_body.body);
    }
    if (!g.first_etag.empty() && g.first_etag != file.blob_name()) {
      fs::remove(part, ec);
      return make_error(502, codes::checksum_mismatch, file.path + ": the hub's ETag " + g.first_etag +
                                                      " is not the listing's " + file.blob_name() +
                                                      " (the revision changed?); nothing was kept");
    }
    if (sink.have() < file.size) {
      return make_error(503, codes::transfer_incomplete, file.path + ": the transfer ended early" + resume);
    }
  }
  if (auto r = sink.finish(); !r) return r.error();
  // Only this process wrote it, unless a filesystem granted the lock to two (flock is a no-op on
  // some network filesystems): then both appended, and neither's own count or hash shows it.
  if (const auto on_disk = size_or_zero(part); on_disk != file.size) {
    fs::remove(part, ec);
    return make_error(502, codes::checksum_mismatch, file.path + ": " + part.string() + " holds " + std::to_string(on_disk) +
                                                    " bytes, not " + std::to_string(file.size) +
                                                    " (another process wrote to it too: does this filesystem honour flock?); it was deleted, run the command again");
  }
  if (!file.sha256.empty()) {
    const std::string got = sink.digest();
    if (got != "sha256:" + file.sha256) {
      fs::remove(part, ec);
      return make_error(502, codes::checksum_mismatch, file.path + ": its sha256 is " + got.substr(7) + ", not the hub's " +
                                                      file.sha256 + "; the download was deleted, run the command again");
    }
  }
  fs::rename(part, blob, ec);
  if (ec) return make_error(500, codes::cannot_write, blob.string() + ": " + ec.message());
  if (auto r = link_snapshot(blob, link); !r) return r.error();
  if (progress) progress(file, fetch_stage::verified, file.size, 0);
  return link;
}

result<void> hub_client::write_ref(const fs::path& cache_root, const hub_revision& rev) {
  if (rev.revision == rev.commit) return {};
  const auto ref = hf_cache::ref_file(hf_cache::repo_dir(cache_root, rev.repo), rev.revision);
  if (!ref) return make_error(400, codes::bad_revision, "revision `" + rev.revision + "` cannot name a refs/ file");
  std::error_code ec;
  fs::create_directories(ref->parent_path(), ec);
  // A name of this process's own: two pulls of one revision write the ref at once.
  const fs::path tmp = ref->string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << rev.commit;
    if (!out.flush()) return make_error(500, codes::cannot_write, tmp.string() + ": cannot write");
  }
  fs::rename(tmp, *ref, ec);
  if (ec) return make_error(500, codes::cannot_write, ref->string() + ": " + ec.message());
  return {};
}

}  // namespace baton::hub
