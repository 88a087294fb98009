#include "core/sha256.hpp"

#include <openssl/evp.h>

#include <new>

namespace baton {

struct sha256::state {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~state() { EVP_MD_CTX_free(ctx); }
};

// OpenSSL fails here only when it cannot allocate: reported as such.
sha256::sha256() : state_(std::make_unique<state>()) {
  if (state_->ctx == nullptr || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
}

sha256::~sha256() = default;

void sha256::update(const void* data, std::size_t size) {
  if (EVP_DigestUpdate(state_->ctx, data, size) != 1) throw std::bad_alloc();
}

std::string sha256::digest() {
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(state_->ctx, bytes, &size) != 1) throw std::bad_alloc();
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex = "sha256:";
  for (unsigned int i = 0; i < size; ++i) {
    hex += digits[bytes[i] >> 4];
    hex += digits[bytes[i] & 15];
  }
  return hex;
}

std::string sha256_hex(std::string_view bytes) {
  sha256 h;
  h.update(bytes);
  return h.digest();
}

}  // namespace baton
