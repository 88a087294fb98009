#include "adapters/runtime/escalation_reads.hpp"

#include <boost/asio/post.hpp>

#include "adapters/runtime/escalation_rules.hpp"
#include "core/error_codes.hpp"

namespace baton {

escalation_reads::~escalation_reads() { thread_.join(); }

void escalation_reads::list(std::string_view status, std::size_t limit, answer done) {
  if (status != "pending" && status != "resolved" && status != "all") {
    return done(make_error(422, codes::invalid_request, "status must be pending, resolved or all"));
  }
  protocol::escalation_list list;
  if (status != "resolved") list.escalations = desk_.pending_objects(limit);
  if (status == "pending") return done(protocol::render(list));
  boost::asio::post(thread_, [this, limit, list = std::move(list), done = std::move(done)]() mutable {
    auto resolved = desk_.reader().latest_resolutions(limit);
    if (!resolved) return done(resolved.error());
    const auto routing = desk_.routing();
    for (const log::escalation_history& h : *resolved) list.escalations.push_back(history_object(*routing, h));
    done(protocol::render(list));
  });
}

void escalation_reads::get(const std::string& id, answer done) {
  if (auto pending = desk_.pending_object(id)) return done(protocol::render(*pending));
  boost::asio::post(thread_, [this, id, done = std::move(done)] {
    auto found = desk_.reader().escalation(id);
    if (!found) return done(found.error());
    if (!*found) return done(no_escalation(id));
    done(protocol::render(history_object(*desk_.routing(), **found)));
  });
}

}  // namespace baton
