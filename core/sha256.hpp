// sha256 digests spelled "sha256:<64 hex digits>": model fingerprints, registry and schema hashes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace baton {

// Incremental: update() as data arrives, then digest() once.
class sha256 {
 public:
  sha256();
  ~sha256();
  sha256(const sha256&) = delete;
  sha256& operator=(const sha256&) = delete;

  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  std::string digest();  // "sha256:…"

 private:
  struct state;
  std::unique_ptr<state> state_;
};

std::string sha256_hex(std::string_view bytes);

}  // namespace baton
