#include "adapters/cli/cli_args.hpp"

#include <algorithm>
#include <charconv>
#include <memory>
#include <ostream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "adapters/cli/exit_codes.hpp"
#include "core/hf_cache.hpp"

namespace baton {

std::optional<std::size_t> positive_number(std::string_view text) {
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n == 0) return std::nullopt;
  return n;
}

int usage_error(std::ostream& err, const std::string& what, const char* command) {
  err << "baton" << (command ? std::string(" ") + command : std::string()) << ": " << what << "\n"
      << "Try 'baton" << (command ? std::string(" ") + command : std::string()) << " --help'.\n";
  return exit_usage;
}

std::optional<std::string> parse_args(std::span<const std::string_view> args,
                                      std::initializer_list<std::string_view> flags,
                                      std::initializer_list<std::string_view> switches, command_args& out) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      out.help = true;
      continue;
    }
    if (std::find(switches.begin(), switches.end(), a) != switches.end()) {
      out.values[a] = "";
      continue;
    }
    const std::string_view name = a.substr(0, a.find('='));
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) {
      if (name.size() < a.size()) {
        out.values[name] = a.substr(name.size() + 1);
      } else if (i + 1 < args.size()) {
        out.values[name] = args[++i];
      } else {
        return std::string(name) + " needs a value";
      }
      continue;
    }
    if (a.size() > 1 && a[0] == '-') return "unknown option " + std::string(a);
    if (out.file) return std::string("more than one input file");
    out.file = std::string(a);
  }
  return std::nullopt;
}

// Reads a positive count flag into `out` when it is given; false when it is not a positive number.
bool read_count(const command_args& args, std::string_view flag, std::size_t& out) {
  const auto v = args.get(flag);
  if (!v) return true;
  const auto n = positive_number(*v);
  if (n) out = *n;
  return n.has_value();
}

bool overwrites_an_input(const std::filesystem::path& output, std::initializer_list<std::filesystem::path> inputs) {
  for (const auto& input : inputs) {
    std::error_code ec;
    if (!input.empty() && std::filesystem::equivalent(output, input, ec) && !ec) return true;
  }
  return false;
}

std::optional<std::filesystem::path> model_dir_arg(std::string_view arg, const char* command, std::ostream& err) {
  auto dir = hf_cache::resolve_model_dir(arg, {}, hf_cache::default_root());
  if (!dir) {
    err << "baton " << command << ": " << dir.error().message << "\n";
    return std::nullopt;
  }
  return std::move(*dir);
}

void log_to_stderr() {
  // Made, not registered by name (stderr_color_mt would throw the second time).
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("baton", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
}

}  // namespace baton
