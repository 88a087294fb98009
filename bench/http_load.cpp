// Load driver for the SystemOne HTTP API: N connections, each a closed loop of M requests
// (`POST /v1/systemone`, the next once the answer is back) over one keep-alive connection,
// reconnecting when the server closes it. Prints requests/s, latency percentiles and the count of
// each HTTP status. Bounded: N × M requests or --max-seconds, whichever comes first.
//
//   build/bench/http_load --port 8470 --connections 64 --requests 200 [--body FILE] [--key KEY]
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "load_driver.hpp"

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  std::string host = "127.0.0.1";
  unsigned short port = 8470;
  std::size_t connections = 64;
  std::size_t requests = 100;  // per connection
  std::size_t threads = 1;     // client I/O threads
  std::size_t max_seconds = 120;
  std::string key;             // bearer token; none when empty
  std::string body_file;       // one request body per line; the built-in mix when empty
  std::string run = "run";
};

struct connection_stats {
  std::vector<double> latency_ms;  // sized up front: first-touching a page mid-run costs ~10 µs
  std::size_t done = 0;
  std::map<unsigned, std::size_t> status{{200, 0}, {429, 0}, {503, 0}};
  std::size_t errors = 0;
  std::string first_error;
  std::string first_refusal;  // the first non-200 reply, to tell why
};

// Support and routing requests of the sizes agents send: a text state, a JSON ticket, a
// conversation, each with choice, noul and score questions.
const std::vector<std::string> builtin_bodies = {
    R"({"model":"jev-latest","state":"I was charged twice for my subscription, please refund","questions":{"intent":{"type":"choice","instructions":"What does the customer want?","criteria":{"refund":"Wants money back","invoice":"Needs an invoice","other":"Anything else"}},"billing":{"type":"noul","instructions":"Is this about billing?"},"urgency":{"type":"score","instructions":"How urgent?","criteria":["not urgent","soon","now"]}}})",
    R"({"model":"jev-latest","state":"User: the nightly export job failed again with a timeout, can you look at the logs and open a ticket if it is on our side?","questions":{"tool":{"type":"choice","instructions":"Which tool should the agent use next?","criteria":{"search_docs":"Search the documentation","read_logs":"Read the job's logs","open_ticket":"Open a support ticket","ask_user":"Ask the user a question","finish":"The task is done"}},"needs_human":{"type":"noul","instructions":"Does this need a person?","criteria":{"true":"A person must act or approve","false":"The agent can handle it"}}}})",
    R"({"model":"jev-latest","state":{"ticket":{"subject":"SSO login loop after IdP certificate rotation","body":"Since this morning all 400 of our users are redirected back to the login page. We rotated the SAML certificate yesterday.","customer_tier":"enterprise","open_tickets":2}},"questions":{"team":{"type":"choice","instructions":"Which team should own this ticket?","criteria":{"billing":"Invoices, refunds, plans","identity":"Login, SSO, accounts","infrastructure":"Outages, latency, jobs","sales":"Pricing and new contracts"}},"severity":{"type":"score","instructions":"How severe is the impact?","criteria":["one user, workaround exists","several users","a whole customer is blocked","many customers are down"]}}})",
    R"({"model":"jev-latest","state":[{"role":"user","content":"Can I get a copy of the invoice for March? Our accounting needs the VAT number on it."},{"role":"assistant","content":"Sure, which account is it for?"},{"role":"user","content":"The one ending in 4471, same as last time."}],"questions":{"intent":{"type":"choice","instructions":"What does the customer want?","criteria":{"refund":"Wants money back","invoice":"Needs an invoice","cancel":"Wants to cancel","other":"Anything else"}},"resolved":{"type":"noul","instructions":"Has the customer given everything needed to act?"},"sentiment":{"type":"score","instructions":"How satisfied does the customer sound?","criteria":["angry","neutral","happy"]}}})",
};

net::awaitable<void> run_connection(tcp::endpoint server, std::size_t index, const options& o,
                                    const std::vector<std::string>& bodies, clock_type::time_point deadline,
                                    connection_stats& out) {
  beast::tcp_stream stream(co_await net::this_coro::executor);
  http::request<http::string_body> req{http::verb::post, "/v1/systemone", 11};
  req.set(http::field::host, o.host + ":" + std::to_string(o.port));
  req.set(http::field::content_type, "application/json");
  if (!o.key.empty()) req.set(http::field::authorization, "Bearer " + o.key);
  http::response<http::string_body> res;
  beast::flat_buffer buffer;
  for (std::size_t i = 0; i < o.requests && clock_type::now() < deadline; ++i) {
    req.body() = bodies[(index + i) % bodies.size()];  // reuses the body's capacity
    req.prepare_payload();
    try {
      stream.expires_at(deadline);  // the overall time limit cuts off whatever is in flight
      if (!stream.socket().is_open()) {
        buffer.clear();
        co_await stream.async_connect(server, net::use_awaitable);
      }
      const auto t0 = clock_type::now();
      co_await http::async_write(stream, req, net::use_awaitable);
      res = {};  // a read parses into a fresh message
      co_await http::async_read(stream, buffer, res, net::use_awaitable);
      out.latency_ms[out.done++] = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
      ++out.status[res.result_int()];
      if (res.result_int() != 200 && out.first_refusal.empty())
        out.first_refusal = std::to_string(res.result_int()) + " " + res.body().substr(0, 300);
      if (!res.keep_alive()) stream.close();  // the server closes it; the next request reconnects
    } catch (const std::exception& e) {
      stream.close();
      if (clock_type::now() < deadline && out.errors++ == 0) out.first_error = e.what();
    }
  }
}

const char* usage =
    "usage: http_load [--host 127.0.0.1] [--port P] [--connections N] [--requests M] [--threads T]\n"
    "                 [--key KEY] [--body FILE] [--run NAME] [--max-seconds S]\n";

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::size_t port = o.port;
  if (!baton::bench::parse_flags(argc, argv,
                                 {{"--host", &o.host, nullptr},
                                  {"--port", nullptr, &port},
                                  {"--connections", nullptr, &o.connections},
                                  {"--requests", nullptr, &o.requests},
                                  {"--threads", nullptr, &o.threads},
                                  {"--max-seconds", nullptr, &o.max_seconds},
                                  {"--key", &o.key, nullptr},
                                  {"--body", &o.body_file, nullptr},
                                  {"--run", &o.run, nullptr}},
                                 usage) ||
      port > 65535) {
    return 64;
  }
  o.port = static_cast<unsigned short>(port);
  // Load may only go to this machine.
  boost::system::error_code ec;
  const net::ip::address address = net::ip::make_address(o.host, ec);
  if (ec || !address.is_loopback()) {
    std::fprintf(stderr, "http_load: --host must be a loopback address, not %s\n", o.host.c_str());
    return 64;
  }
  std::vector<std::string> bodies;
  if (o.body_file.empty()) {
    bodies = builtin_bodies;
  } else {
    std::ifstream in(o.body_file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) bodies.push_back(std::move(line));
    if (bodies.empty()) {
      std::fprintf(stderr, "http_load: no request bodies in %s\n", o.body_file.c_str());
      return 64;
    }
  }

  net::io_context io;
  std::vector<connection_stats> stats(o.connections);
  for (connection_stats& s : stats) s.latency_ms.assign(o.requests, 0.0);
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = clock_type::now();
  const auto deadline = t0 + std::chrono::seconds(o.max_seconds);
  const tcp::endpoint server(address, o.port);
  // A strand per connection: the stream's timer and its I/O must not run at once when --threads > 1.
  for (std::size_t i = 0; i < o.connections; ++i)
    net::co_spawn(net::make_strand(io), run_connection(server, i, o, bodies, deadline, stats[i]), net::detached);
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < o.threads; ++i) threads.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  rusage after{};
  getrusage(RUSAGE_SELF, &after);

  std::vector<double> all;
  all.reserve(o.connections * o.requests);
  std::map<unsigned, std::size_t> status;
  std::size_t errors = 0;
  std::string first_error, first_refusal;
  for (connection_stats& s : stats) {
    all.insert(all.end(), s.latency_ms.begin(), s.latency_ms.begin() + static_cast<std::ptrdiff_t>(s.done));
    for (const auto& [code, count] : s.status) status[code] += count;
    errors += s.errors;
    if (first_error.empty()) first_error = s.first_error;
    if (first_refusal.empty()) first_refusal = s.first_refusal;
  }
  std::string status_json;
  for (const auto& [code, count] : status)
    status_json += (status_json.empty() ? "\"" : ",\"") + std::to_string(code) + "\":" + std::to_string(count);
  const std::size_t n = all.size();
  const baton::bench::latency_summary l = baton::bench::summarise(all);
  std::printf(
      "{\"run\":\"%s\",\"connections\":%zu,\"requests\":%zu,\"errors\":%zu,\"seconds\":%.3f,\"requests_per_s\":%.0f,"
      "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"status\":{%s},\"client_minor_faults\":%ld}\n",
      o.run.c_str(), o.connections, n, errors, seconds, seconds > 0 ? double(n) / seconds : 0, l.p50, l.p90, l.p99, l.max,
      status_json.c_str(), after.ru_minflt - before.ru_minflt);
  const bool cut_short = n + errors < o.connections * o.requests;
  if (cut_short)
    std::fprintf(stderr, "http_load: stopped at the %zu s limit after %zu of %zu requests\n", o.max_seconds, n,
                 o.connections * o.requests);
  if (errors) std::fprintf(stderr, "http_load: %zu transport errors; the first: %s\n", errors, first_error.c_str());
  if (!first_refusal.empty()) std::fprintf(stderr, "http_load: the first non-200 reply: %s\n", first_refusal.c_str());
  if (status[200] == 0) std::fprintf(stderr, "http_load: no request answered 200\n");
  return errors || cut_short || status[200] == 0 ? 1 : 0;
}
