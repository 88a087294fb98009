// `baton ARGS` run in the test's own process (run_cli), with its exit status and both streams.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/cli/cli.hpp"

namespace baton::test {

struct cli_result {
  int code;
  std::string out;
  std::string err;
};

// `input` is its standard input.
inline cli_result cli(std::vector<std::string_view> args, const std::string& input = "") {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = run_cli(args, in, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace baton::test
