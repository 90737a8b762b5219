// Process-wide settings of the CPU kernels' BLAS.
#include <cblas.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "gp/exec/device.h"

namespace gp::exec {

void set_cpu_threads(int threads) {
  use_best_blas_kernels();
  openblas_set_num_threads(std::max(threads, 1));
}

int cpu_threads() { return openblas_get_num_threads(); }

void flush_subnormals() {
#if defined(__x86_64__) || defined(__i386__)
  constexpr unsigned kFlushToZero = 0x8000;     // MXCSR.FTZ: subnormal results become 0
  constexpr unsigned kDenormalsAreZero = 0x40;  // MXCSR.DAZ: subnormal inputs read as 0
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
#elif defined(__aarch64__)
  uint64_t fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  fpcr |= uint64_t{1} << 24;  // FPCR.FZ
  asm volatile("msr fpcr, %0" : : "r"(fpcr));
#endif
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

Status check_cpu_threads(std::string_view flag, int threads) {
  const int cpus = usable_cpus();
  if (threads >= 1 && threads <= cpus) return ok_status();
  return invalid_argument(std::string(flag) + " = " + std::to_string(threads) + ", must be 1.." +
                          std::to_string(cpus) + " (the CPUs this process may run on)");
}

std::string cpu_blas_version() {
  const char* config = openblas_get_config();
  return config == nullptr ? "OpenBLAS" : std::string(config);
}

}  // namespace gp::exec
