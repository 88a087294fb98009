#include <iostream>
#include <string_view>
#include <vector>

#include "adapters/cli/cli.hpp"
#include "engine/clef/model/blas_cpu.hpp"

int main(int argc, char** argv) {
  baton::clef::reexec_with_better_blas_core(argv);
  std::ios::sync_with_stdio(false);
  baton::log_to_stderr();
  std::vector<std::string_view> args(argv + 1, argv + argc);
  return baton::run_cli(args, std::cin, std::cout, std::cerr);
}
