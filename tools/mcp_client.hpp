// An MCP (Model Context Protocol) server over stdio, as the registry's `mcp_servers` and the `mcp`
// executor use it: the child started (tools/child_process.hpp) and initialized, the protocol
// version negotiated, its tools listed page by page, each tools/call matched to its answer by
// JSON-RPC id and cancelled (notifications/cancelled) at its timeout, and the child's exit failing
// every call still open. Messages are JSON-RPC 2.0, one per line. A line that is not JSON is
// skipped (counted); one over executor_limits::max_output_bytes stops the server, failing what is
// open with EXECUTOR_OUTPUT_TOO_LARGE. Everything runs on the client's strand; callbacks are
// called from it, never inside the call that started them.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.hpp"
#include "tools/executor.hpp"
#include "tools/mcp_types.hpp"

namespace baton::tools {

// The protocol versions baton speaks, newest first: it offers the first, and takes any of these
// the server answers with.
const std::vector<std::string>& mcp_protocol_versions();

class mcp_client : public std::enable_shared_from_this<mcp_client> {
 public:
  static std::shared_ptr<mcp_client> make(mcp_server_config config, boost::asio::any_io_executor io,
                                          const executor_limits& limits);
  ~mcp_client();

  // Starts the server and runs the initialize handshake; `done` gets no failure once it is ready.
  // Starts asked for while one is under way share its outcome.
  void start(std::function<void(std::optional<mcp_failure>)> done);
  // Every tool, through tools/list's pages (at most 1,000 pages).
  void list_tools(std::function<void(std::vector<mcp_tool_info>, std::optional<mcp_failure>)> done);
  // tools/call: ok with output {"content", "structuredContent"?} unless the server answered
  // isError (EXECUTOR_TOOL_ERROR, the text content in the detail) or the call failed; at `timeout`
  // the call is cancelled on the server and ends with EXECUTOR_TIMEOUT. With `progress`, the call
  // asks for progress (a progressToken), and each notifications/progress of it goes there, on the
  // strand, until `done`.
  void call_tool(const std::string& name, json arguments, std::chrono::milliseconds timeout,
                 std::function<void(tool_outcome)> done, std::function<void(json)> progress = {});
  // Called (on the strand) when the server sends notifications/tools/list_changed.
  void on_tools_changed(std::function<void()> callback);
  // Kills the server; what is open fails with EXECUTOR_UNREACHABLE.
  void stop();

  // Runs `f` on the client's strand (for answers that need no server).
  void post(std::function<void()> f);

  bool ready() const noexcept;                // initialized and running (any thread)
  // Starts that ended ready and that failed, and the last failure (a start's, or the server's
  // exit), any thread.
  struct counts {
    std::uint64_t starts = 0, failed_starts = 0;
    std::string last_error;
  };
  counts counted() const;
  const std::string& protocol_version() const noexcept;  // as negotiated; read on the strand (a callback) only
  std::size_t skipped_lines() const noexcept;  // lines of stdout that were not JSON (any thread)

  struct impl;

 private:
  explicit mcp_client(std::shared_ptr<impl> state);
  std::shared_ptr<impl> impl_;
};

// What /health and /metrics say of the MCP servers the executors hold now (every registry
// snapshot that still serves or runs a call), by server name: whether one is up, its starts and
// failed starts since its connection was made, and the last failure.
struct mcp_server_state {
  std::string name;
  bool up = false;
  std::uint64_t starts = 0, failed_starts = 0;
  std::string last_error;
};
std::vector<mcp_server_state> mcp_server_states();

// The tools of `config`'s server as its running connection lists them (one `mcp` executors made on
// `io` with `limits` hold, initialized), waiting at most the server's timeout; nothing where there
// is none. Not on one of `io`'s threads: it waits for them. For reloads, which then see what the
// running server says (a tool it added), not what a fresh one would.
std::optional<std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>>> list_live_mcp_tools(
    const mcp_server_config& config, boost::asio::any_io_executor io, const executor_limits& limits);

// Starts `config`'s server on an I/O context of its own, lists its tools and stops it: for loading
// a registry. Fails with the step that failed.
std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>> discover_mcp_tools(const mcp_server_config& config,
                                                                                   const executor_limits& limits);

}  // namespace baton::tools
