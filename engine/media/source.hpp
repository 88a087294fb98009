// A media item's bytes, for the decoders (decode.hpp), from wherever the request says they are:
// inline base64, a local file under the configured roots, or an http(s) URL on an allowed host.
// Raw items (decoded pixels and samples from the C++ API) are not loaded: the engine reads
// `item.raw` after check_raw.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/request.hpp"

namespace baton::media {

// What the engine's configuration allows (`engine.media` in baton.yaml, docs/systemone.md).
struct source_policy {
  std::vector<std::filesystem::path> roots;  // directories local paths may name; empty: no local paths
  bool urls = false;                         // http(s) URLs at all
  std::vector<std::string> url_hosts;        // host names (or addresses) URLs may name, exactly, without case
  std::filesystem::path ca_file;             // https: the CAs (PEM) a server must chain to; empty: the system's
                                             // (read on the first https item that names them, then kept)
  // Per item, whatever its source. An engine passes the smaller of this and its model's
  // per-item limit: a path's or URL's size is unknown until it is loaded.
  std::size_t max_bytes = 64u << 20;
  std::chrono::milliseconds url_timeout{10000};  // one URL, from resolving its host to the body's last byte
};

// The item's bytes. `where` names it in every message ("images[2]: …"). Failures:
// 422 INVALID_MEDIA      inline base64 that is not strict base64;
// 422 MEDIA_SOURCE_REFUSED  local paths or URLs not enabled, a path that resolves (after `..` and
//                        symlinks) outside every root, a host not in url_hosts, a redirect (never
//                        followed), a raw item;
// 422 MEDIA_UNAVAILABLE  no such file under the roots, a directory or other non-regular file, an
//                        unreadable file, a connection or TLS failure, a status other than 200;
// 413 MEDIA_TOO_LARGE    over max_bytes;
// 504 MEDIA_TIMEOUT      a URL not loaded within url_timeout.
// A relative path is tried against each root in order; an absolute one must lie under a root.
result<std::vector<std::byte>> load_bytes(const media_item& item, const source_policy& policy, std::string_view where);

// 422 INVALID_MEDIA unless `raw` has the shape its field needs: `images` one frame of pixels and
// no samples, `videos` frames of pixels (samples optional: the soundtrack), `audio` samples and no
// pixels; pixels.size() = frames × height × width × 3; samples finite.
result<void> check_raw(const raw_media& raw, std::string_view field, std::string_view where);

}  // namespace baton::media
