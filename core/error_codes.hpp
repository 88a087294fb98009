// Every error code baton answers with (the `code` of the one error body, docs/systemone.md and
// docs/protocol.md list them), named once: a name that is misspelt does not compile, and control
// flow compares names, not strings. The values are the wire's and never change.
#pragma once

#include "core/error.hpp"

namespace baton::codes {

// Media an engine could not read, the caller's to mend (engine/media/source.hpp, decode.hpp).
inline constexpr const char* invalid_media = "INVALID_MEDIA";
inline constexpr const char* media_source_refused = "MEDIA_SOURCE_REFUSED";
inline constexpr const char* media_unavailable = "MEDIA_UNAVAILABLE";
inline constexpr const char* media_too_large = "MEDIA_TOO_LARGE";

}  // namespace baton::codes

namespace baton {

// A media item refused as the caller's fault: missing, unreadable, too large, not media (a 4xx
// of the engine's media path). Not the engine's own failure.
inline bool is_media_refusal(const error& e) {
  return e.status >= 400 && e.status < 500 &&
         (e.code == codes::invalid_media || e.code == codes::media_source_refused || e.code == codes::media_unavailable ||
          e.code == codes::media_too_large);
}

}  // namespace baton
