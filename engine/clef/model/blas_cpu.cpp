#include "engine/clef/model/blas_cpu.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string_view>

namespace baton::clef {

std::string blas_core_name() {
  using corename_fn = char* (*)();
  const auto fn = reinterpret_cast<corename_fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return fn ? std::string(fn()) : std::string();
}

std::string better_blas_core() {
  // The old kernel sets OpenBLAS falls back to for a CPU model it does not know.
  static constexpr std::array<std::string_view, 6> generic = {"Prescott", "Core2",     "Penryn",
                                                              "Dunnington", "Nehalem", "Atom"};
  const std::string core = blas_core_name();
  bool fallback = false;
  for (const auto g : generic) fallback = fallback || core == g;
  if (!fallback) return {};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return {};
}

bool cpu_has_native_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
}

void reexec_with_better_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice, or our re-exec
  const std::string core = better_blas_core();
  if (core.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_CORETYPE");  // execv failed: go on with the kernels we have
}

}  // namespace baton::clef
