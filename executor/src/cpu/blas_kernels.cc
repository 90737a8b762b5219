// Which OpenBLAS kernels the CPU backend's GEMMs run.
//
// An OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU model once, when
// it loads. Debian 12's 0.3.21 falls back to the generic Prescott (SSE3) kernels on Intel family-6
// models newer than its tables, such as Emerald Rapids (model 207): sgemm of a 256x128x512
// product ran at 20 GFLOP/s there, against 56-104 GFLOP/s with its SkylakeX kernels, which that
// CPU supports. So when OpenBLAS chose a pre-AVX2 kernel set on a CPU with AVX2 or AVX-512, the
// set is chosen again the way OpenBLAS's own OPENBLAS_CORETYPE does, before the first GEMM. A
// user's OPENBLAS_CORETYPE is left alone.
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "gp/exec/device.h"

extern "C" char* openblas_get_corename(void);

namespace gp::exec {
namespace {

// OpenBLAS's x86 kernel sets without AVX2: what it falls back to on a CPU it does not know.
bool is_pre_avx2_core(std::string_view core) {
  constexpr std::array<std::string_view, 18> kOld = {
      "prescott", "core2",        "penryn",    "dunnington", "nehalem",     "atom",
      "katmai",   "coppermine",   "northwood", "banias",     "sandybridge", "barcelona",
      "opteron",  "opteron_sse3", "nano",      "bobcat",     "unknown",     "generic"};
  std::string lower(core);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const auto name : kOld) {
    if (lower == name) return true;
  }
  return false;
}

// The widest OpenBLAS kernel set this CPU supports (GCC's checks include the OS saving the
// wider registers); empty when it has no AVX2. SkylakeX for AVX-512: 0.3.21 accepts no newer
// name in OPENBLAS_CORETYPE, and its sgemm is the one the newer sets use.
std::string best_core_for_this_cpu() {
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512cd");
  if (avx512) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

BlasKernelChoice choose() {
  BlasKernelChoice out;
  const char* loaded = openblas_get_corename();
  out.loaded = loaded == nullptr ? "" : loaded;
  out.running = out.loaded;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return out;  // the user chose
  if (!is_pre_avx2_core(out.loaded)) return out;
  const std::string better = best_core_for_this_cpu();
  if (better.empty()) return out;
  // Present only in DYNAMIC_ARCH builds: a build for one CPU has nothing to choose among.
  using Hook = void (*)();
  auto quit = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<Hook>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (quit == nullptr || init == nullptr) return out;
  // gotoblas_dynamic_init reads OPENBLAS_CORETYPE. It is unset again at once: a process we start
  // makes its own check (a forced set on a host without those instructions would crash it).
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
  const char* now = openblas_get_corename();
  out.running = now == nullptr ? "" : now;
  out.changed = out.running != out.loaded;
  return out;
}

}  // namespace

const BlasKernelChoice& use_best_blas_kernels() {
  static std::once_flag once;
  static BlasKernelChoice choice;
  std::call_once(once, [] { choice = choose(); });
  return choice;
}

}  // namespace gp::exec
