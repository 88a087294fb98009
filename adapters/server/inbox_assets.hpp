// The reviewer inbox page (adapters/inbox/: HTML, JS, CSS), embedded in the binary at build time
// by embed_inbox.cmake so that `baton serve` needs no files beside it.
#pragma once

#include <string_view>

namespace baton {

struct inbox_asset {
  std::string_view content_type;
  std::string_view body;
};

// The inbox page's files by request path ("/inbox", "/inbox/", "/inbox/inbox.js", "/inbox/inbox.css"); null for any other path.
const inbox_asset* find_inbox_asset(std::string_view path);

}  // namespace baton
