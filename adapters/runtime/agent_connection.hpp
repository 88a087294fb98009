// One agent connection as the runtime sees it (the transport implements it: adapters/server):
// where its handlers run, how a frame goes back, and what the connection itself remembers.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>
#include <deque>
#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/json.hpp"

namespace baton {

// The server side of one connection as the service sees it. Every method but strand() runs on
// the connection's strand.
// The MCP gateway's agent sessions are named "mcp-" and the 32 hex digits of the MCP session's id
// (scoped "KEY/NAME" in the session table and the log). The names are the gateway's: an agent's
// frame that names one is refused, so that what baton settles of them at a restart is never an
// agent's.
inline constexpr std::string_view mcp_gateway_session_prefix = "mcp-";
inline constexpr std::size_t mcp_gateway_session_digits = 32;
inline bool is_mcp_gateway_session(std::string_view session) noexcept {
  const auto slash = session.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? session : session.substr(slash + 1);
  if (name.size() != mcp_gateway_session_prefix.size() + mcp_gateway_session_digits || !name.starts_with(mcp_gateway_session_prefix)) {
    return false;
  }
  return std::all_of(name.begin() + mcp_gateway_session_prefix.size(), name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

class agent_connection {
 public:
  virtual ~agent_connection() = default;
  virtual boost::asio::any_io_executor strand() = 0;
  virtual void send(std::string frame) = 0;
  // A tool baton runs for `decision` said how far it is (an MCP tool's notifications/progress
  // params), from any thread. An agent hears nothing of it; the MCP gateway tells its client.
  virtual void tool_progress(const std::string& /*decision*/, json /*params*/) {}

  // Decisions of this connection whose agent-run tool awaits a tool_result: decision → tool.
  struct awaited_tool {
    std::string tool;
    bool reported = false;
    std::string session;  // scoped; empty for a resolution's tool (the escalations keep that session)
  };
  std::unordered_map<std::string, awaited_tool> awaited_;
  // The API key's name when the server has keys: a key's sessions are its own, so their names are
  // scoped by it ("KEY/SESSION" in the session table and the log). Empty without keys.
  std::string owner_;
  // Who is calling: the API key's name, "anonymous" without keys. The engine's prefix cache keeps
  // each caller's computations to itself (request::cache_scope).
  std::string caller_;
  std::deque<std::string> awaited_order_;  // oldest first, to bound awaited_

  // The decision's agent-run tool now awaits a tool_result; past `max` the oldest is forgotten.
  void await_tool(const std::string& decision, const std::string& tool, std::size_t max, const std::string& session = {}) {
    if (awaited_.contains(decision)) return;
    if (awaited_order_.size() >= max && !awaited_order_.empty()) {
      awaited_.erase(awaited_order_.front());
      awaited_order_.pop_front();
    }
    awaited_.emplace(decision, awaited_tool{tool, false, session});
    awaited_order_.push_back(decision);
  }
};

}  // namespace baton
