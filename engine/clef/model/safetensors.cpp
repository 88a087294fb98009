#include "engine/clef/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

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
    {"BOOL", dtype::boolean, 1},
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

mapped_file::mapped_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw load_error(path.string() + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw load_error(path.string() + ": cannot stat: " + why);
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
  const auto* header_begin = reinterpret_cast<const char*>(file_.data() + 8);
  nlohmann::json header = nlohmann::json::parse(header_begin, header_begin + header_bytes, nullptr,
                                                /*allow_exceptions=*/false);
  if (!header.is_object()) throw load_error(where + ": the safetensors header is not a JSON object");

  const std::byte* data_begin = file_.data() + 8 + header_bytes;
  const std::size_t data_size = file_.size() - 8 - header_bytes;
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
    tensors_.emplace(name, std::move(view));
  }
}

const tensor_view* safetensors_file::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace baton::clef
