// n values of T ending exactly where an inaccessible page begins, so a kernel that reads or writes
// past a buffer's end crashes the test instead of passing by luck.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <stdexcept>

namespace baton::test {

template <class T>
class guarded {
 public:
  explicit guarded(std::size_t n) : size_(n) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t bytes = n * sizeof(T);
    span_ = (bytes + page - 1) / page * page + page;
    base_ = ::mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) throw std::runtime_error("mmap failed");
    char* end = static_cast<char*>(base_) + span_ - page;
    if (::mprotect(end, page, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
    data_ = reinterpret_cast<T*>(end - bytes);
  }
  guarded(const guarded&) = delete;
  guarded& operator=(const guarded&) = delete;
  ~guarded() { ::munmap(base_, span_); }
  T* data() const { return data_; }
  T& operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return size_; }

 private:
  void* base_ = nullptr;
  std::size_t span_ = 0, size_ = 0;
  T* data_ = nullptr;
};

}  // namespace baton::test
