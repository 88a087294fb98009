// The client side of TLS for baton's outgoing HTTPS calls (the systemone engine, media URLs): TLS
// 1.2 or newer, the server's certificate chained to the given CAs and naming the URL's host.
// Header-only, so that baton_core needs no libssl: its users link OpenSSL::SSL themselves.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl.hpp>

#include <filesystem>
#include <string>

namespace baton::tls_client {

// Peers verified against `ca_file` (PEM), or the system's CAs when it is empty.
inline void configure(boost::asio::ssl::context& ctx, const std::filesystem::path& ca_file,
                      boost::system::error_code& ec) {
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  ctx.set_verify_mode(boost::asio::ssl::verify_peer);
  if (ca_file.empty()) {
    ctx.set_default_verify_paths(ec);
  } else {
    ctx.load_verify_file(ca_file.string(), ec);
  }
}

// Before the handshake: SNI for a host name (never an address, RFC 6066) and the host check.
template <class Stream>
void expect_host(Stream& s, const std::string& host, boost::system::error_code& ec) {
  boost::system::error_code not_address;
  boost::asio::ip::make_address(host, not_address);
  const bool address = !not_address;
  if (!address && !SSL_set_tlsext_host_name(s.native_handle(), host.c_str())) {
    ec = boost::system::error_code(static_cast<int>(::ERR_get_error()), boost::asio::error::get_ssl_category());
    return;
  }
  // host_name_verification refuses a certificate for another host without saying why: the
  // verify result says it, for the error's message.
  s.set_verify_callback([check = boost::asio::ssl::host_name_verification(host), address](
                            bool preverified, boost::asio::ssl::verify_context& ctx) {
    if (check(preverified, ctx)) return true;
    if (preverified) {
      X509_STORE_CTX_set_error(ctx.native_handle(), address ? X509_V_ERR_IP_ADDRESS_MISMATCH : X509_V_ERR_HOSTNAME_MISMATCH);
    }
    return false;
  });
}

// The certificate's verify failure after a failed handshake, or empty when it verified.
inline std::string verify_failure(SSL* s) {
  const long verified = SSL_get_verify_result(s);
  return verified == X509_V_OK ? std::string() : "certificate verify failed: " + std::string(X509_verify_cert_error_string(verified));
}

}  // namespace baton::tls_client
