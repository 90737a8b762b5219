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

// "cpu" -> the CPU device; "cuda:N" -> UNIMPLEMENTED until the CUDA backend exists; anything
// else -> InvalidArgument naming the flag.
Result<const Device*> find_device(std::string_view name);

}  // namespace gp::exec
