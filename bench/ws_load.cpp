// Load driver for the agent WebSocket API: N concurrent sessions, each on its own connection,
// each sending M decide frames in a closed loop (the next once the decision is back). A session
// lasts T turns (its first frame a full history, then appends of one event), then the
// connection goes on with a new session, as an agent takes its next task. Prints decisions/s and
// latency percentiles. Bounded: N × M frames, then it closes and exits.
//
//   build/bench/ws_load --port 8470 --sessions 64 --decisions 200 --turns 20
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "load_driver.hpp"

namespace net = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  unsigned short port = 8470;
  std::size_t sessions = 64;
  std::size_t decisions = 100;  // per session
  std::size_t turns = 20;       // turns per agent session; then the connection starts a new one
  std::size_t threads = 1;      // client I/O threads
  std::string run = "run";      // distinguishes session names across runs on one server
};

struct session_stats {
  std::vector<double> latency_ms;
  std::size_t errors = 0;
  std::string first_error;
};

const char* messages[] = {
    "Please search the documentation for how to rotate an API key",
    "Open a ticket: the nightly export job failed again with a timeout",
    "Run a read-only query for last month's signups by country",
    "Can you ask the user which account they mean?",
    "Thanks, that is all, the request is done",
};

net::awaitable<void> run_session(tcp::endpoint server, std::size_t index, const options& o, session_stats& out) {
  auto ex = co_await net::this_coro::executor;
  websocket::stream<beast::tcp_stream> ws(ex);
  try {
    co_await beast::get_lowest_layer(ws).async_connect(server, net::use_awaitable);
    beast::get_lowest_layer(ws).expires_never();
    ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
    co_await ws.async_handshake("127.0.0.1", "/v1/agent", net::use_awaitable);
    beast::flat_buffer buffer;
    std::string frame;
    out.latency_ms.reserve(o.decisions);
    for (std::size_t i = 0; i < o.decisions; ++i) {
      const char* text = messages[(index + i) % std::size(messages)];
      const std::size_t turn = i % o.turns;
      const std::string session = o.run + "-" + std::to_string(index) + "-" + std::to_string(i / o.turns);
      frame = R"({"type":"decide","id":)" + std::to_string(i) + R"(,"session":")" + session + "\",";
      frame += turn == 0 ? R"("history":[{"role":"user","content":")" : R"("append":[{"role":"user","content":")";
      frame += text;
      frame += "\"}]}";
      const auto t0 = clock_type::now();
      co_await ws.async_write(net::buffer(frame), net::use_awaitable);
      buffer.clear();
      co_await ws.async_read(buffer, net::use_awaitable);
      out.latency_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
      const std::string_view reply(static_cast<const char*>(buffer.data().data()), buffer.size());
      if (!reply.starts_with(R"({"type":"decision")")) {
        if (out.errors++ == 0) out.first_error = std::string(reply.substr(0, 300));
      }
    }
    co_await ws.async_close(websocket::close_code::normal, net::use_awaitable);
  } catch (const std::exception& e) {
    if (out.errors++ == 0) out.first_error = e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::size_t port = o.port;
  if (!baton::bench::parse_flags(argc, argv,
                                 {{"--port", nullptr, &port},
                                  {"--sessions", nullptr, &o.sessions},
                                  {"--decisions", nullptr, &o.decisions},
                                  {"--turns", nullptr, &o.turns},
                                  {"--threads", nullptr, &o.threads},
                                  {"--run", &o.run, nullptr}},
                                 "usage: ws_load [--port P] [--sessions N] [--decisions M] [--turns T] [--threads T] "
                                 "[--run NAME]\n") ||
      port > 65535) {
    return 64;
  }
  o.port = static_cast<unsigned short>(port);

  net::io_context io;
  const tcp::endpoint server(net::ip::make_address("127.0.0.1"), o.port);
  std::vector<session_stats> stats(o.sessions);
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < o.sessions; ++i) net::co_spawn(io, run_session(server, i, o, stats[i]), net::detached);
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < o.threads; ++i) threads.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  rusage after{};
  getrusage(RUSAGE_SELF, &after);

  std::vector<double> all;
  std::size_t errors = 0;
  std::string first_error;
  for (session_stats& s : stats) {
    all.insert(all.end(), s.latency_ms.begin(), s.latency_ms.end());
    errors += s.errors;
    if (first_error.empty()) first_error = s.first_error;
  }
  const std::size_t n = all.size();
  const baton::bench::latency_summary l = baton::bench::summarise(all);
  std::printf(
      "{\"sessions\":%zu,\"turns\":%zu,\"decisions\":%zu,\"errors\":%zu,\"seconds\":%.3f,\"decisions_per_s\":%.0f,"
      "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"client_minor_faults\":%ld}\n",
      o.sessions, o.turns, n, errors, seconds, seconds > 0 ? double(n) / seconds : 0, l.p50, l.p90, l.p99, l.max,
      after.ru_minflt - before.ru_minflt);
  if (errors) std::fprintf(stderr, "ws_load: %zu errors; the first: %s\n", errors, first_error.c_str());
  return errors ? 1 : 0;
}
