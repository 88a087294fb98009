// One accepted connection, plain HTTP until a WebSocket upgrade: each request's head is admitted or
// refused by http_api before its body is read; an admitted upgrade becomes a WebSocket session
// (websocket_session.hpp).
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <memory>

#include "adapters/server/shared_state.hpp"

namespace baton {

void start_http_session(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot);

}  // namespace baton
