// Load driver for the agent WebSocket API: N concurrent sessions, each on its own connection,
// each sending M decide frames in a closed loop (the next once the decision is back). A session
// lasts T turns (its first frame a full history, then appends of one event), then the
// connection goes on with a new session, as an agent takes its next task: with --end-every K,
// every K-th connection ends each session with an `end` frame first (K = 2: half ended, half
// abandoned). Prints decisions/s and latency percentiles. Bounded: N × M frames, or, with
// --duration-s, until that time has passed; --report-s prints one line per interval as it goes
// (decisions/s, p99, errors); --ids FILE writes the id of every decision received (a decision
// frame goes out once its row is in the log, with the log's durable_ack). A connection that drops
// ends that connection's work (counted as an error).
//
//   build/bench/ws_load --port 8470 --sessions 64 --decisions 200 --turns 20
//   build/bench/ws_load --port 8470 --sessions 64 --decisions 100000000 --duration-s 1800 --report-s 60 --end-every 2
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
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
#include <utility>
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
  std::size_t end_every = 0;    // every K-th connection ends its sessions; 0: none does
  std::size_t duration_s = 0;   // stop sending once this has passed; 0: after M decisions
  std::size_t report_s = 0;     // a line per interval; 0: none
  std::string ids;              // a file for the ids of the decisions received; empty: none
};

struct session_stats {
  std::vector<double> latency_ms;
  std::size_t errors = 0, too_many_sessions = 0;
  std::string first_error;
  std::vector<std::string> ids;
};

// What the intervals' report reads: every connection adds its latencies here as it goes.
struct interval {
  std::vector<double> latency_ms;
  std::size_t errors = 0;
};

// The value of the string field `"decision":"…"` of a decision frame, or empty.
std::string_view decision_id(std::string_view reply) {
  constexpr std::string_view key = R"("decision":")";
  const std::size_t at = reply.find(key);
  if (at == std::string_view::npos) return {};
  const std::size_t from = at + key.size(), to = reply.find('"', from);
  return to == std::string_view::npos ? std::string_view{} : reply.substr(from, to - from);
}

const char* messages[] = {
    "Please search the documentation for how to rotate an API key",
    "Open a ticket: the nightly export job failed again with a timeout",
    "Run a read-only query for last month's signups by country",
    "Can you ask the user which account they mean?",
    "Thanks, that is all, the request is done",
};

net::awaitable<void> run_session(tcp::endpoint server, std::size_t index, const options& o, session_stats& out,
                                 interval& now, clock_type::time_point stop) {
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
    const bool ends = o.end_every > 0 && index % o.end_every == 0;
    auto session_name = [&](std::size_t k) { return o.run + "-" + std::to_string(index) + "-" + std::to_string(k); };
    for (std::size_t i = 0; i < o.decisions && (o.duration_s == 0 || clock_type::now() < stop); ++i) {
      const char* text = messages[(index + i) % std::size(messages)];
      const std::size_t turn = i % o.turns;
      const std::string session = session_name(i / o.turns);
      if (ends && turn == 0 && i > 0) {  // the agent is done with its last session
        frame = R"({"type":"end","session":")" + session_name(i / o.turns - 1) + "\"}";
        co_await ws.async_write(net::buffer(frame), net::use_awaitable);
        buffer.clear();
        co_await ws.async_read(buffer, net::use_awaitable);
        const std::string_view reply(static_cast<const char*>(buffer.data().data()), buffer.size());
        if (!reply.starts_with(R"({"type":"ended")")) {
          ++now.errors;
          if (out.errors++ == 0) out.first_error = std::string(reply.substr(0, 300));
        }
      }
      frame = R"({"type":"decide","id":)" + std::to_string(i) + R"(,"session":")" + session + "\",";
      frame += turn == 0 ? R"("history":[{"role":"user","content":")" : R"("append":[{"role":"user","content":")";
      frame += text;
      frame += "\"}]}";
      const auto t0 = clock_type::now();
      co_await ws.async_write(net::buffer(frame), net::use_awaitable);
      buffer.clear();
      co_await ws.async_read(buffer, net::use_awaitable);
      const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
      out.latency_ms.push_back(ms);
      now.latency_ms.push_back(ms);
      const std::string_view reply(static_cast<const char*>(buffer.data().data()), buffer.size());
      if (!reply.starts_with(R"({"type":"decision")")) {
        ++now.errors;
        if (reply.find("TOO_MANY_SESSIONS") != std::string_view::npos) ++out.too_many_sessions;
        if (out.errors++ == 0) out.first_error = std::string(reply.substr(0, 300));
      } else if (!o.ids.empty()) {
        out.ids.emplace_back(decision_id(reply));
      }
    }
    co_await ws.async_close(websocket::close_code::normal, net::use_awaitable);
  } catch (const std::exception& e) {
    ++now.errors;
    if (out.errors++ == 0) out.first_error = e.what();
  }
}

// Every `o.report_s` seconds until `stop`, a line: the interval's decisions/s, p99 and errors.
net::awaitable<void> report(const options& o, interval& now, clock_type::time_point start, clock_type::time_point stop,
                            const std::size_t& running) {
  net::steady_timer timer(co_await net::this_coro::executor);
  for (std::size_t k = 1; running > 0; ++k) {
    timer.expires_at(start + std::chrono::seconds(o.report_s * k));
    co_await timer.async_wait(net::use_awaitable);
    std::vector<double> ms = std::move(now.latency_ms);
    now.latency_ms.clear();
    const std::size_t errors = std::exchange(now.errors, 0);
    const baton::bench::latency_summary l = baton::bench::summarise(ms);
    std::printf("{\"interval_end_s\":%zu,\"decisions\":%zu,\"decisions_per_s\":%.0f,\"p99_ms\":%.3f,\"errors\":%zu}\n",
                o.report_s * k, ms.size(), double(ms.size()) / double(o.report_s), l.p99, errors);
    std::fflush(stdout);
    if (clock_type::now() >= stop && o.duration_s > 0) break;
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
                                  {"--run", &o.run, nullptr},
                                  {"--end-every", nullptr, &o.end_every},
                                  {"--duration-s", nullptr, &o.duration_s},
                                  {"--report-s", nullptr, &o.report_s},
                                  {"--ids", &o.ids, nullptr}},
                                 "usage: ws_load [--port P] [--sessions N] [--decisions M] [--turns T] [--threads T] "
                                 "[--run NAME] [--end-every K] [--duration-s D] [--report-s R] [--ids FILE]\n") ||
      port > 65535) {
    return 64;
  }
  o.port = static_cast<unsigned short>(port);

  net::io_context io;
  const tcp::endpoint server(net::ip::make_address("127.0.0.1"), o.port);
  if (o.threads > 1 && o.report_s > 0) {
    std::fputs("ws_load: --report-s reads the connections' samples unlocked: one client thread only\n", stderr);
    return 64;
  }
  std::vector<session_stats> stats(o.sessions);
  interval now;
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = clock_type::now();
  const auto stop = t0 + std::chrono::seconds(o.duration_s);
  std::size_t running = o.sessions;
  for (std::size_t i = 0; i < o.sessions; ++i) {
    net::co_spawn(io, run_session(server, i, o, stats[i], now, stop), [&running](std::exception_ptr) { --running; });
  }
  if (o.report_s > 0) net::co_spawn(io, report(o, now, t0, stop, running), net::detached);
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < o.threads; ++i) threads.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  rusage after{};
  getrusage(RUSAGE_SELF, &after);

  std::vector<double> all;
  std::size_t errors = 0, too_many = 0;
  std::string first_error;
  FILE* ids = o.ids.empty() ? nullptr : std::fopen(o.ids.c_str(), "w");
  if (!o.ids.empty() && ids == nullptr) std::fprintf(stderr, "ws_load: cannot write %s\n", o.ids.c_str());
  for (session_stats& s : stats) {
    all.insert(all.end(), s.latency_ms.begin(), s.latency_ms.end());
    errors += s.errors;
    too_many += s.too_many_sessions;
    if (first_error.empty()) first_error = s.first_error;
    if (ids) {
      for (const std::string& id : s.ids) std::fprintf(ids, "%s\n", id.c_str());
    }
  }
  if (ids) std::fclose(ids);
  const std::size_t n = all.size();
  const baton::bench::latency_summary l = baton::bench::summarise(all);
  std::printf(
      "{\"sessions\":%zu,\"turns\":%zu,\"decisions\":%zu,\"errors\":%zu,\"too_many_sessions\":%zu,\"seconds\":%.3f,"
      "\"decisions_per_s\":%.0f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"client_minor_faults\":%ld}\n",
      o.sessions, o.turns, n, errors, too_many, seconds, seconds > 0 ? double(n) / seconds : 0, l.p50, l.p90, l.p99, l.max,
      after.ru_minflt - before.ru_minflt);
  if (errors) std::fprintf(stderr, "ws_load: %zu errors; the first: %s\n", errors, first_error.c_str());
  return errors ? 1 : 0;
}
