// What every `baton` subcommand shares: its argument parser, usage errors, count flags and where its
// log lines go.
#pragma once

#include <cstddef>
#include <filesystem>
#include <initializer_list>
#include <iosfwd>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace baton {

// A command's arguments: flags with a value (`--flag value` or `--flag=value`), switches, -h or
// --help, and at most one positional argument (an input FILE, a SQL query, a decision id).
struct command_args {
  std::map<std::string_view, std::string_view, std::less<>> values;  // flag -> value, switch -> ""
  std::optional<std::string> file;
  bool help = false;

  std::optional<std::string_view> get(std::string_view flag) const {
    const auto it = values.find(flag);
    return it == values.end() ? std::nullopt : std::optional<std::string_view>(it->second);
  }
  bool has(std::string_view flag) const { return values.contains(flag); }
};

// The usage problem, if any.
std::optional<std::string> parse_args(std::span<const std::string_view> args,
                                      std::initializer_list<std::string_view> flags,
                                      std::initializer_list<std::string_view> switches, command_args& out);

std::optional<std::size_t> positive_number(std::string_view text);

// Reads a positive count flag into `out` when it is given; false when it is not a positive number.
bool read_count(const command_args& args, std::string_view flag, std::size_t& out);

// Writes "baton COMMAND: what" and a hint to `err`; returns exit_usage (64).
int usage_error(std::ostream& err, const std::string& what, const char* command);

// Whether writing `output` would overwrite one of `inputs` (the same file, by whatever path);
// a path that does not exist yet is none of them.
bool overwrites_an_input(const std::filesystem::path& output, std::initializer_list<std::filesystem::path> inputs);

// A --model argument as every command takes it (a directory, or ORG/NAME[@REV] in the Hugging
// Face cache) resolved to a directory; nullopt once "baton COMMAND: why" is on `err` (exit 66).
std::optional<std::filesystem::path> model_dir_arg(std::string_view arg, const char* command, std::ostream& err);

// Sends spdlog's default logger (the engines' start-up lines, the server's log) to standard
// error: standard output carries a command's results (JSON lines, the listening line). Once per
// process, before run_cli; calling it again is harmless.
void log_to_stderr();

}  // namespace baton
