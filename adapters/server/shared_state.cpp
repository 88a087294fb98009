#include "adapters/server/shared_state.hpp"

namespace baton {

void session_hub::add(const std::shared_ptr<closable_session>& s) {
  std::lock_guard lock(mutex);
  sessions.emplace(s.get(), s);
}

void session_hub::remove(const closable_session* s) {
  std::lock_guard lock(mutex);
  sessions.erase(s);
}

std::size_t session_hub::size() {
  std::lock_guard lock(mutex);
  return sessions.size();
}

}  // namespace baton
