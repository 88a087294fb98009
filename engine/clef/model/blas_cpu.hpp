// OpenBLAS picks its kernels from the CPU model at load. Debian 12's OpenBLAS 0.3.21 does not know
// recent Xeons and falls back to SSE3 "Prescott" kernels, which makes fp32 matmul (and so the
// thinker on the CPU) three to five times slower. The kernel set can only be chosen through the
// environment before the library loads, hence a re-exec at the very start of a program.
#pragma once

#include <string>

namespace baton::clef {

// The kernel set OpenBLAS chose ("" when libtorch's BLAS is not OpenBLAS).
std::string blas_core_name();

// The OPENBLAS_CORETYPE this CPU should use when OpenBLAS fell back to a generic kernel set
// ("SkylakeX" with AVX-512, "Haswell" with AVX2 and FMA); "" when nothing needs changing.
std::string better_blas_core();

// Whether this CPU multiplies bf16 natively (avx512_bf16 or AMX-BF16). Without either, libtorch's
// bf16 matmuls are emulated and fp32 is the faster dtype (docs/performance.md).
bool cpu_has_native_bf16();

// When better_blas_core() names a kernel set and OPENBLAS_CORETYPE is unset, sets it and
// re-executes this program with the same arguments (/proc/self/exe). Returns only when no
// re-exec was needed or it failed.
void reexec_with_better_blas_core(char** argv);

}  // namespace baton::clef
