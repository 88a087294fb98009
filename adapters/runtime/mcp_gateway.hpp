// baton as an MCP server (docs/mcp.md): the JSON-RPC of POST and DELETE /mcp (Streamable HTTP)
// and the resumption of a call's event stream (GET), transport-free. An MCP client sees the registry's tools that baton runs (its MCP servers' and
// its http and command tools), and each tools/call it makes is a decision: agent_service::on_call
// in the MCP session's own agent session, whose history is the session's calls and what they
// returned. What the client gets is what the policy made of the call: the tool's result, a denial
// (isError), or, while a person decides, progress notifications until the resolution, then the
// approved call's result. The HTTP side (adapters/server) hands each request here with the reply
// it is to be answered on.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "adapters/runtime/agent_service.hpp"
#include "adapters/runtime/server_config.hpp"

namespace baton {

// One event of an /mcp event stream (text/event-stream).
struct mcp_event {
  std::string id;       // where a client that lost the stream resumes from (Last-Event-ID)
  std::string message;  // a JSON-RPC message; empty: a priming event, which only gives the id
  std::chrono::milliseconds retry{0};  // how long a client waits before it reconnects; 0: not said
};

// Where one /mcp request's answer goes; from any thread. The first of answer(), open() and
// event() says what the answer is: one body, or an event stream of JSON-RPC messages.
class mcp_reply {
 public:
  virtual ~mcp_reply() = default;
  // 200 with a JSON body, or 202 / 204 without one, or an HTTP refusal (400, 404) with its JSON-RPC
  // error; `session`: the Mcp-Session-Id header to send (empty: none).
  virtual void answer(unsigned status, std::string body, std::string session) = 0;
  // The event stream begins (its head goes now), before its first event.
  virtual void open() = 0;
  // One event of the stream, which the first opens.
  virtual void event(mcp_event e) = 0;
  // The stream's last event went: the response ends.
  virtual void end() = 0;
};

// One POST /mcp as the gateway reads it.
struct mcp_post {
  std::string body;
  std::string session;   // the Mcp-Session-Id header; empty when absent
  std::string protocol;  // the MCP-Protocol-Version header; empty when absent
  bool streams = true;   // the client takes text/event-stream (its Accept)
  std::string owner;     // the API key's name, scoping the sessions; empty without keys
  std::string caller;    // who calls, for the engine's prefix cache ("anonymous" without keys)
};

class mcp_gateway {
 public:
  // How often a call that waits for a person hears that it still waits (notifications/progress,
  // when the client asked for progress): often enough for the SDKs' 60 s request timeout.
  static constexpr std::chrono::seconds progress_every{10};
  // How long a client that lost a call's stream waits before it resumes it (the priming event's
  // `retry`, which protocol 2025-11-25 clients read).
  static constexpr std::chrono::milliseconds resume_after{2000};
  // The answered streams all sessions keep for clients that resume them, at most.
  static constexpr std::size_t max_kept_total = std::size_t(64) << 20;

  // `io`: where the sessions' strands and timers run (the server's).
  mcp_gateway(const server_config& config, agent_service& agents, boost::asio::any_io_executor io);
  ~mcp_gateway();
  mcp_gateway(const mcp_gateway&) = delete;
  mcp_gateway& operator=(const mcp_gateway&) = delete;

  // A JSON-RPC message: initialize (a new session, its id in the answer's Mcp-Session-Id), ping,
  // tools/list, tools/call, and the client's notifications (202). Malformed JSON is -32700 and a
  // message that is not JSON-RPC -32600 (HTTP 400); an unknown method -32601; a request without
  // the header 400, with an unknown session (ended, evicted, another key's) 404.
  void post(mcp_post p, std::shared_ptr<mcp_reply> reply);
  // DELETE /mcp: the session and its agent session end (204); 400 without the header, 404 for an
  // unknown session. Calls under way still get their answers.
  void remove(const std::string& session, const std::string& owner, std::shared_ptr<mcp_reply> reply);
  // GET /mcp with Last-Event-ID: the stream of a tools/call whose client lost it goes on here,
  // from the event after `last_event`, to the call's answer (one it had before included, while the
  // session keeps it: its last 8 answered streams, up to 1 MiB). 400 for an id no stream of the
  // session has (any more); 404 for an unknown session; 400 when the connection cannot carry a
  // stream (`streams` false: HTTP/1.0 has no chunks). An answered stream is kept 5 minutes, and
  // all sessions' together at most max_kept_total.
  void resume(const std::string& session, const std::string& owner, const std::string& last_event, bool streams,
              std::shared_ptr<mcp_reply> reply);

  // The server stops: a call waiting for a person is answered now (an error naming its escalation,
  // which is withdrawn), so that the stop does not wait out its drain limit for it. Calls still to
  // be decided get SHUTTING_DOWN from the agent service. (What a stop or crash leaves pending, the
  // escalation desk denies at the next start: is_mcp_gateway_session.)
  void drain();

  std::size_t size() const;

 private:
  class session;
  std::shared_ptr<session> find(const std::string& id, const std::string& owner);
  // Room for one more session: those idle past server.session_idle go, then, at
  // server.max_sessions, the least recently used with no call under way.
  bool make_room();

  const server_config& config_;
  agent_service& agents_;
  boost::asio::any_io_executor io_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<session>> sessions_;
  std::shared_ptr<std::atomic<std::size_t>> kept_ = std::make_shared<std::atomic<std::size_t>>(0);
};

}  // namespace baton
