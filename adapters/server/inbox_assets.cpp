#include "adapters/server/inbox_assets.hpp"

#include <array>
#include <utility>

namespace baton {

// Defined in the source embed_inbox.cmake generates from adapters/inbox/.
namespace inbox_files {
extern const std::string_view index_html;
extern const std::string_view inbox_js;
extern const std::string_view inbox_css;
}  // namespace inbox_files

const inbox_asset* find_inbox_asset(std::string_view path) {
  static const inbox_asset page{"text/html; charset=utf-8", inbox_files::index_html};
  static const inbox_asset script{"text/javascript; charset=utf-8", inbox_files::inbox_js};
  static const inbox_asset style{"text/css; charset=utf-8", inbox_files::inbox_css};
  static const std::array<std::pair<std::string_view, const inbox_asset*>, 4> by_path{{
      {"/inbox", &page},
      {"/inbox/", &page},
      {"/inbox/inbox.js", &script},
      {"/inbox/inbox.css", &style},
  }};
  for (const auto& [p, asset] : by_path)
    if (p == path) return asset;
  return nullptr;
}

}  // namespace baton
