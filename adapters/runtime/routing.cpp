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
  // One request, or two stages (tools::routed_in_two_stages: routing.max_options, or more than one
  // request of the engine's holds, or of the fallback engine's: both engines are then asked in two
  // stages, since a turn's questions are the same for either).
  if (tools::routed_in_two_stages(r->registry, config.max_options, limits) ||
      (fallback_limits && tools::routed_in_two_stages(r->registry, config.max_options, *fallback_limits))) {
    auto stages = tools::compile_stages(r->registry, limits);
    if (!stages) {
      return make_error(422, codes::invalid_registry, config.registry.string() + ": in two stages (routing.max_options " +
                                                         std::to_string(config.max_options) + "): " + stages.error().message);
    }
    r->questions = stages->first;
    r->schema_hash = stages->schema_hash;
    r->stages = std::move(*stages);
  } else {
    auto questions = tools::compile_questions(r->registry, limits);
    if (!questions) return questions.error();
    r->questions = std::move(*questions);
    r->schema_hash = tools::schema_hash(r->questions);
  }
  // The fallback engine is asked the same questions: they must fit its limits too (a remote
  // server's are the wire's defaults), or every fallback would fail.
  if (fallback_limits) {
    std::optional<error> misfit;
    if (r->stages) {
      if (auto fits = tools::compile_stages(r->registry, *fallback_limits); !fits) misfit = fits.error();
    } else if (auto fits = tools::compile_questions(r->registry, *fallback_limits); !fits) {
      misfit = fits.error();
    }
    if (misfit) {
      return make_error(422, codes::invalid_registry, config.registry.string() +
                                                     ": the registry's questions do not fit the fallback engine "
                                                     "(routing.fallback): " + misfit->message);
    }
  }
  for (const tools::tool& t : r->registry.tools) r->executors.emplace(t.id, tools::make_executor(t, io, config.executors));
  return std::shared_ptr<const routing_snapshot>(std::move(r));
}

std::string executor_kind(const routing_snapshot& routing, const std::string& tool) {
  const auto it = routing.executors.find(tool);
  return it == routing.executors.end() ? "agent" : std::string(it->second->kind());
}

}  // namespace baton
