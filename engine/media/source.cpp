#include "engine/media/source.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/string.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "core/base64.hpp"
#include "core/error_codes.hpp"
#include "core/http_client.hpp"
#include "core/http_url.hpp"

namespace baton::media {

namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using clock_type = std::chrono::steady_clock;

error fail(int status, const char* code, std::string_view where, const std::string& what) {
  return make_error(status, code, std::string(where) + ": " + what);
}

error refused(std::string_view where, const std::string& what) { return fail(422, codes::media_source_refused, where, what); }
error unavailable(std::string_view where, const std::string& what) { return fail(422, codes::media_unavailable, where, what); }
error too_large(std::string_view where, std::size_t limit) {
  return fail(413, codes::media_too_large, where, "more than " + std::to_string(limit) + " bytes, the limit");
}

// ---- local files

// Whether `p` is `root` or below it; both canonical.
bool within(const fs::path& p, const fs::path& root) {
  auto r = root.begin();
  auto q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (r->empty()) continue;  // a trailing separator
    if (q == p.end() || *q != *r) return false;
  }
  return true;
}

struct fd_closer {
  int fd;
  ~fd_closer() { ::close(fd); }
};

result<std::vector<std::byte>> read_file(const fs::path& file, const std::string& shown, std::size_t max_bytes,
                                         std::string_view where) {
  // O_NOFOLLOW: the file checked is the file read, even if a link replaced it since; O_NONBLOCK:
  // a FIFO must not block the open.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return unavailable(where, "cannot open `" + shown + "`: " + std::strerror(errno));
  const fd_closer closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return unavailable(where, "cannot read `" + shown + "`: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return unavailable(where, "`" + shown + "` is a directory");
  if (!S_ISREG(st.st_mode)) return unavailable(where, "`" + shown + "` is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) return too_large(where, max_bytes);
  // Read up to one byte past the limit: the file may have grown since fstat.
  std::vector<std::byte> out(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unavailable(where, "cannot read `" + shown + "`: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got > max_bytes) return too_large(where, max_bytes);
    if (got == out.size()) out.resize(std::min(out.size() * 2, max_bytes + 1));
  }
  out.resize(got);
  return out;
}

result<std::vector<std::byte>> load_path(const media_item& item, const source_policy& policy, std::string_view where) {
  if (policy.roots.empty()) return refused(where, "local paths are not enabled");
  const fs::path asked(item.data);
  bool outside = false;
  for (const fs::path& configured : policy.roots) {
    std::error_code ec;
    const fs::path root = fs::canonical(configured, ec);
    if (ec) continue;  // a root that is gone holds nothing
    // `..` is judged on the path as written before any file is looked at, so a reply never says
    // whether something outside the roots exists. An absolute path may name the root as
    // configured (through its links) or as resolved.
    const fs::path joined = (root / asked).lexically_normal();  // an absolute path replaces the root
    if (!within(joined, root) && !within(joined, fs::absolute(configured, ec).lexically_normal())) {
      outside = true;
      continue;
    }
    const fs::path resolved = fs::canonical(joined, ec);
    if (ec) continue;
    if (!within(resolved, root)) {  // a symbolic link out of the root
      outside = true;
      continue;
    }
    return read_file(resolved, item.data, policy.max_bytes, where);
  }
  if (outside) return refused(where, "`" + item.data + "` is outside the directories media may be read from");
  return unavailable(where, "no file `" + item.data + "` in the directories media may be read from");
}

// ---- URLs

// The client TLS context for `ca_file`, made on its first https item and shared by every later
// one (a context is safe to share once made): loading CAs, the system's bundle above all, costs
// more than many a fetch. CAs that do not load are tried again on the next item. Never freed:
// OpenSSL may be cleaned up at exit before a static would be destroyed.
boost::system::result<std::shared_ptr<net::ssl::context>> tls_for(const fs::path& ca_file) {
  struct cache {
    std::mutex m;
    std::map<fs::path, std::shared_ptr<net::ssl::context>> made;
  };
  static cache* const contexts = new cache;
  const std::lock_guard lock(contexts->m);
  if (const auto it = contexts->made.find(ca_file); it != contexts->made.end()) return it->second;
  auto made = http_client::tls_context(ca_file);
  if (!made) return made.error();
  return contexts->made.emplace(ca_file, std::make_shared<net::ssl::context>(std::move(*made))).first->second;
}

struct fetch {
  const http_url& url;
  const std::string& shown;  // the URL as the caller wrote it
  const source_policy& policy;
  std::string_view where;
  clock_type::time_point deadline;

  error transport(const http_client::failure& f) const {
    using http_client::step;
    if (f.at == step::resolve) {
      if (f.why == http_client::fault::timeout) {
        return fail(504, codes::media_timeout, where,
                    "`" + url.host + "` did not resolve within " + std::to_string(policy.url_timeout.count()) + " ms");
      }
      return unavailable(where, "`" + url.host + "` does not resolve: " + f.detail);
    }
    if (f.why == http_client::fault::timeout) {
      return fail(504, codes::media_timeout, where,
                  "`" + shown + "` was not loaded within " + std::to_string(policy.url_timeout.count()) + " ms");
    }
    if (f.why == http_client::fault::too_large) return too_large(where, policy.max_bytes);
    const char* doing = f.at == step::handshake     ? "the TLS handshake for"
                        : f.at == step::write       ? "sending the request for"
                        : f.at == step::read_header ? "reading the answer to"
                        : f.at == step::read_body   ? "reading the body of"
                                                    : "connecting for";
    return unavailable(where, std::string(doing) + " `" + shown + "` failed: " + f.detail);
  }

  // The host's addresses, then one GET on a new connection: the body of a 200, never a
  // redirect's target.
  net::awaitable<result<std::vector<std::byte>>> run() {
    const auto to = co_await http_client::resolve(url.host, url.port, deadline);
    if (!to) co_return transport(to.error());
    std::shared_ptr<net::ssl::context> tls;
    if (url.tls) {
      auto made = tls_for(policy.ca_file);
      if (!made) co_return unavailable(where, "the CA certificates for https do not load: " + made.error().message());
      tls = std::move(*made);
    }
    http_client::connection conn(co_await net::this_coro::executor, tls.get());
    if (auto c = co_await conn.connect(*to, url.host, deadline); !c) co_return transport(c.error());
    auto req = http_client::request_to(http::verb::get, url);
    req.set(http::field::user_agent, "baton");
    req.set(http::field::accept, "*/*");
    req.keep_alive(false);
    if (auto w = co_await conn.write(req); !w) co_return transport(w.error());
    http::response_parser<http::vector_body<std::byte>> parser;
    parser.body_limit(policy.max_bytes);
    if (auto h = co_await conn.read_header(parser); !h) co_return transport(h.error());
    const unsigned status = parser.get().result_int();
    if (status >= 300 && status < 400) {
      co_return refused(where, "`" + shown + "` answered " + std::to_string(status) + ", a redirect; redirects are not followed");
    }
    if (status != 200) co_return unavailable(where, "`" + shown + "` answered " + std::to_string(status) + ", not 200");
    if (auto b = co_await conn.read_body(parser); !b) co_return transport(b.error());
    co_return std::move(parser.get().body());
  }
};

result<std::vector<std::byte>> load_url(const media_item& item, const source_policy& policy, std::string_view where) {
  if (!policy.urls) return refused(where, "URLs are not enabled");
  std::string reason;
  const auto url = parse_http_url(item.data, reason, true);
  if (!url) return refused(where, "`" + item.data + "` " + reason);
  if (std::none_of(policy.url_hosts.begin(), policy.url_hosts.end(), [&](const std::string& h) { return beast::iequals(h, url->host); })) {
    return refused(where, "host `" + url->host + "` is not one media may be loaded from");
  }
  const auto deadline = clock_type::now() + policy.url_timeout;
  // Declared before the io_context: a coroutine it still holds when it is destroyed may write here.
  result<std::vector<std::byte>> out = fail(504, codes::media_timeout, where,
                                            "`" + item.data + "` was not loaded within " +
                                                std::to_string(policy.url_timeout.count()) + " ms");
  fetch f{*url, item.data, policy, where, deadline};
  net::io_context io;
  net::co_spawn(io, f.run(), [&](std::exception_ptr e, result<std::vector<std::byte>> r) {
    out = e ? unavailable(where, "loading `" + item.data + "` failed") : std::move(r);
  });
  // Every operation has the deadline; the margin only covers the last completion's scheduling.
  io.run_until(deadline + std::chrono::milliseconds(500));
  return out;
}

}  // namespace

result<std::vector<std::byte>> load_bytes(const media_item& item, const source_policy& policy, std::string_view where) {
  switch (item.source) {
    case media_source::inline_base64: {
      std::string reason;
      auto bytes = base64_decode(item.base64(), reason);
      if (!bytes) return fail(422, codes::invalid_media, where, "the base64 payload is not valid: " + reason);
      if (bytes->size() > policy.max_bytes) return too_large(where, policy.max_bytes);
      return std::move(*bytes);
    }
    case media_source::path: return load_path(item, policy, where);
    case media_source::url: return load_url(item, policy, where);
    case media_source::raw: break;
  }
  return refused(where, "raw media has no bytes to load: it is read as given");
}

result<void> check_raw(const raw_media& raw, std::string_view field, std::string_view where) {
  auto bad = [&](const std::string& what) -> result<void> { return fail(422, codes::invalid_media, where, what); };
  const bool pixels = field != "audio";
  if (!pixels) {
    if (!raw.pixels.empty() || raw.frames != 0) return bad("raw audio has samples only, no pixels");
    if (raw.audio.empty()) return bad("raw audio has no samples");
  } else {
    if (raw.frames < 1 || raw.height < 1 || raw.width < 1) {
      return bad("raw frames need frames, height and width of at least 1");
    }
    if (field == "images" && raw.frames != 1) return bad("a raw image is one frame, not " + std::to_string(raw.frames));
    if (field == "images" && !raw.audio.empty()) return bad("a raw image has no samples");
    std::uint64_t expected = 3;
    bool overflow = false;
    for (const std::int64_t d : {raw.frames, raw.height, raw.width}) {
      overflow |= __builtin_mul_overflow(expected, static_cast<std::uint64_t>(d), &expected);
    }
    if (overflow || expected != raw.pixels.size()) {
      return bad(std::to_string(raw.pixels.size()) + " bytes of pixels are not " + std::to_string(raw.frames) + " × " +
                 std::to_string(raw.height) + " × " + std::to_string(raw.width) + " × 3");
    }
  }
  if (!std::all_of(raw.audio.begin(), raw.audio.end(), [](float x) { return std::isfinite(x); })) {
    return bad("raw samples must be finite");
  }
  return {};
}

}  // namespace baton::media
