// Reading a whole file that a person named (a configuration, a release's JSON, a tokenizer).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

namespace baton {

// The whole of `path` when it is a regular file of at most `max_bytes`; else none, with `why`
// ("is a directory, not a file", "is not a regular file", "is N bytes, more than …", "cannot
// read the file (…)"). It is opened without blocking and checked before it is read: a FIFO
// would wait for a writer for good, and a device such as /dev/zero never ends.
std::optional<std::string> read_regular_file(const std::filesystem::path& path, std::size_t max_bytes,
                                             std::string& why);

}  // namespace baton
