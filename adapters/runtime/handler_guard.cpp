#include "adapters/runtime/handler_guard.hpp"

namespace baton {

void run_io(boost::asio::io_context& ioc) noexcept {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("an I/O handler threw: {}; the server goes on", e.what());
    } catch (...) {
      spdlog::error("an I/O handler threw a non-standard exception; the server goes on");
    }
  }
}

}  // namespace baton
