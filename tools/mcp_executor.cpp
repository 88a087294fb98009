// The `mcp` executor: a tool an MCP server listed (registry `mcp_servers`), called with tools/call
// over that server's one connection, which every tool of the server shares (in this snapshot and
// the next, while either holds it). A server that is not running is started on the next call; one
// that failed to start is tried again only after a back-off (250 ms doubling to 30 s), its calls
// failing closed (EXECUTOR_UNREACHABLE) meanwhile. Arguments are checked against the tool's
// inputSchema's `required` first, and an argument the agent gave as text where the schema wants a
// number, integer, boolean, array or object is read as JSON of that type.
#include <future>
#include <map>
#include <mutex>
#include <optional>

#include "core/error_codes.hpp"
#include "tools/arguments.hpp"
#include "tools/executor_kinds.hpp"
#include "tools/mcp_client.hpp"

namespace baton::tools::detail {

namespace {

namespace net = boost::asio;

// One server's connection and its restart state, shared by the executors of its tools.
struct mcp_link {
  std::string name;
  std::shared_ptr<mcp_client> client;
  std::mutex mutex;  // guards what follows
  std::chrono::steady_clock::time_point retry_at{};
  std::chrono::milliseconds backoff{0};
};

// Links by the server's configuration, I/O context and limits, while an executor holds them.
std::mutex links_mutex;
std::map<std::string, std::weak_ptr<mcp_link>> links;

std::string link_key(const json& connection, const net::any_io_executor& io, const executor_limits& limits) {
  const json limits_key = {limits.max_output_bytes, limits.withheld_env};
  return connection.dump() + limits_key.dump() + std::to_string(reinterpret_cast<std::uintptr_t>(&io.context()));
}

std::shared_ptr<mcp_link> link_for(const mcp_server_config& config, const json& key, net::any_io_executor io,
                                   const executor_limits& limits) {
  const std::string k = link_key(key, io, limits);
  std::lock_guard lock(links_mutex);
  for (auto it = links.begin(); it != links.end();) it = it->second.expired() ? links.erase(it) : std::next(it);
  if (auto live = links[k].lock()) return live;
  auto link = std::make_shared<mcp_link>();
  link->name = config.name;
  link->client = mcp_client::make(config, std::move(io), limits);
  if (limits.mcp_tools_changed) {
    link->client->on_tools_changed([changed = limits.mcp_tools_changed, name = config.name] { changed(name); });
  }
  links[k] = link;
  return link;
}

class mcp_executor final : public executor {
 public:
  mcp_executor(std::shared_ptr<mcp_link> link, std::string tool, json schema, std::chrono::milliseconds timeout)
      : link_(std::move(link)), tool_(std::move(tool)), schema_(std::move(schema)), timeout_(timeout) {}

  std::string_view kind() const noexcept override { return "mcp"; }

  void run(tool_call call, std::function<void(tool_outcome)> done) override {
    if (auto why = typed(call.arguments)) {
      tool_outcome o;
      o.error_code = codes::executor_invalid_arguments;
      o.detail = "the MCP tool `" + tool_ + "`: " + *why;
      return fail_later(std::move(o), std::move(done));
    }
    auto link = link_;
    if (link->client->ready()) {
      return link->client->call_tool(tool_, std::move(call.arguments), timeout_, std::move(done), std::move(call.progress));
    }
    {
      std::lock_guard lock(link->mutex);
      if (std::chrono::steady_clock::now() < link->retry_at) {
        tool_outcome o;
        o.error_code = codes::executor_unreachable;
        o.detail = "the MCP server failed to start; it is tried again after a back-off of " +
                   std::to_string(link->backoff.count()) + " ms";
        return fail_later(std::move(o), std::move(done));
      }
    }
    // Held weakly while the start is pending: the client keeps its waiters, and a link that held
    // its own client through them would never be freed.
    link->client->start([weak = std::weak_ptr<mcp_link>(link), tool = tool_, arguments = std::move(call.arguments),
                         progress = std::move(call.progress), timeout = timeout_,
                         done = std::move(done)](std::optional<mcp_failure> failure) mutable {
      const auto link = weak.lock();
      if (!link) {
        tool_outcome o;
        o.error_code = codes::executor_unreachable;
        o.detail = "the MCP server's connection was closed (a reload let it go)";
        return done(std::move(o));
      }
      {
        // Once per start, not per call waiting on it: its waiters are answered one after another.
        std::lock_guard lock(link->mutex);
        const auto now = std::chrono::steady_clock::now();
        if (!failure) {
          link->backoff = std::chrono::milliseconds(0);
          link->retry_at = {};
        } else if (now >= link->retry_at) {
          link->backoff = std::min<std::chrono::milliseconds>(
              std::max<std::chrono::milliseconds>(2 * link->backoff, std::chrono::milliseconds(250)), std::chrono::seconds(30));
          link->retry_at = now + link->backoff;
        }
      }
      if (failure) {
        tool_outcome o;
        o.error_code = failure->code == codes::executor_timeout ? codes::executor_unreachable : failure->code;
        o.detail = failure->detail;
        return done(std::move(o));
      }
      link->client->call_tool(tool, std::move(arguments), timeout, std::move(done), std::move(progress));
    });
  }

 private:
  void fail_later(tool_outcome o, std::function<void(tool_outcome)> done) {
    o.attempts = 0;
    link_->client->post([o = std::move(o), done = std::move(done)]() mutable { done(std::move(o)); });
  }

  // Why the arguments do not fit the schema (a required one missing, text that is not JSON of its
  // property's type), converting such text in place; nothing when they fit.
  std::optional<std::string> typed(json& arguments) const {
    if (!arguments.is_object()) return "the arguments are not an object";
    if (const auto missing = first_missing_required(schema_, arguments)) {
      return "it needs the argument `" + *missing + "`, which the call lacks";
    }
    const auto props = schema_.is_object() ? schema_.find("properties") : schema_.end();
    if (!schema_.is_object() || props == schema_.end() || !props->is_object()) return std::nullopt;
    for (auto& [name, value] : arguments.items()) {
      const auto p = props->find(name);
      if (p == props->end() || !p->is_object() || !value.is_string()) continue;
      const auto t = p->find("type");
      if (t == p->end() || !t->is_string() || *t == "string") continue;
      const std::string want = t->get<std::string>();
      json parsed;
      json_parse_error bad;
      const bool fits = parse_json(value.get<std::string>(), parsed, bad) &&
                        ((want == "number" && parsed.is_number()) || (want == "integer" && parsed.is_number_integer()) ||
                         (want == "boolean" && parsed.is_boolean()) || (want == "array" && parsed.is_array()) ||
                         (want == "object" && parsed.is_object()) || (want == "null" && parsed.is_null()));
      if (!fits) return "its argument `" + name + "` must be " + (want == "integer" || want == "array" || want == "object" ? "an " : "a ") + want;
      value = std::move(parsed);
    }
    return std::nullopt;
  }

  std::shared_ptr<mcp_link> link_;
  std::string tool_;
  json schema_;  // the tool's inputSchema
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<executor> make_mcp_executor(const json& config, net::any_io_executor io, const executor_limits& limits) {
  mcp_server_config server;
  server.name = config.value("server", "");
  if (const auto c = config.find("command"); c != config.end() && c->is_array()) {
    for (const json& a : *c) {
      if (a.is_string()) server.argv.push_back(a.get<std::string>());
    }
  }
  if (const auto e = config.find("env"); e != config.end() && e->is_object()) {
    for (const auto& [k, v] : e->items()) {
      if (v.is_string()) server.env.emplace_back(k, v.get<std::string>());
    }
  }
  server.cwd = config.value("cwd", "");
  server.url = config.value("url", "");
  if (const auto h = config.find("headers"); h != config.end() && h->is_object()) {
    for (const auto& [k, v] : h->items()) {
      if (v.is_string()) server.headers.emplace_back(k, v.get<std::string>());
    }
  }
  // Calls time out at the tool's timeout; starting the server (a node or Python process coming
  // up, then initialize) is given at least 10 s, which a short call timeout would not leave it.
  const std::chrono::milliseconds call_timeout = timeout_of(config, limits);
  server.timeout = std::max<std::chrono::milliseconds>(call_timeout, std::chrono::seconds(10));
  const std::string tool = config.value("tool", "");
  if ((server.url.empty() && (server.argv.empty() || server.argv[0].empty())) || tool.empty()) {
    return make_failing_executor("mcp", codes::executor_spawn_failed, "the executor names no MCP server command, url or tool", std::move(io));
  }
  json schema = json::object();
  if (const auto s = config.find("input_schema"); s != config.end() && s->is_object()) schema = *s;
  // The connection's key, as list_live_mcp_tools makes it: the timeout is a call's, not its.
  auto link = link_for(server, mcp_connection_json(server), io, limits);
  return std::make_unique<mcp_executor>(std::move(link), tool, std::move(schema), call_timeout);
}

}  // namespace baton::tools::detail

namespace baton::tools {

json mcp_connection_json(const mcp_server_config& server) {
  if (!server.url.empty()) {
    json headers = json::object();
    for (const auto& [k, v] : server.headers) headers[k] = v;
    return {{"type", "mcp"}, {"server", server.name}, {"url", server.url}, {"headers", headers}};
  }
  json env = json::object();
  for (const auto& [k, v] : server.env) env[k] = v;
  return {{"type", "mcp"}, {"server", server.name}, {"command", server.argv}, {"env", env}, {"cwd", server.cwd}};
}

std::optional<std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>>> list_live_mcp_tools(
    const mcp_server_config& config, boost::asio::any_io_executor io, const executor_limits& limits) {
  std::shared_ptr<detail::mcp_link> link;
  {
    std::lock_guard lock(detail::links_mutex);
    const auto it = detail::links.find(detail::link_key(mcp_connection_json(config), io, limits));
    if (it != detail::links.end()) link = it->second.lock();
  }
  if (!link || !link->client->ready()) return std::nullopt;
  using listed = std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>>;
  auto answer = std::make_shared<std::promise<listed>>();
  std::future<listed> got = answer->get_future();
  link->client->list_tools([answer](std::vector<mcp_tool_info> tools, std::optional<mcp_failure> failure) {
    answer->set_value({std::move(tools), std::move(failure)});
  });
  // Each page has its own timeout; this also bounds an I/O context that stopped meanwhile.
  if (got.wait_for(config.timeout + std::chrono::seconds(1)) != std::future_status::ready) return std::nullopt;
  listed result = got.get();
  if (result.second) return std::nullopt;  // a fresh start says better why it fails
  return result;
}

std::vector<mcp_server_state> mcp_server_states() {
  std::map<std::string, mcp_server_state> by_name;
  {
    std::lock_guard lock(detail::links_mutex);
    for (const auto& [key, weak] : detail::links) {
      const auto link = weak.lock();
      if (!link) continue;
      mcp_server_state& s = by_name[link->name];
      s.name = link->name;
      const mcp_client::counts c = link->client->counted();
      s.up = s.up || link->client->ready();
      s.starts += c.starts;
      s.failed_starts += c.failed_starts;
      if (!c.last_error.empty()) s.last_error = c.last_error;
    }
  }
  std::vector<mcp_server_state> out;
  for (auto& [name, s] : by_name) out.push_back(std::move(s));
  return out;
}

}  // namespace baton::tools
