// The URLs baton calls (an http executor, the systemone engine, media URLs, the hub):
// `http://host[:port]/path`, and `https://` where the caller speaks TLS. The http executor makes no
// TLS connections, so there https is refused where the configuration loads rather than failing on
// the first call.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace baton {

struct http_url {
  std::string host;         // for the resolver: a name, an IPv4 address or an IPv6 address without brackets
  std::string port;         // "80" (https: "443") when the URL names none
  std::string host_header;  // host[:port] as written, brackets kept
  std::string target;       // path and query, "/" at least
  bool tls = false;         // https
};

// The parts of `url`, or nullopt with `reason` saying what is wrong; https only with `allow_https`.
std::optional<http_url> parse_http_url(std::string_view url, std::string& reason, bool allow_https = false);

}  // namespace baton
