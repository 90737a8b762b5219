// linear's forward as one cuBLASLt GEMM whose epilogue adds the bias and applies the activation
// (for gelu also writing the pre-activation that backward needs): the pass over the output that
// the hand-written path makes after its GEMM is saved.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_context.h"

namespace gp::exec::cuda {

class LtLinear {
 public:
  // nullptr when cuBLASLt is not in use on this device or the epilogue has nothing to fuse (no
  // bias and no activation) or cannot take the shape (gelu's pre-activation needs `out` % 8).
  // `act` is a kDenseAct* value.
  static std::unique_ptr<LtLinear> create(const CudaContext& ctx, int64_t in, int64_t out,
                                          bool bias, int act);
  ~LtLinear();

  // y [m, out] = act(x [m, in] W^T + bias), and pre_activation [m, out] = x W^T + bias for gelu.
  // False, with nothing queued, when cuBLASLt offers no algorithm for this call (the caller then
  // computes it by hand); failures of the queued GEMM are recorded in the context.
  bool forward(int64_t m, const float* x, const float* w, const float* bias, float* y,
               float* pre_activation) const;

 private:
  struct Plan;  // descriptors and algorithm of one row count and pointer alignment

  LtLinear(const CudaContext& ctx, int64_t in, int64_t out, bool bias, int act);
  const Plan* plan_for(int64_t m, const float* x, const float* w, const float* bias, const float* y,
                       const float* pre_activation) const;
  // Points the descriptor's epilogue at this call's bias and pre-activation (those it uses).
  bool point_epilogue(cublasLtMatmulDesc_t desc, const float* bias,
                      const float* pre_activation) const;

  const CudaContext& ctx_;
  int64_t in_, out_;
  bool bias_;
  int act_;
  // Plans are made on the first call of each shape and kept: later steps allocate nothing.
  // Guarded by the context's library mutex.
  mutable std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace gp::exec::cuda
