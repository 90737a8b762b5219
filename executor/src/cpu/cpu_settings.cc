// Process-wide settings of the CPU kernels' BLAS.
#include <cblas.h>

#include <algorithm>
#include <string>

#include "gp/exec/device.h"

namespace gp::exec {

void set_cpu_threads(int threads) { openblas_set_num_threads(std::max(threads, 1)); }

int cpu_threads() { return openblas_get_num_threads(); }

std::string cpu_blas_version() {
  const char* config = openblas_get_config();
  return config == nullptr ? "OpenBLAS" : std::string(config);
}

}  // namespace gp::exec
