#include "tools/executor.hpp"

#include <boost/asio/post.hpp>

#include "core/error_codes.hpp"
#include "tools/executor_kinds.hpp"

namespace baton::tools {

namespace {

// An executor whose runs all end with the same error: the agent kind, whose runs are the agent's,
// and a configuration that did not go through the registry's checks.
class failing_executor final : public executor {
 public:
  failing_executor(std::string_view kind, bool agent_runs, tool_outcome outcome, boost::asio::any_io_executor io)
      : kind_(kind), agent_runs_(agent_runs), outcome_(std::move(outcome)), io_(std::move(io)) {}

  std::string_view kind() const noexcept override { return kind_; }
  bool agent_runs() const noexcept override { return agent_runs_; }

  void run(tool_call, std::function<void(tool_outcome)> done) override {
    boost::asio::post(io_, [done = std::move(done), o = outcome_]() mutable { done(std::move(o)); });
  }

 private:
  std::string kind_;
  bool agent_runs_;
  tool_outcome outcome_;
  boost::asio::any_io_executor io_;
};

}  // namespace

std::unique_ptr<executor> make_executor(const tool& t, boost::asio::any_io_executor io, const executor_limits& limits) {
  const std::string type = t.executor.value("type", "agent");
  if (type == "http") return detail::make_http_executor(t.executor, std::move(io), limits);
  if (type == "command") return detail::make_command_executor(t.executor, std::move(io), limits);
  if (type == "mcp") return detail::make_mcp_executor(t.executor, std::move(io), limits);
  if (type != "agent") {
    return detail::make_failing_executor(type, codes::executor_not_runnable, "unknown executor type `" + type + "`",
                                         std::move(io));
  }
  tool_outcome o;
  o.error_code = codes::executor_not_runnable;
  o.detail = "tool `" + t.id + "` is run by the agent, which answers with tool_result; baton does not run it";
  return std::make_unique<failing_executor>("agent", true, std::move(o), std::move(io));
}

namespace detail {

std::unique_ptr<executor> make_failing_executor(std::string_view kind, std::string code, std::string detail,
                                                boost::asio::any_io_executor io) {
  tool_outcome o;
  o.error_code = std::move(code);
  o.detail = std::move(detail);
  return std::make_unique<failing_executor>(kind, false, std::move(o), std::move(io));
}

std::chrono::milliseconds timeout_of(const json& config, const executor_limits& limits) {
  if (const auto it = config.find("timeout_ms"); it != config.end() && it->is_number_integer()) {
    return std::chrono::milliseconds(it->get<std::int64_t>());
  }
  return limits.default_timeout;
}

std::string call_body(const tool_call& call) {
  return render_json(json{{"decision", call.decision}, {"tool", call.tool}, {"arguments", call.arguments}}, false);
}

json output_from_text(std::string_view text) {
  json value;
  json_parse_error err;
  if (parse_json(text, value, err)) return value;
  return replace_invalid_utf8(text);
}


}  // namespace detail

}  // namespace baton::tools
