#include "core/http_url.hpp"

#include <algorithm>

namespace baton {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

std::optional<http_url> parse_http_url(std::string_view url, std::string& reason, bool allow_https) {
  const bool tls = url.starts_with("https://");
  if (tls && !allow_https) {
    reason = "https is not supported (the http executor has no TLS client): use an http:// URL";
    return std::nullopt;
  }
  if (!tls && !url.starts_with("http://")) {
    reason = allow_https ? "must be an http:// or https://host[:port]/path URL" : "must be an http://host[:port]/path URL";
    return std::nullopt;
  }
  const std::string_view scheme = tls ? "https://" : "http://";
  // The request line takes the target as it is: no spaces, controls or raw non-ASCII bytes.
  if (std::any_of(url.begin(), url.end(), [](char c) {
        const auto b = static_cast<unsigned char>(c);
        return b <= 0x20 || b >= 0x7f;
      })) {
    reason = "has spaces, control characters or non-ASCII bytes (percent-encode them)";
    return std::nullopt;
  }
  if (url.find('#') != std::string_view::npos) {
    reason = "has a fragment (#…), which is never sent";
    return std::nullopt;
  }
  const std::string_view rest = url.substr(scheme.size());
  const std::size_t end = std::min(rest.find('/'), rest.find('?'));
  const std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos) {
    reason = "has user info (user@host), which is not supported";
    return std::nullopt;
  }

  http_url u;
  u.tls = tls;
  std::string_view port_part;
  if (authority.starts_with('[')) {
    const std::size_t close = authority.find(']');
    const std::string_view v6 = authority.substr(1, close == std::string_view::npos ? 0 : close - 1);
    if (close == std::string_view::npos || v6.empty() ||
        !std::all_of(v6.begin(), v6.end(), [](char c) { return is_hex(c) || c == ':' || c == '.'; })) {
      reason = "has a bad IPv6 host (expected [hex:digits])";
      return std::nullopt;
    }
    u.host = v6;
    port_part = authority.substr(close + 1);
  } else {
    const std::size_t colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (u.host.empty() || !std::all_of(u.host.begin(), u.host.end(),
                                       [](char c) { return is_alnum(c) || c == '-' || c == '.' || c == '_'; })) {
      reason = "has no host or a bad one (A-Za-z0-9.-_ or [IPv6])";
      return std::nullopt;
    }
    port_part = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  u.port = tls ? "443" : "80";
  if (!port_part.empty()) {
    const std::string_view digits = port_part.substr(1);
    const bool numeric = !digits.empty() && digits.size() <= 5 && std::all_of(digits.begin(), digits.end(), is_digit);
    const int port = numeric ? std::stoi(std::string(digits)) : 0;
    if (port_part[0] != ':' || port < 1 || port > 65535) {
      reason = "has a bad port (1 to 65535)";
      return std::nullopt;
    }
    u.port = digits;
  }
  u.host_header = authority;
  u.target = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (u.target.starts_with('?')) u.target.insert(0, "/");
  return u;
}

}  // namespace baton
