#include "engine/clef/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <tuple>

namespace baton::clef {

namespace {

struct dtype_entry {
  const char* name;
  dtype type;
  std::size_t size;
};

constexpr dtype_entry dtype_table[] = {
    {"F32", dtype::f32, 4}, {"F16", dtype::f16, 2},  {"BF16", dtype::bf16, 2},
    {"F64", dtype::f64, 8}, {"I64", dtype::i64, 8},  {"I32", dtype::i32, 4},
    {"I16", dtype::i16, 2}, {"I8", dtype::i8, 1},    {"U8", dtype::u8, 1},
    {"BOOL", dtype::boolean, 1}, {"F8_E4M3", dtype::f8_e4m3, 1},
};

// The header is a JSON object; 100 MB is far above any real one (the 30B thinker's is ~3 MB).
constexpr std::uint64_t max_header_bytes = 100u << 20;

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::size_t dtype_size(dtype t) noexcept {
  for (const auto& e : dtype_table) {
    if (e.type == t) return e.size;
  }
  return 0;
}

const char* dtype_name(dtype t) noexcept {
  for (const auto& e : dtype_table) {
    if (e.type == t) return e.name;
  }
  return "?";
}

std::int64_t tensor_view::numel() const noexcept {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

// A SAX handler that only follows the nesting: false (stop) past `max` levels or on a syntax error.
struct depth_check : nlohmann::json_sax<nlohmann::json> {
  std::size_t depth = 0, max = 0;
  explicit depth_check(std::size_t m) : max(m) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth <= max; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth <= max; }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace

bool json_depth_within(std::string_view text, std::size_t max_depth) {
  depth_check check(max_depth);
  return nlohmann::json::sax_parse(text, &check);
}

mapped_file::mapped_file(const std::filesystem::path& path) {
  // Without blocking: a FIFO in a release would wait for a writer for good. Only a regular file is mapped.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) throw load_error(path.string() + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw load_error(path.string() + ": cannot stat: " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw load_error(path.string() + (S_ISDIR(st.st_mode) ? ": is a directory, not a file" : ": is not a regular file"));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = errno_text();
      ::close(fd);
      throw load_error(path.string() + ": cannot map: " + why);
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

mapped_file::mapped_file(mapped_file&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

mapped_file::~mapped_file() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

safetensors_file::safetensors_file(const std::filesystem::path& path) : path_(path), file_(path) {
  const std::string where = path.string();
  if (file_.size() < 8) throw load_error(where + ": truncated (no safetensors header)");
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file_.data(), 8);  // little-endian on every platform we build for
  if (header_bytes > max_header_bytes || header_bytes > file_.size() - 8) {
    throw load_error(where + ": truncated or not a safetensors file (header of " +
                     std::to_string(header_bytes) + " bytes in a file of " +
                     std::to_string(file_.size()) + ")");
  }
  const std::string_view header_text(reinterpret_cast<const char*>(file_.data() + 8), header_bytes);
  if (!json_depth_within(header_text, max_json_depth)) {
    throw load_error(where + ": the safetensors header is not valid JSON, or nested over " +
                     std::to_string(max_json_depth) + " levels");
  }
  nlohmann::json header = nlohmann::json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) throw load_error(where + ": the safetensors header is not a JSON object");

  const std::byte* data_begin = file_.data() + 8 + header_bytes;
  const std::size_t data_size = file_.size() - 8 - header_bytes;
  std::vector<std::tuple<std::uint64_t, std::uint64_t, std::string>> ranges;  // [begin, end) of each tensor's bytes
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string what = where + ": tensor " + name;
    if (!entry.is_object()) throw load_error(what + ": header entry is not an object");
    const auto dt = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string() || shape == entry.end() || !shape->is_array() ||
        offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
      throw load_error(what + ": header entry needs dtype, shape and data_offsets");
    }
    tensor_view view;
    bool known = false;
    for (const auto& e : dtype_table) {
      if (dt->get_ref<const std::string&>() == e.name) {
        view.type = e.type;
        known = true;
      }
    }
    if (!known) throw load_error(what + ": unsupported dtype " + dt->get<std::string>());
    // The byte size is checked as it grows: a wrapped product could match an empty data range.
    std::uint64_t expected = dtype_size(view.type);
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) throw load_error(what + ": shape must hold non-negative integers");
      const auto n = d.get<std::uint64_t>();
      if (n > INT64_MAX || __builtin_mul_overflow(expected, n, &expected) || expected > INT64_MAX) {
        throw load_error(what + ": shape is too large");
      }
      view.shape.push_back(static_cast<std::int64_t>(n));
    }
    if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      throw load_error(what + ": data_offsets must be non-negative integers");
    }
    const auto begin = (*offsets)[0].get<std::uint64_t>();
    const auto end = (*offsets)[1].get<std::uint64_t>();
    if (end < begin || end - begin != expected) {
      throw load_error(what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                       ") do not hold " + std::to_string(expected) + " bytes");
    }
    if (end > data_size) {
      throw load_error(what + ": data ends at byte " + std::to_string(end) + " but the file holds " +
                       std::to_string(data_size) + " (truncated shard)");
    }
    view.data = data_begin + begin;
    view.bytes = expected;
    if (end > begin) ranges.emplace_back(begin, end, name);
    tensors_.emplace(name, std::move(view));
  }
  // Two tensors on the same bytes would each read the other's values: the format forbids it.
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    const auto& [begin, end, name] = ranges[i];
    const auto& [before_begin, before_end, before] = ranges[i - 1];
    if (begin < before_end) {
      throw load_error(where + ": tensor " + name + " (bytes " + std::to_string(begin) + " to " + std::to_string(end) +
                       ") overlaps tensor " + before + " (to " + std::to_string(before_end) + ")");
    }
  }
}

const tensor_view* safetensors_file::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace baton::clef
