#include <gtest/gtest.h>

#include "adapters/server/inbox_assets.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

// The embedded bytes are the files in adapters/server/inbox/, whole (a raw string cut short or an
// encoding slip would show here).
TEST(inbox_assets, serve_the_page_files_byte_for_byte_with_their_content_types) {
  const auto dir = test::source_dir() / "adapters" / "server" / "inbox";
  struct want {
    std::string_view path;
    std::string_view content_type;
    const char* file;
  };
  for (const want& w : {want{"/inbox", "text/html; charset=utf-8", "index.html"},
                        want{"/inbox/", "text/html; charset=utf-8", "index.html"},
                        want{"/inbox/inbox.js", "text/javascript; charset=utf-8", "inbox.js"},
                        want{"/inbox/inbox.css", "text/css; charset=utf-8", "inbox.css"}}) {
    const inbox_asset* asset = find_inbox_asset(w.path);
    ASSERT_NE(asset, nullptr) << w.path;
    EXPECT_EQ(asset->content_type, w.content_type) << w.path;
    EXPECT_FALSE(asset->body.empty()) << w.path;
    // Not EXPECT_EQ: a mismatch would print both files whole.
    const std::string file = test::read_file(dir / w.file);
    EXPECT_TRUE(asset->body == file) << w.path << ": " << asset->body.size() << " bytes embedded, " << file.size()
                                     << " in " << w.file << " (a stale build?)";
  }
}

// The page names its script and style by the paths that serve them.
TEST(inbox_assets, the_page_loads_its_script_and_style_from_served_paths) {
  const std::string_view page = find_inbox_asset("/inbox")->body;
  EXPECT_NE(page.find(R"(src="/inbox/inbox.js")"), std::string_view::npos);
  EXPECT_NE(page.find(R"(href="/inbox/inbox.css")"), std::string_view::npos);
}

TEST(inbox_assets, other_paths_are_not_found) {
  for (std::string_view path : {"", "/", "/inbox/index.html", "/inbox.js", "/inbox/inbox.js/", "/inbox//",
                                "/INBOX", "/inbox/inbox.css?v=1", "/v1/escalations"})
    EXPECT_EQ(find_inbox_asset(path), nullptr) << path;
}

}  // namespace
}  // namespace baton
