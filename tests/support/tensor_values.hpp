// A reference tensor's values as a vector (the safetensors files of tests/data/vectors), for the tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/clef/model/safetensors.hpp"

namespace baton::test {

// Empty when `name` is absent; a size that does not fit T fails the calling test.
template <class T>
std::vector<T> tensor_values(const clef::safetensors_file& f, const std::string& name) {
  const clef::tensor_view* v = f.find(name);
  if (v == nullptr) return {};
  std::vector<T> out(static_cast<std::size_t>(v->numel()));
  EXPECT_EQ(v->bytes, out.size() * sizeof(T)) << name;
  std::memcpy(out.data(), v->data, v->bytes);
  return out;
}

}  // namespace baton::test
