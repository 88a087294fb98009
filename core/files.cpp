#include "core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace baton {

std::optional<std::string> read_regular_file(const std::filesystem::path& path, std::size_t max_bytes,
                                             std::string& why) {
  const auto system_error = [&] {
    why = std::string("cannot read the file (") + std::strerror(errno) + ")";
    return std::nullopt;
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return system_error();
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_it{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return system_error();
  if (S_ISDIR(st.st_mode)) {
    why = "is a directory, not a file";
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    why = "is not a regular file";
    return std::nullopt;
  }
  if (static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    why = "is " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
          " such a file may be";
    return std::nullopt;
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error();
    if (n == 0) break;  // cut short since it was measured
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return text;
}

}  // namespace baton
