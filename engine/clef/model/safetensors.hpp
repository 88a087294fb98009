// Memory-mapped safetensors files: the header is parsed once, tensor data is never copied here.
// Loading happens at start-up, so problems are thrown as load_error naming the file and tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace baton::clef {

class load_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// f8_e4m3: FP8 releases' weights (1 sign, 4 exponent, 3 mantissa bits, bias 7, no infinities).
enum class dtype : std::uint8_t { f32, f16, bf16, f64, i64, i32, i16, i8, u8, boolean, f8_e4m3 };

std::size_t dtype_size(dtype t) noexcept;
const char* dtype_name(dtype t) noexcept;  // the safetensors spelling: "F32", "BF16", ...

struct tensor_view {
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;  // inside the read-only mapping
  std::size_t bytes = 0;

  std::int64_t numel() const noexcept;
};

// Whether `text` is valid JSON nested at most `max_depth` deep, checked by a SAX pass that builds
// nothing: nlohmann's parser holds a document of any depth (100 MB of "[" took 8 GB before it
// was refused).
bool json_depth_within(std::string_view text, std::size_t max_depth);
// The nesting a release's JSON (a safetensors header, config.json, the index) may have.
inline constexpr std::size_t max_json_depth = 64;

// A read-only private mapping of a whole file. Pages are read from disk only when touched.
class mapped_file {
 public:
  explicit mapped_file(const std::filesystem::path& path);
  mapped_file(mapped_file&& other) noexcept;
  mapped_file& operator=(mapped_file&&) = delete;
  mapped_file(const mapped_file&) = delete;
  ~mapped_file();

  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

class safetensors_file {
 public:
  // Maps `path` and validates its header: every tensor's dtype, shape and byte range must be
  // consistent and inside the file (a truncated shard fails here, naming the first tensor cut).
  explicit safetensors_file(const std::filesystem::path& path);

  const std::filesystem::path& path() const noexcept { return path_; }
  const std::map<std::string, tensor_view, std::less<>>& tensors() const noexcept { return tensors_; }
  const tensor_view* find(std::string_view name) const;

 private:
  std::filesystem::path path_;
  mapped_file file_;
  std::map<std::string, tensor_view, std::less<>> tensors_;
};

}  // namespace baton::clef
