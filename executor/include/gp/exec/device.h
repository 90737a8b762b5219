// A device the executor runs a stage on: it names itself and creates the kernels for graph ops.
// The CPU device is the reference (executor/src/cpu/); an accelerated device is checked against
// it kernel by kernel. One process drives one device. No backend type appears here.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "gp/common/status.h"
#include "gp/exec/op_kernel.h"
#include "gp/graph/graph.h"

namespace gp::exec {

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string_view name() const = 0;  // "cpu", "cuda:0"
  // The kernel of a validated graph op on this device; InvalidArgument naming the op when the
  // device cannot run it.
  virtual Result<std::unique_ptr<OpKernel>> make_kernel(const graph::OpNode& op) const = 0;
};

// The host CPU (OpenBLAS GEMMs, plain loops elsewhere).
const Device& cpu_device();

// Threads the CPU kernels' GEMMs may use (OpenBLAS, process-wide). Executor ranks and the
// profiler set it (default 1: ranks sharing a host each get a core, and a profile measured with
// one thread predicts such a rank); values < 1 are treated as 1.
void set_cpu_threads(int threads);
int cpu_threads();
// The CPU kernels' BLAS, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64".
std::string cpu_blas_version();

// "cpu" -> the CPU device; "cuda:N" -> UNIMPLEMENTED until the CUDA backend exists; anything
// else -> InvalidArgument naming the flag.
Result<const Device*> find_device(std::string_view name);

}  // namespace gp::exec
