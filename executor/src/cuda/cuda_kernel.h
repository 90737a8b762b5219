// CudaKernel: the base of the CUDA kernels of the simple and element-wise ops. It holds the
// context and the op's name for error messages (forward and backward return nothing, so
// failures are recorded in the context). Private to gp_cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda/cuda_context.h"
#include "gp/exec/op_kernel.h"
#include "gp/model/graph.h"

namespace gp::exec::cuda {

class CudaKernel : public OpKernel {
 public:
  CudaKernel(const model::OpNode& op, const CudaContext& ctx)
      : ctx_(ctx), forward_what_(name(op) + " forward"), backward_what_(name(op) + " backward") {}

 protected:
  cudaStream_t stream() const { return ctx_.stream; }
  bool check_forward(cudaError_t e) const { return ctx_.check(e, forward_what_.c_str()); }
  bool check_backward(cudaError_t e) const { return ctx_.check(e, backward_what_.c_str()); }
  // Device-to-device copy of n floats on the stream.
  cudaError_t copy(float* dst, const float* src, int64_t n) const {
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float),
                           cudaMemcpyDeviceToDevice, ctx_.stream);
  }

 private:
  static std::string name(const model::OpNode& op) {
    return "ops[" + std::to_string(op.index) + "] '" + op.proto->id() + "' (" + op.proto->type() +
           ")";
  }

  const CudaContext& ctx_;
  std::string forward_what_, backward_what_;
};

}  // namespace gp::exec::cuda
