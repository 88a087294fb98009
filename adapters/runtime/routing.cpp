#include "adapters/runtime/routing.hpp"

#include "core/error_codes.hpp"
#include "tools/mcp_client.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

result<std::shared_ptr<const routing_snapshot>> load_routing(const server_config& config, const request_limits& limits,
                                                             const request_limits* fallback_limits,
                                                             boost::asio::any_io_executor io) {
  auto r = std::make_shared<routing_snapshot>();
  // MCP servers are listed as their tools will run: without the variables executors withhold. On
  // a reload, a server already running lists its tools itself (what changed is in that process).
  auto registry = tools::load_registry(config.registry, limits, [&](const tools::mcp_server_config& server) {
    if (auto live = tools::list_live_mcp_tools(server, io, config.executors)) return std::move(*live);
    return tools::discover_mcp_tools(server, config.executors);
  });
  if (!registry) return registry.error();
  r->registry = std::move(*registry);
  auto policy = policies::load_policy(config.policy, r->registry);
  if (!policy) return policy.error();
  r->policy = std::move(*policy);
  auto questions = tools::compile_questions(r->registry, limits);
  if (!questions) return questions.error();
  // The fallback engine is asked the same questions: they must fit its limits too (a remote
  // server's are the wire's defaults), or every fallback would fail.
  if (fallback_limits) {
    if (auto fits = tools::compile_questions(r->registry, *fallback_limits); !fits) {
      return make_error(422, codes::invalid_registry, config.registry.string() +
                                                     ": the registry's questions do not fit the fallback engine "
                                                     "(routing.fallback): " + fits.error().message);
    }
  }
  r->questions = std::move(*questions);
  r->schema_hash = tools::schema_hash(r->questions);
  for (const tools::tool& t : r->registry.tools) r->executors.emplace(t.id, tools::make_executor(t, io, config.executors));
  return std::shared_ptr<const routing_snapshot>(std::move(r));
}

std::string executor_kind(const routing_snapshot& routing, const std::string& tool) {
  const auto it = routing.executors.find(tool);
  return it == routing.executors.end() ? "agent" : std::string(it->second->kind());
}

}  // namespace baton
