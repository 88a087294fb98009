// The repository stands on its own: nothing refers to a folder beside the clone, and the test data
// in tests/data is what each folder's PROVENANCE.md lists, byte for byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/sha256.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

namespace fs = std::filesystem;

// Build trees, installed npm packages and run-time state are not sources.
bool skipped_dir(const fs::path& dir) {
  const std::string name = dir.filename().string();
  return name == ".git" || name == "node_modules" || name == "var" || name == "__pycache__" ||
         name.starts_with("build");
}

// Every regular file of the source tree, outside the skipped folders, relative to it.
std::vector<fs::path> source_files() {
  std::vector<fs::path> out;
  const fs::path root = test::source_dir();
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && skipped_dir(it->path())) {
      it.disable_recursion_pending();
    } else if (it->is_regular_file()) {
      out.push_back(fs::relative(it->path(), root));
    }
  }
  return out;
}

TEST(repository, refers_to_nothing_beside_the_clone) {
  // Spelled in pieces so that this file does not match itself.
  const std::vector<std::string> needles = {std::string("..") + "/shared", std::string("BATON_") + "SHARED_DIR"};
  std::vector<std::string> found;
  const auto files = source_files();
  ASSERT_GT(files.size(), 100u) << "the source tree was not found at " << test::source_dir();
  for (const fs::path& f : files) {
    const std::string text = test::read_file(test::source_dir() / f);
    for (const std::string& n : needles) {
      if (text.find(n) != std::string::npos) found.push_back(f.string() + ": " + n);
    }
  }
  EXPECT_TRUE(found.empty()) << "cite tests/data, the project's docs or a public source instead:\n"
                             << ::testing::PrintToString(found);
}

// A comment or a doc that sends its reader to a design or spec document the clone does not have
// leaves them nowhere: it points at docs/ or the public source instead, or says the thing itself.
TEST(repository, names_no_document_a_clone_lacks) {
  // Spelled in pieces so that this file does not match itself.
  const std::vector<std::string> needles = {std::string("DESIGN") + " §", std::string("clef-engine") + ".md",
                                            std::string("qwen3-omni-thinker") + ".md",
                                            std::string("systemone-api") + ".md"};
  std::vector<std::string> found;
  for (const fs::path& f : source_files()) {
    const std::string text = test::read_file(test::source_dir() / f);
    for (const std::string& n : needles) {
      if (text.find(n) != std::string::npos) found.push_back(f.string() + ": " + n);
    }
  }
  EXPECT_TRUE(found.empty()) << ::testing::PrintToString(found);
}

// Every error code is a named constant of core/error_codes.hpp: its string stands nowhere else in
// the production code, so a code is spelt once and a misspelt name does not compile.
TEST(repository, error_codes_are_spelt_once) {
  const fs::path root = test::source_dir();
  const std::string header = test::read_file(root / "core/error_codes.hpp");
  std::vector<std::string> codes;
  for (std::size_t at = header.find("= \""); at != std::string::npos; at = header.find("= \"", at + 1)) {
    codes.push_back(header.substr(at + 2, header.find('"', at + 3) - at - 1));  // the string with its quotes
  }
  ASSERT_GT(codes.size(), 80u) << "core/error_codes.hpp has no codes";
  std::vector<std::string> found;
  for (const fs::path& f : source_files()) {
    const std::string top = f.begin()->string();
    const std::string ext = f.extension().string();
    if ((top != "core" && top != "engine" && top != "tools" && top != "policies" && top != "adapters") ||
        (ext != ".cpp" && ext != ".hpp") || f == "core/error_codes.hpp") {
      continue;
    }
    const std::string text = test::read_file(root / f);
    for (const std::string& code : codes) {
      if (text.find(code) != std::string::npos) found.push_back(f.string() + ": " + code);
    }
  }
  EXPECT_TRUE(found.empty()) << "name them from core/error_codes.hpp (codes::…):\n" << ::testing::PrintToString(found);
}

// The ```sha256 block of a PROVENANCE.md: file (relative to its folder) → hex digest.
std::map<std::string, std::string> listed_sums(const fs::path& provenance) {
  std::map<std::string, std::string> out;
  std::istringstream lines(test::read_file(provenance));
  bool in_block = false;
  for (std::string line; std::getline(lines, line);) {
    if (!in_block) {
      in_block = line == "```sha256";
    } else if (line == "```") {
      break;
    } else {
      // sha256sum's format: 64 hex digits, two spaces, the path.
      EXPECT_TRUE(line.size() > 66 && line.compare(64, 2, "  ") == 0) << provenance << ": " << line;
      if (line.size() > 66) out[line.substr(66)] = line.substr(0, 64);
    }
  }
  return out;
}

TEST(test_data, files_match_their_provenance) {
  const fs::path data = test::data_dir();
  std::set<fs::path> covered;  // folders with a PROVENANCE.md
  std::size_t checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(data)) {
    if (entry.path().filename() != "PROVENANCE.md") continue;
    const fs::path dir = entry.path().parent_path();
    covered.insert(dir);
    const auto sums = listed_sums(entry.path());
    EXPECT_FALSE(sums.empty()) << entry.path() << " lists no files";
    std::set<std::string> present;
    for (const auto& f : fs::recursive_directory_iterator(dir)) {
      if (f.is_regular_file() && f.path() != entry.path()) present.insert(fs::relative(f.path(), dir).generic_string());
    }
    std::set<std::string> listed;
    for (const auto& [file, sum] : sums) {
      listed.insert(file);
      if (!present.contains(file)) continue;
      EXPECT_EQ(sha256_hex(test::read_file(dir / file)), "sha256:" + sum) << (dir / file) << " differs from its provenance";
      ++checked;
    }
    EXPECT_EQ(present, listed) << entry.path() << " must list exactly the files of its folder";
  }
  EXPECT_GE(checked, 50u);
  // Every data file lies under a folder that says where it comes from.
  for (const auto& f : fs::recursive_directory_iterator(data)) {
    if (!f.is_regular_file() || f.path().parent_path() == data) continue;
    bool under = false;
    for (fs::path p = f.path().parent_path(); p != data && !under; p = p.parent_path()) under = covered.contains(p);
    EXPECT_TRUE(under) << f.path() << " has no PROVENANCE.md above it";
  }
}

}  // namespace
}  // namespace baton
