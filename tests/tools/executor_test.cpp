#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/http_url.hpp"
#include "tools/executor.hpp"
#include "tools/executor_kinds.hpp"

namespace baton::tools {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

tool tool_with(json executor) {
  tool t;
  t.id = "refund_payment";
  t.description = "Refund a charge";
  t.executor = std::move(executor);
  return t;
}

tool_call sample_call() { return {"d-1", "refund_payment", json{{"reason", "duplicate"}, {"notify", true}}}; }

json sample_call_json() {
  return json::parse(R"({"decision":"d-1","tool":"refund_payment","arguments":{"reason":"duplicate","notify":true}})");
}

json command(std::vector<std::string> argv, int timeout_ms = 5000) {
  return json{{"type", "command"}, {"argv", std::move(argv)}, {"timeout_ms", timeout_ms}};
}

// No child of this process is left, running or unreaped: this test binary starts children only
// through the executors.
bool no_children_left() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

// A tiny HTTP/1.1 server on 127.0.0.1, one thread per connection, answering by path.
class test_server {
 public:
  test_server() : acceptor_(ioc_, {net::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] { accept_loop(); });
  }

  ~test_server() {
    stopping_ = true;
    tcp::socket wake(ioc_);
    beast::error_code ec;
    wake.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
    for (std::thread& t : connections_) t.join();
  }

  std::string url(std::string_view path) const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + std::string(path);
  }

  int hits(const std::string& path) {
    std::lock_guard lock(mutex_);
    return hits_[path];
  }

  http::request<http::string_body> last_request() {
    std::lock_guard lock(mutex_);
    return last_;
  }

 private:
  void accept_loop() {
    for (;;) {
      tcp::socket s(ioc_);
      beast::error_code ec;
      acceptor_.accept(s, ec);
      if (stopping_ || ec) return;
      std::lock_guard lock(mutex_);
      connections_.emplace_back([this, s = std::move(s)]() mutable { serve(std::move(s)); });
    }
  }

  void serve(tcp::socket s) {
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    beast::error_code ec;
    http::read(s, buffer, req, ec);
    if (ec) return;
    const std::string path(req.target());
    int n;
    {
      std::lock_guard lock(mutex_);
      n = ++hits_[path];
      last_ = req;
    }
    http::response<http::string_body> res;
    res.version(11);
    res.keep_alive(false);
    auto answer = [&](http::status status, std::string body, const char* type) {
      res.result(status);
      res.set(http::field::content_type, type);
      res.body() = std::move(body);
    };
    if (path == "/echo") {
      answer(http::status::ok, req.body(), "application/json");
    } else if (path == "/text") {
      answer(http::status::ok, "plain words", "text/plain");
    } else if (path == "/flaky") {
      if (n == 1) answer(http::status::internal_server_error, "busy", "text/plain");
      else answer(http::status::ok, R"({"refunded":true})", "application/json");
    } else if (path == "/down") {
      answer(http::status::service_unavailable, "down", "text/plain");
    } else if (path == "/missing") {
      answer(http::status::not_found, "no such tool", "text/plain");
    } else if (path == "/huge") {
      answer(http::status::ok, std::string(4096, 'x'), "text/plain");
    } else if (path == "/slow") {
      // No answer: wait until the client gives up and closes, 5 s at most.
      const timeval five{5, 0};
      ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &five, sizeof five);
      char c;
      s.read_some(net::buffer(&c, 1), ec);
      return;
    } else {
      answer(http::status::bad_request, "unknown path", "text/plain");
    }
    res.prepare_payload();
    http::write(s, res, ec);
    s.shutdown(tcp::socket::shutdown_both, ec);
  }

  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stopping_ = false;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::thread> connections_;
  std::map<std::string, int> hits_;
  http::request<http::string_body> last_;
};

// A port nothing listens on: bound, then released.
unsigned short closed_port() {
  net::io_context ioc;
  tcp::acceptor a(ioc, {net::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

class executor_test : public ::testing::Test {
 protected:
  tool_outcome run(const json& config, executor_limits limits = {}, tool_call call = sample_call()) {
    const auto e = make_executor(tool_with(config), ioc_.get_executor(), limits);
    return run(*e, std::move(call));
  }

  // Runs one call and the I/O context until no work is left (10 s at most).
  tool_outcome run(executor& e, tool_call call) {
    int calls = 0;
    tool_outcome got;
    e.run(std::move(call), [&](tool_outcome o) {
      ++calls;
      got = std::move(o);
    });
    EXPECT_EQ(calls, 0) << "done is called from the I/O context, never inside run()";
    ioc_.restart();
    ioc_.run_for(10s);
    EXPECT_TRUE(ioc_.stopped()) << "the run left work behind";
    EXPECT_EQ(calls, 1);
    return got;
  }

  net::io_context ioc_;
};

TEST(http_url, splits_host_port_and_target) {
  std::string reason;
  auto u = parse_http_url("http://127.0.0.1:8081/refunds?x=1", reason);
  ASSERT_TRUE(u) << reason;
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8081");
  EXPECT_EQ(u->host_header, "127.0.0.1:8081");
  EXPECT_EQ(u->target, "/refunds?x=1");
  u = parse_http_url("http://[::1]/", reason);
  ASSERT_TRUE(u) << reason;
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->host_header, "[::1]");
  u = parse_http_url("http://tools.internal?q=1", reason);
  ASSERT_TRUE(u) << reason;
  EXPECT_EQ(u->target, "/?q=1");
  EXPECT_FALSE(u->tls);
  EXPECT_FALSE(parse_http_url("https://tools.internal/", reason));
  EXPECT_NE(reason.find("no TLS"), std::string::npos);
  // Only the systemone engine asks for https.
  u = parse_http_url("https://models.internal/big", reason, true);
  ASSERT_TRUE(u) << reason;
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(u->host_header, "models.internal");
  EXPECT_EQ(u->target, "/big");
  u = parse_http_url("https://[::1]:8443", reason, true);
  ASSERT_TRUE(u) << reason;
  EXPECT_EQ(u->port, "8443");
  EXPECT_FALSE(parse_http_url("ftp://models.internal/", reason, true));
  EXPECT_EQ(reason, "must be an http:// or https://host[:port]/path URL");
}

TEST(executor_output, text_that_is_not_json_is_kept_as_valid_utf8) {
  EXPECT_EQ(detail::output_from_text("a\xe2\x82z"), json("a\xef\xbf\xbdz"));
  EXPECT_EQ(detail::output_from_text(" {\"a\": 1}\n"), json::parse(R"({"a":1})"));
  EXPECT_EQ(detail::output_from_text("not json\n"), json("not json\n"));
}

TEST_F(executor_test, agent_tools_are_not_run_by_baton) {
  const auto e = make_executor(tool_with(json{{"type", "agent"}}), ioc_.get_executor(), {});
  EXPECT_EQ(e->kind(), "agent");
  EXPECT_TRUE(e->agent_runs());
  const tool_outcome o = run(*e, sample_call());
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error_code, "EXECUTOR_NOT_RUNNABLE");
  EXPECT_EQ(o.attempts, 0);
}

TEST_F(executor_test, http_posts_the_call_and_reads_a_json_answer) {
  test_server server;
  const auto e =
      make_executor(tool_with(json{{"type", "http"}, {"url", server.url("/echo")}}), ioc_.get_executor(), {});
  EXPECT_EQ(e->kind(), "http");
  EXPECT_FALSE(e->agent_runs());
  const tool_outcome o = run(*e, sample_call());
  EXPECT_TRUE(o.ok) << o.error_code << ": " << o.detail;
  EXPECT_EQ(o.error_code, "");
  EXPECT_EQ(o.output, sample_call_json());  // the server echoes the request body
  EXPECT_EQ(o.attempts, 1);
  EXPECT_GT(o.duration_ms, 0);
  const auto req = server.last_request();
  EXPECT_EQ(req.method(), http::verb::post);
  EXPECT_EQ(req[http::field::content_type], "application/json");
  EXPECT_EQ(req[http::field::host], server.url("").substr(7));
}

TEST_F(executor_test, http_text_answers_are_strings) {
  test_server server;
  const tool_outcome o = run(json{{"type", "http"}, {"url", server.url("/text")}});
  EXPECT_TRUE(o.ok) << o.detail;
  EXPECT_EQ(o.output, json("plain words"));
}

TEST_F(executor_test, http_retries_a_5xx_after_a_backoff) {
  test_server server;
  const tool_outcome o = run(json{{"type", "http"}, {"url", server.url("/flaky")}, {"retries", 2}});
  EXPECT_TRUE(o.ok) << o.detail;
  EXPECT_EQ(o.output, json::parse(R"({"refunded":true})"));
  EXPECT_EQ(o.attempts, 2);
  EXPECT_EQ(server.hits("/flaky"), 2);
  EXPECT_GE(o.duration_ms, 100);  // the backoff before the second attempt
}

TEST_F(executor_test, http_gives_up_when_the_retries_are_spent) {
  test_server server;
  const tool_outcome o = run(json{{"type", "http"}, {"url", server.url("/down")}, {"retries", 2}});
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error_code, "EXECUTOR_HTTP_STATUS");
  EXPECT_EQ(o.detail, "HTTP 503 Service Unavailable: down (3 attempts)");
  EXPECT_EQ(o.attempts, 3);
  EXPECT_EQ(server.hits("/down"), 3);
  EXPECT_TRUE(o.output.is_null());
}

TEST_F(executor_test, http_does_not_retry_a_4xx) {
  test_server server;
  const tool_outcome o = run(json{{"type", "http"}, {"url", server.url("/missing")}, {"retries", 3}});
  EXPECT_EQ(o.error_code, "EXECUTOR_HTTP_STATUS");
  EXPECT_EQ(o.detail, "HTTP 404 Not Found: no such tool");
  EXPECT_EQ(o.attempts, 1);
  EXPECT_EQ(server.hits("/missing"), 1);
}

TEST_F(executor_test, http_times_out) {
  test_server server;
  const tool_outcome o = run(json{{"type", "http"}, {"url", server.url("/slow")}, {"timeout_ms", 200}});
  EXPECT_EQ(o.error_code, "EXECUTOR_TIMEOUT");
  EXPECT_EQ(o.detail, "no answer within 200 ms");
  EXPECT_EQ(o.attempts, 1);
  EXPECT_GE(o.duration_ms, 190);
  EXPECT_LT(o.duration_ms, 3000);
}

TEST_F(executor_test, http_timeout_defaults_to_the_limits_and_is_retried) {
  test_server server;
  executor_limits limits;
  limits.default_timeout = 150ms;
  const tool_outcome o = run(json{{"type", "http"}, {"url", server.url("/slow")}, {"retries", 1}}, limits);
  EXPECT_EQ(o.error_code, "EXECUTOR_TIMEOUT");
  EXPECT_EQ(o.detail, "no answer within 150 ms (2 attempts)");
  EXPECT_EQ(o.attempts, 2);
  EXPECT_EQ(server.hits("/slow"), 2);
}

TEST_F(executor_test, http_body_over_the_limit_is_refused) {
  test_server server;
  executor_limits limits;
  limits.max_output_bytes = 1000;
  const tool_outcome o = run(json{{"type", "http"}, {"url", server.url("/huge")}, {"retries", 2}}, limits);
  EXPECT_EQ(o.error_code, "EXECUTOR_OUTPUT_TOO_LARGE");
  EXPECT_EQ(o.attempts, 1);
  EXPECT_TRUE(o.output.is_null());
}

TEST_F(executor_test, http_closed_port_is_unreachable) {
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/x";
  const tool_outcome o = run(json{{"type", "http"}, {"url", url}, {"retries", 1}});
  EXPECT_EQ(o.error_code, "EXECUTOR_UNREACHABLE");
  EXPECT_NE(o.detail.find("cannot connect to 127.0.0.1:"), std::string::npos) << o.detail;
  EXPECT_EQ(o.attempts, 2);
}

TEST_F(executor_test, configs_that_skipped_the_registry_fail_as_values) {
  const auto e = make_executor(tool_with(json{{"type", "http"}, {"url", "https://x/"}}), ioc_.get_executor(), {});
  EXPECT_EQ(e->kind(), "http");
  tool_outcome o = run(*e, sample_call());
  EXPECT_EQ(o.error_code, "EXECUTOR_UNREACHABLE");
  EXPECT_NE(o.detail.find("no TLS"), std::string::npos) << o.detail;
  o = run(json{{"type", "command"}});
  EXPECT_EQ(o.error_code, "EXECUTOR_SPAWN_FAILED");
  EXPECT_EQ(o.detail, "the executor has no argv");
  const auto unknown = make_executor(tool_with(json{{"type", "grpc"}}), ioc_.get_executor(), {});
  EXPECT_FALSE(unknown->agent_runs());
  EXPECT_EQ(run(*unknown, sample_call()).error_code, "EXECUTOR_NOT_RUNNABLE");
}

TEST_F(executor_test, command_stdout_is_the_output) {
  const auto e = make_executor(tool_with(command({"/bin/echo", "hello"})), ioc_.get_executor(), {});
  EXPECT_EQ(e->kind(), "command");
  const tool_outcome o = run(*e, sample_call());
  EXPECT_TRUE(o.ok) << o.error_code << ": " << o.detail;
  EXPECT_EQ(o.output, json("hello\n"));
  EXPECT_EQ(o.attempts, 1);
  EXPECT_TRUE(no_children_left());
}

TEST_F(executor_test, command_json_stdout_is_parsed) {
  const tool_outcome o = run(command({"/bin/sh", "-c", R"(printf '{"a": [1, 2]}\n')"}));
  EXPECT_TRUE(o.ok) << o.detail;
  EXPECT_EQ(o.output, json::parse(R"({"a":[1,2]})"));
}

TEST_F(executor_test, command_does_not_see_withheld_variables) {
  ::setenv("BATON_TEST_SECRET", "do-not-pass-0123456789", 1);
  ::setenv("BATON_TEST_VISIBLE", "visible", 1);
  executor_limits limits;
  limits.withheld_env = {"BATON_TEST_SECRET"};
  const tool_outcome o = run(command({"/bin/sh", "-c", "echo \"${BATON_TEST_SECRET:-unset} $BATON_TEST_VISIBLE\""}), limits);
  EXPECT_TRUE(o.ok) << o.detail;
  EXPECT_EQ(o.output, json("unset visible\n"));
  EXPECT_STREQ(::getenv("BATON_TEST_SECRET"), "do-not-pass-0123456789");  // baton's own stays
}

TEST_F(executor_test, command_reads_the_call_on_stdin) {
  const tool_outcome o = run(command({"cat"}));  // found on PATH
  EXPECT_TRUE(o.ok) << o.detail;
  EXPECT_EQ(o.output, sample_call_json());
}

TEST_F(executor_test, command_exit_status_with_the_stderr_tail) {
  const tool_outcome o = run(command({"/bin/sh", "-c", "echo partial; echo 'card declined' >&2; exit 3"}));
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error_code, "EXECUTOR_EXIT_STATUS");
  EXPECT_EQ(o.detail, "exit status 3; stderr: card declined");
  EXPECT_TRUE(o.output.is_null());
}

TEST_F(executor_test, command_killed_by_a_signal) {
  const tool_outcome o = run(command({"/bin/sh", "-c", "kill -TERM $$"}));
  EXPECT_EQ(o.error_code, "EXECUTOR_EXIT_STATUS");
  EXPECT_EQ(o.detail, "killed by signal 15 (SIGTERM)");
}

TEST_F(executor_test, command_long_stderr_keeps_its_tail) {
  const tool_outcome o =
      run(command({"/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do echo line $i >&2; i=$((i+1)); done; exit 1"}));
  EXPECT_EQ(o.error_code, "EXECUTOR_EXIT_STATUS");
  EXPECT_TRUE(o.detail.starts_with("exit status 1; stderr: …")) << o.detail;
  EXPECT_TRUE(o.detail.ends_with("line 298\nline 299")) << o.detail;
  EXPECT_LT(o.detail.size(), 1100u);
}

TEST_F(executor_test, command_times_out_and_is_killed) {
  const tool_outcome o = run(command({"sleep", "5"}, 200));
  EXPECT_EQ(o.error_code, "EXECUTOR_TIMEOUT");
  EXPECT_EQ(o.detail, "no answer within 200 ms; the command was killed");
  EXPECT_GE(o.duration_ms, 190);
  EXPECT_LT(o.duration_ms, 3000);
  EXPECT_TRUE(no_children_left());
}

// Gone or a zombie waiting for init: either way no longer running.
bool process_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && line.substr(paren + 2, 1) == "Z";
}

TEST_F(executor_test, command_background_child_holding_stdout_is_killed_at_the_timeout) {
  const std::string pid_file = ::testing::TempDir() + "baton_executor_background.pid";
  std::remove(pid_file.c_str());
  const tool_outcome o = run(command({"/bin/sh", "-c", "sleep 5 & echo $! > " + pid_file + "; echo started"}, 300));
  EXPECT_EQ(o.error_code, "EXECUTOR_TIMEOUT");
  EXPECT_LT(o.duration_ms, 3000);
  pid_t background = 0;
  std::ifstream(pid_file) >> background;
  std::remove(pid_file.c_str());
  ASSERT_GT(background, 0);
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (!process_ended(background) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(process_ended(background)) << "the background sleep survived its command";
}

TEST_F(executor_test, command_output_over_the_limit_is_killed) {
  executor_limits limits;
  limits.max_output_bytes = 1000;
  const tool_outcome o = run(command({"yes"}), limits);
  EXPECT_EQ(o.error_code, "EXECUTOR_OUTPUT_TOO_LARGE");
  EXPECT_EQ(o.detail, "stdout went over 1000 bytes; the command was killed");
  EXPECT_TRUE(no_children_left());
  limits.max_output_bytes = 10;
  const tool_outcome at_limit = run(command({"/bin/sh", "-c", "printf abcdefghij"}), limits);
  EXPECT_TRUE(at_limit.ok) << at_limit.detail;
  EXPECT_EQ(at_limit.output, json("abcdefghij"));
}

TEST_F(executor_test, command_that_does_not_exist_fails_to_spawn) {
  tool_outcome o = run(command({"/nonexistent/program"}));
  EXPECT_EQ(o.error_code, "EXECUTOR_SPAWN_FAILED");
  EXPECT_EQ(o.detail, "cannot start `/nonexistent/program`: No such file or directory");
  o = run(command({"baton-no-such-program"}));
  EXPECT_EQ(o.error_code, "EXECUTOR_SPAWN_FAILED");
  EXPECT_TRUE(no_children_left());
}

TEST_F(executor_test, command_does_not_inherit_baton_descriptors) {
  const int null_fd = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC, as a careless library would
  ASSERT_GE(null_fd, 0);
  const int fd = ::fcntl(null_fd, F_DUPFD, 50);
  ::close(null_fd);
  ASSERT_GE(fd, 50);
  const std::string n = std::to_string(fd);
  const std::string script =
      "[ -e /proc/self/fd/0 ] && echo stdin; [ -e /proc/self/fd/" + n + " ] && echo leaked || echo closed";
  const tool_outcome o = run(command({"/bin/sh", "-c", script}));
  ::close(fd);
  EXPECT_TRUE(o.ok) << o.detail;
  EXPECT_EQ(o.output, json("stdin\nclosed\n"));
}

TEST_F(executor_test, command_output_that_is_not_utf8_is_repaired) {
  const tool_outcome o = run(command({"/bin/sh", "-c", R"(printf 'ok\377')"}));
  EXPECT_TRUE(o.ok) << o.detail;
  EXPECT_EQ(o.output, json("ok\xef\xbf\xbd"));
}

TEST_F(executor_test, a_run_outlives_its_executor) {
  auto e = make_executor(tool_with(command({"/bin/sh", "-c", "sleep 0.1; echo done"})), ioc_.get_executor(), {});
  int calls = 0;
  tool_outcome got;
  e->run(sample_call(), [&](tool_outcome o) {
    ++calls;
    got = std::move(o);
  });
  e.reset();  // a registry reload while the call runs
  ioc_.run_for(10s);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(got.ok) << got.detail;
  EXPECT_EQ(got.output, json("done\n"));
}

TEST(executor_shutdown, a_child_does_not_outlive_its_io_context) {
  const auto start = std::chrono::steady_clock::now();
  bool called = false;
  {
    net::io_context ioc;
    const auto e = make_executor(tool_with(command({"sleep", "30"}, 60000)), ioc.get_executor(), {});
    e->run(sample_call(), [&](tool_outcome) { called = true; });
    ioc.run_for(200ms);
  }
  EXPECT_FALSE(called);
  EXPECT_TRUE(no_children_left());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(executor_concurrency, many_runs_on_two_threads_each_end_once) {
  test_server server;
  net::io_context ioc;
  executor_limits limits;
  limits.max_output_bytes = 1000;
  const std::vector<json> configs = {
      command({"/bin/echo", "a"}),       command({"cat"}),
      command({"sleep", "5"}, 200),      command({"yes"}),
      command({"/nonexistent/program"}), json{{"type", "http"}, {"url", server.url("/echo")}},
      json{{"type", "http"}, {"url", server.url("/flaky")}, {"retries", 1}},
      json{{"type", "agent"}},
  };
  const std::vector<std::string> expected = {"",
                                             "",
                                             "EXECUTOR_TIMEOUT",
                                             "EXECUTOR_OUTPUT_TOO_LARGE",
                                             "EXECUTOR_SPAWN_FAILED",
                                             "",
                                             "",
                                             "EXECUTOR_NOT_RUNNABLE"};
  std::vector<std::unique_ptr<executor>> executors;
  std::mutex mutex;
  std::vector<int> calls(configs.size());
  std::vector<std::string> codes(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    executors.push_back(make_executor(tool_with(configs[i]), ioc.get_executor(), limits));
    for (int k = 0; k < 3; ++k) {
      executors.back()->run(sample_call(), [&, i](tool_outcome o) {
        std::lock_guard lock(mutex);
        ++calls[i];
        codes[i] = o.error_code;
      });
    }
  }
  std::thread other([&] { ioc.run_for(10s); });
  ioc.run_for(10s);
  other.join();
  EXPECT_TRUE(ioc.stopped());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(calls[i], 3) << configs[i].dump();
    EXPECT_EQ(codes[i], expected[i]) << configs[i].dump();
  }
  EXPECT_TRUE(no_children_left());
}

}  // namespace
}  // namespace baton::tools
