// A fresh directory under the system's temporary one for a test, removed with everything in it
// when the object goes (also when an assertion ends the test early).
#pragma once

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace baton::test {

class scratch_dir {
 public:
  // <tmp>/<prefix>-XXXXXX, made by mkdtemp: unique, and readable by its owner only.
  explicit scratch_dir(std::string_view prefix = "baton") {
    std::string pattern = (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a directory like " + pattern);
    path_ = pattern;
  }
  ~scratch_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  operator const std::filesystem::path&() const noexcept { return path_; }  // NOLINT: a path wherever one is taken
  std::filesystem::path operator/(const std::filesystem::path& p) const { return path_ / p; }

 private:
  std::filesystem::path path_;
};

}  // namespace baton::test
