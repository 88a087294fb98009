// Certificates for the TLS tests, made at test time with OpenSSL (nothing committed): a private CA
// and leaves it signs for the names asked, P-256 keys, valid from an hour ago for a day.
#pragma once

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

namespace baton::test {

struct key_pair {
  std::string key_pem;
  std::string cert_pem;
};

class test_ca {
 public:
  test_ca() : key_(EVP_EC_gen("P-256")), cert_(X509_new()) {
    fill(cert_.get(), key_.get(), "baton test CA");
    X509_set_issuer_name(cert_.get(), X509_get_subject_name(cert_.get()));
    add(cert_.get(), cert_.get(), NID_basic_constraints, "critical,CA:TRUE");
    add(cert_.get(), cert_.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
    EXPECT_GT(X509_sign(cert_.get(), key_.get(), EVP_sha256()), 0);
  }

  std::string cert_pem() const { return pem(cert_.get()); }

  // A server certificate for `alt_names` ("DNS:localhost,IP:127.0.0.1"), signed by this CA.
  key_pair leaf(const std::string& alt_names) {
    const pkey_ptr key(EVP_EC_gen("P-256"));
    const x509_ptr cert(X509_new());
    fill(cert.get(), key.get(), "baton test server");
    X509_set_issuer_name(cert.get(), X509_get_subject_name(cert_.get()));
    add(cert_.get(), cert.get(), NID_basic_constraints, "CA:FALSE");
    add(cert_.get(), cert.get(), NID_subject_alt_name, alt_names.c_str());
    add(cert_.get(), cert.get(), NID_ext_key_usage, "serverAuth");
    EXPECT_GT(X509_sign(cert.get(), key_.get(), EVP_sha256()), 0);
    const bio_ptr out(BIO_new(BIO_s_mem()));
    PEM_write_bio_PrivateKey(out.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
    return {text(out.get()), pem(cert.get())};
  }

 private:
  struct free_pkey { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
  struct free_x509 { void operator()(X509* p) const { X509_free(p); } };
  struct free_bio { void operator()(BIO* p) const { BIO_free(p); } };
  using pkey_ptr = std::unique_ptr<EVP_PKEY, free_pkey>;
  using x509_ptr = std::unique_ptr<X509, free_x509>;
  using bio_ptr = std::unique_ptr<BIO, free_bio>;

  void fill(X509* cert, EVP_PKEY* key, const char* common_name) {
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), ++serial_);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
    X509_set_pubkey(cert, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name), -1, -1, 0);
  }

  static void add(X509* issuer, X509* cert, int nid, const char* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ASSERT_NE(ext, nullptr) << value;
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }

  static std::string text(BIO* b) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    return std::string(data, static_cast<std::size_t>(n));
  }

  static std::string pem(X509* cert) {
    const bio_ptr out(BIO_new(BIO_s_mem()));
    PEM_write_bio_X509(out.get(), cert);
    return text(out.get());
  }

  pkey_ptr key_;
  x509_ptr cert_;
  long serial_ = 0;
};

}  // namespace baton::test
