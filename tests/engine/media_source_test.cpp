// Loading media bytes: inline base64, local files under the roots (escapes by `..` and symbolic
// links refused), and http(s) URLs from a real server on 127.0.0.1 (off by default, allowed hosts,
// size and time limits). Nothing here touches another machine.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "support/test_certificates.hpp"
#include "engine/media/source.hpp"
#include "support/scratch_dir.hpp"

namespace baton::media {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

media_item item_of(std::string data, media_source source) {
  media_item m;
  m.source = source;
  m.data = std::move(data);
  return m;
}

media_item path_item(const std::string& p) { return item_of(p, media_source::path); }
media_item url_item(const std::string& u) { return item_of(u, media_source::url); }

std::string text_of(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// The bytes as text, or the error's message with a failure.
std::string loaded(const media_item& item, const source_policy& policy) {
  auto r = load_bytes(item, policy, "images[0]");
  EXPECT_TRUE(r.has_value()) << item.data << ": " << (r ? "" : r.error().message);
  return r ? text_of(*r) : std::string();
}

// The refusal, checked for its status, code, the item's name and a phrase.
void expect_refusal(const result<std::vector<std::byte>>& r, int status, const std::string& code, const std::string& phrase,
                    const std::string& where = "images[2]") {
  ASSERT_FALSE(r.has_value()) << "loaded " << r->size() << " bytes";
  EXPECT_EQ(r.error().status, status) << r.error().message;
  EXPECT_EQ(r.error().code, code) << r.error().message;
  EXPECT_TRUE(r.error().message.starts_with(where + ": ")) << r.error().message;
  EXPECT_NE(r.error().message.find(phrase), std::string::npos) << r.error().message;
}

// ---- inline and raw

TEST(media_source, inline_base64_in_both_forms) {
  auto parsed = parse_request(R"({"state":"s","questions":{"q":{"type":"noul"}},
      "images":["data:image/png;base64,aGVsbG8=",{"content_type":"image/png","base64":"d29ybGQ="}]})",
                              request_limits{});
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(loaded(parsed->images[0], {}), "hello");
  EXPECT_EQ(loaded(parsed->images[1], {}), "world");
}

TEST(media_source, inline_base64_that_is_not_valid_or_too_large) {
  media_item bad = item_of("data:image/png;base64,aGVs bG8", media_source::inline_base64);
  bad.payload_offset = bad.data.find(',') + 1;
  expect_refusal(load_bytes(bad, {}, "images[2]"), 422, "INVALID_MEDIA", "character 4 is byte 32, not base64");
  const media_item ok = item_of("aGVsbG8=", media_source::inline_base64);
  source_policy small;
  small.max_bytes = 4;
  expect_refusal(load_bytes(ok, small, "images[2]"), 413, "MEDIA_TOO_LARGE", "more than 4 bytes");
  small.max_bytes = 5;
  EXPECT_EQ(loaded(ok, small), "hello");
}

TEST(media_source, raw_items_are_not_loaded_but_checked) {
  raw_media image;
  image.pixels.assign(2 * 3 * 3, 1);
  image.frames = 1;
  image.height = 2;
  image.width = 3;
  expect_refusal(load_bytes(raw_item(image), {}, "images[2]"), 422, "MEDIA_SOURCE_REFUSED", "raw media");
  EXPECT_TRUE(check_raw(image, "images", "images[0]").has_value());
  EXPECT_TRUE(check_raw(image, "videos", "videos[0]").has_value());

  auto refused = [](const raw_media& m, const char* field, const std::string& phrase) {
    const auto r = check_raw(m, field, "x[1]");
    ASSERT_FALSE(r.has_value()) << phrase;
    EXPECT_EQ(r.error().code, "INVALID_MEDIA");
    EXPECT_TRUE(r.error().message.starts_with("x[1]: ")) << r.error().message;
    EXPECT_NE(r.error().message.find(phrase), std::string::npos) << r.error().message;
  };
  raw_media short_pixels = image;
  short_pixels.pixels.pop_back();
  refused(short_pixels, "images", "17 bytes of pixels are not 1 × 2 × 3 × 3");
  raw_media two_frames = image;
  two_frames.frames = 2;
  two_frames.pixels.resize(36);
  refused(two_frames, "images", "one frame");
  EXPECT_TRUE(check_raw(two_frames, "videos", "videos[0]").has_value());
  raw_media huge = image;
  huge.frames = huge.height = huge.width = std::int64_t{1} << 40;  // the product overflows
  refused(huge, "videos", "are not");
  raw_media negative = image;
  negative.height = -2;
  refused(negative, "videos", "at least 1");

  raw_media pcm;
  pcm.audio = {0.0f, -0.5f, 0.25f};
  EXPECT_TRUE(check_raw(pcm, "audio", "audio[0]").has_value());
  refused(raw_media{}, "audio", "no samples");
  refused(image, "audio", "samples only");
  refused(pcm, "images", "at least 1");
  raw_media nan = pcm;
  nan.audio[1] = std::nanf("");
  refused(nan, "audio", "finite");
  raw_media soundtrack = two_frames;
  soundtrack.audio = pcm.audio;
  EXPECT_TRUE(check_raw(soundtrack, "videos", "videos[0]").has_value());
  refused(soundtrack, "images", "one frame");
}

// ---- local files

class media_paths : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root() / "sub");
    fs::create_directories(outside());
    write(root() / "a.png", "hello");
    write(root() / "sub" / "b.wav", "sound");
    write(outside() / "secret", "secret");
    fs::create_symlink(outside() / "secret", root() / "link");
    fs::create_directory_symlink(outside(), root() / "dirlink");
    fs::create_symlink(root() / "a.png", root() / "inlink");
    policy_.roots = {root()};
  }

  static void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  fs::path root() const { return base_ / "root"; }
  fs::path outside() const { return base_ / "outside"; }
  result<std::vector<std::byte>> load(const std::string& p) const { return load_bytes(path_item(p), policy_, "images[2]"); }

  const test::scratch_dir base_{"baton-media"};
  source_policy policy_;
};

TEST_F(media_paths, relative_and_absolute_paths_under_the_root) {
  EXPECT_EQ(loaded(path_item("a.png"), policy_), "hello");
  EXPECT_EQ(loaded(path_item("sub/b.wav"), policy_), "sound");
  EXPECT_EQ(loaded(path_item("sub/../a.png"), policy_), "hello");
  EXPECT_EQ(loaded(path_item("./sub//b.wav"), policy_), "sound");
  EXPECT_EQ(loaded(path_item((root() / "a.png").string()), policy_), "hello");
  EXPECT_EQ(loaded(path_item("inlink"), policy_), "hello");  // a link that stays inside
  // The root itself may be named through a link, or with `..` in it.
  fs::create_directory_symlink(root(), base_ / "root-link");
  policy_.roots = {base_ / "root-link", base_ / "outside" / ".." / "root"};
  EXPECT_EQ(loaded(path_item("a.png"), policy_), "hello");
  EXPECT_EQ(loaded(path_item((base_ / "root-link" / "sub" / "b.wav").string()), policy_), "sound");
}

TEST_F(media_paths, escapes_by_dots_or_links_are_refused) {
  for (const std::string& p : std::vector<std::string>{"../outside/secret", "sub/../../outside/secret", "link", "dirlink/secret",
                              (outside() / "secret").string(), "/etc/passwd", ".."}) {
    SCOPED_TRACE(p);
    expect_refusal(load(p), 422, "MEDIA_SOURCE_REFUSED", "is outside the directories media may be read from");
  }
  // Outside the root, a file that is not there reads the same as one that is: no oracle.
  expect_refusal(load("../outside/no-such-file"), 422, "MEDIA_SOURCE_REFUSED", "is outside");
}

TEST_F(media_paths, missing_files_directories_and_fifos) {
  expect_refusal(load("nope.png"), 422, "MEDIA_UNAVAILABLE", "no file `nope.png` in the directories media may be read from");
  expect_refusal(load("sub"), 422, "MEDIA_UNAVAILABLE", "`sub` is a directory");
  expect_refusal(load("."), 422, "MEDIA_UNAVAILABLE", "is a directory");
  ASSERT_EQ(::mkfifo((root() / "pipe").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  expect_refusal(load("pipe"), 422, "MEDIA_UNAVAILABLE", "`pipe` is not a regular file");  // and no wait for a writer
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  write(root() / "unreadable", "x");
  fs::permissions(root() / "unreadable", fs::perms::none);
  if (::geteuid() != 0) expect_refusal(load("unreadable"), 422, "MEDIA_UNAVAILABLE", "cannot open `unreadable`");
}

TEST_F(media_paths, the_size_cap) {
  policy_.max_bytes = 4;
  expect_refusal(load("a.png"), 413, "MEDIA_TOO_LARGE", "more than 4 bytes");
  policy_.max_bytes = 5;
  EXPECT_EQ(loaded(path_item("a.png"), policy_), "hello");
  write(root() / "empty", "");
  EXPECT_EQ(loaded(path_item("empty"), policy_), "");
}

TEST_F(media_paths, roots_are_tried_in_order) {
  const fs::path second = base_ / "second";
  fs::create_directories(second);
  write(second / "only-here.png", "second");
  write(second / "a.png", "shadowed");
  policy_.roots = {base_ / "gone", root(), second};  // a root that does not exist holds nothing
  EXPECT_EQ(loaded(path_item("only-here.png"), policy_), "second");
  EXPECT_EQ(loaded(path_item("a.png"), policy_), "hello");
  // An absolute path under any root.
  EXPECT_EQ(loaded(path_item((second / "a.png").string()), policy_), "shadowed");
}

TEST_F(media_paths, local_paths_are_off_without_roots) {
  policy_.roots.clear();
  expect_refusal(load("a.png"), 422, "MEDIA_SOURCE_REFUSED", "local paths are not enabled");
  expect_refusal(load((root() / "a.png").string()), 422, "MEDIA_SOURCE_REFUSED", "local paths are not enabled");
}

// ---- URLs

// A server on 127.0.0.1 that answers each path with its reply, one connection at a time; with a
// TLS context it speaks https. `hang` never answers; `trickle` sends a byte every 50 ms. Both stop
// when the server does, so a test never waits on them.
class media_server {
 public:
  struct reply {
    int status = 200;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    bool chunked = false;
    bool hang = false;
    bool trickle = false;
  };

  explicit media_server(std::map<std::string, reply> routes, net::ssl::context* tls = nullptr)
      : routes_(std::move(routes)), tls_(tls), acceptor_(io_, {net::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] { serve(); });
  }
  ~media_server() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    beast::error_code ec;
    tcp::socket wake(io_);
    wake.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::string url(const std::string& host = "127.0.0.1") const {
    return (tls_ ? "https://" : "http://") + host + ":" + std::to_string(acceptor_.local_endpoint().port());
  }
  int connections() const { return connections_; }
  int requests() const { return requests_; }
  std::string last_host() const {
    const std::lock_guard lock(mutex_);
    return last_host_;
  }
  std::string server_name() const {
    const std::lock_guard lock(mutex_);
    return server_name_;
  }

 private:
  void serve() {
    for (;;) {
      tcp::socket s(io_);
      beast::error_code ec;
      acceptor_.accept(s, ec);
      if (ec || stopped()) return;
      ++connections_;
      if (!tls_) {
        talk(s);
        continue;
      }
      net::ssl::stream<tcp::socket> tls(std::move(s), *tls_);
      tls.handshake(net::ssl::stream_base::server, ec);
      if (ec) continue;  // the client refused the certificate
      {
        const std::lock_guard lock(mutex_);
        const char* name = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
        server_name_ = name ? name : "";
      }
      talk(tls);
    }
  }

  bool stopped() {
    const std::lock_guard lock(mutex_);
    return stopping_;
  }
  // Waits `d`, or less when the server stops; true when it stopped.
  bool wait(std::chrono::milliseconds d) {
    std::unique_lock lock(mutex_);
    return stop_cv_.wait_for(lock, d, [&] { return stopping_; });
  }

  template <class Stream>
  void talk(Stream& s) {
    beast::error_code ec;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::read(s, buffer, req, ec);
    if (ec) return;
    ++requests_;
    {
      const std::lock_guard lock(mutex_);
      last_host_ = std::string(req[http::field::host]);
    }
    const auto it = routes_.find(std::string(req.target()));
    reply r;
    if (it != routes_.end()) {
      r = it->second;
    } else {
      r.status = 404;
      r.body = "no such route";
    }
    if (r.hang) {
      wait(10s);
      return;
    }
    if (r.trickle) {
      const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
      net::write(s, net::buffer(head), ec);
      for (int i = 0; i < 1000 && !ec && !wait(50ms); ++i) net::write(s, net::buffer("x", 1), ec);
      return;
    }
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.body() = r.body;
    if (r.chunked) {
      res.chunked(true);
    } else {
      res.prepare_payload();
    }
    http::write(s, res, ec);
  }

  std::map<std::string, reply> routes_;
  net::ssl::context* tls_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  mutable std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::string last_host_;
  std::string server_name_;
};

media_server::reply answer(int status, std::string body, bool chunked = false) {
  media_server::reply r;
  r.status = status;
  r.body = std::move(body);
  r.chunked = chunked;
  return r;
}

media_server::reply redirect(std::string to) {
  media_server::reply r = answer(302, "");
  r.headers.emplace_back("Location", std::move(to));
  return r;
}

media_server::reply slow(bool hang) {
  media_server::reply r;
  (hang ? r.hang : r.trickle) = true;
  return r;
}

source_policy url_policy(std::vector<std::string> hosts = {"127.0.0.1"}) {
  source_policy p;
  p.urls = true;
  p.url_hosts = std::move(hosts);
  p.url_timeout = 2s;
  return p;
}

const std::string payload(3000, 'p');

TEST(media_urls, are_off_by_default) {
  media_server server({{"/a.png", answer(200, payload)}});
  expect_refusal(load_bytes(url_item(server.url() + "/a.png"), {}, "images[2]"), 422, "MEDIA_SOURCE_REFUSED",
                 "URLs are not enabled");
  source_policy hosts_only;
  hosts_only.url_hosts = {"127.0.0.1"};  // hosts without `urls` enable nothing
  expect_refusal(load_bytes(url_item(server.url() + "/a.png"), hosts_only, "images[2]"), 422, "MEDIA_SOURCE_REFUSED",
                 "URLs are not enabled");
  EXPECT_EQ(server.connections(), 0);
}

TEST(media_urls, only_from_allowed_hosts) {
  media_server server({{"/a.png", answer(200, payload)}});
  for (const auto& hosts : {std::vector<std::string>{}, std::vector<std::string>{"localhost", "127.0.0.2", "127.0.0"}}) {
    expect_refusal(load_bytes(url_item(server.url() + "/a.png"), url_policy(hosts), "images[2]"), 422,
                   "MEDIA_SOURCE_REFUSED", "host `127.0.0.1` is not one media may be loaded from");
  }
  expect_refusal(load_bytes(url_item("ftp://127.0.0.1/a.png"), url_policy(), "images[2]"), 422, "MEDIA_SOURCE_REFUSED",
                 "must be an http:// or https://");
  EXPECT_EQ(server.connections(), 0);
}

TEST(media_urls, loads_the_body_of_a_200) {
  media_server server({{"/a.png?size=big", answer(200, payload)}, {"/c.wav", answer(200, "chunks", true)}});
  EXPECT_EQ(loaded(url_item(server.url() + "/a.png?size=big"), url_policy()), payload);
  EXPECT_EQ(server.last_host(), "127.0.0.1:" + server.url().substr(server.url().rfind(':') + 1));
  EXPECT_EQ(loaded(url_item(server.url() + "/c.wav"), url_policy()), "chunks");
  // Host names compare without case.
  EXPECT_EQ(loaded(url_item(server.url("localhost") + "/c.wav"), url_policy({"LocalHost"})), "chunks");
  EXPECT_EQ(server.requests(), 3);
}

TEST(media_urls, statuses_other_than_200_and_redirects) {
  media_server server({{"/gone", answer(410, "gone")}, {"/moved", redirect("/a.png")}, {"/a.png", answer(200, payload)}});
  expect_refusal(load_bytes(url_item(server.url() + "/missing.png"), url_policy(), "images[2]"), 422, "MEDIA_UNAVAILABLE",
                 "/missing.png` answered 404, not 200");
  expect_refusal(load_bytes(url_item(server.url() + "/gone"), url_policy(), "images[2]"), 422, "MEDIA_UNAVAILABLE",
                 "answered 410");
  expect_refusal(load_bytes(url_item(server.url() + "/moved"), url_policy(), "images[2]"), 422, "MEDIA_SOURCE_REFUSED",
                 "answered 302, a redirect; redirects are not followed");
  EXPECT_EQ(server.requests(), 3);  // the redirect's target was not asked for
}

TEST(media_urls, bodies_over_the_size_cap) {
  media_server server({{"/big", answer(200, payload)}, {"/big-chunked", answer(200, payload, true)}});
  auto p = url_policy();
  p.max_bytes = 2999;
  expect_refusal(load_bytes(url_item(server.url() + "/big"), p, "images[2]"), 413, "MEDIA_TOO_LARGE", "more than 2999 bytes");
  expect_refusal(load_bytes(url_item(server.url() + "/big-chunked"), p, "images[2]"), 413, "MEDIA_TOO_LARGE",
                 "more than 2999 bytes");
  p.max_bytes = 3000;
  EXPECT_EQ(loaded(url_item(server.url() + "/big-chunked"), p), payload);
}

// The timeout bounds the whole load, not each read: a server that sends a byte every 50 ms is cut
// off as surely as one that never answers.
TEST(media_urls, slow_servers_hit_the_timeout) {
  media_server server({{"/hang", slow(true)}, {"/trickle", slow(false)}});
  auto p = url_policy();
  p.url_timeout = 300ms;
  for (const char* path : {"/hang", "/trickle"}) {
    SCOPED_TRACE(path);
    const auto start = std::chrono::steady_clock::now();
    expect_refusal(load_bytes(url_item(server.url() + path), p, "videos[1]"), 504, "MEDIA_TIMEOUT",
                   "was not loaded within 300 ms", "videos[1]");
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, 250ms);
    EXPECT_LT(took, 1500ms);
  }
}

TEST(media_urls, nothing_listening) {
  tcp::endpoint closed;
  {
    net::io_context io;
    tcp::acceptor a(io, {net::ip::make_address("127.0.0.1"), 0});
    closed = a.local_endpoint();
  }
  expect_refusal(load_bytes(url_item("http://127.0.0.1:" + std::to_string(closed.port()) + "/a.png"), url_policy(), "images[2]"),
                 422, "MEDIA_UNAVAILABLE", "connecting for");
}

class media_https : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "ca.pem") << ca_.cert_pem();
    const test::key_pair leaf = ca_.leaf("DNS:localhost,IP:127.0.0.1");
    server_tls_.use_certificate_chain(net::buffer(leaf.cert_pem));
    server_tls_.use_private_key(net::buffer(leaf.key_pem), net::ssl::context::pem);
  }
  const test::scratch_dir dir_{"baton-media-tls"};
  test::test_ca ca_;
  net::ssl::context server_tls_{net::ssl::context::tls_server};
};

TEST_F(media_https, the_peer_is_verified_with_sni) {
  media_server server({{"/a.png", answer(200, payload)}}, &server_tls_);
  auto p = url_policy({"localhost"});
  p.ca_file = dir_ / "ca.pem";
  EXPECT_EQ(loaded(url_item(server.url("localhost") + "/a.png"), p), payload);
  EXPECT_EQ(server.server_name(), "localhost");
  // Without the private CA, the system's do not trust it.
  p.ca_file.clear();
  expect_refusal(load_bytes(url_item(server.url("localhost") + "/a.png"), p, "images[2]"), 422, "MEDIA_UNAVAILABLE",
                 "certificate verify failed");
  EXPECT_EQ(server.requests(), 1);
}

// The CAs of a ca_file are loaded once and serve every later item; CAs that do not load are
// tried again, and refused again, on the next.
TEST_F(media_https, the_cas_serve_every_item) {
  media_server server({{"/a.png", answer(200, payload)}}, &server_tls_);
  auto p = url_policy({"localhost"});
  p.ca_file = dir_ / "ca.pem";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(loaded(url_item(server.url("localhost") + "/a.png"), p), payload);
  p.ca_file = dir_ / "missing.pem";
  for (int i = 0; i < 2; ++i) {
    expect_refusal(load_bytes(url_item(server.url("localhost") + "/a.png"), p, "images[2]"), 422, "MEDIA_UNAVAILABLE",
                   "the CA certificates for https do not load");
  }
  EXPECT_EQ(server.requests(), 3);
}

}  // namespace
}  // namespace baton::media
