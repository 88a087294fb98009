// Test helpers: read files from the repository and its test vectors (tests/data, read-only).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.hpp"

namespace baton::test {

// tests/data: the reference vectors and wire examples, each folder with its PROVENANCE.md.
inline std::filesystem::path data_dir() { return BATON_TEST_DATA; }
inline std::filesystem::path source_dir() { return BATON_SOURCE_DIR; }

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << p;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A file of raw values of T (little-endian, as numpy's tofile writes them), e.g. a generator's
// float32 or int32 arrays.
template <class T>
std::vector<T> raw_values(const std::filesystem::path& p) {
  const std::string text = read_file(p);
  std::vector<T> out(text.size() / sizeof(T));
  std::memcpy(out.data(), text.data(), out.size() * sizeof(T));
  return out;
}

// Parses with baton's own parser (key order, int/float distinction and big integers kept).
inline json read_json(const std::filesystem::path& p) {
  json out;
  json_parse_error err;
  const std::string text = read_file(p);
  EXPECT_TRUE(parse_json(text, out, err, {1000})) << p << ": " << err.message;
  return out;
}

inline json parse(std::string_view text) {
  json out;
  json_parse_error err;
  EXPECT_TRUE(parse_json(text, out, err)) << text << ": " << err.message;
  return out;
}

}  // namespace baton::test
