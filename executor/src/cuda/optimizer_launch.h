// Launch function of the optimizer update (optimizer_kernels.cu), in plain types so that the
// C++20 host code (cuda_device.cc) and the C++17 CUDA code share it. Pointers are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gp::exec::cuda {

enum class OptimizerUpdate : int { kSgd, kMomentum, kAdam };

// The scalars of Optimizer::StepConstants, computed on the host exactly as the CPU computes them.
struct OptimizerScalars {
  OptimizerUpdate update = OptimizerUpdate::kSgd;
  float lr = 0;
  float momentum = 0;
  float beta1 = 0, beta2 = 0, eps = 0;
  float one_minus_beta1 = 0, one_minus_beta2 = 0;
  float c1 = 0, c2 = 0;
  float weight_decay = 0;  // > 0: every update reads g + weight_decay * w
};

// One update of n parameters, element by element as Optimizer::apply does it on the CPU (same
// operations in the same order, no contraction into FMAs): SGD w -= lr g; momentum
// s = mu s + g, w -= lr s (state: s[n]); Adam m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g g,
// w -= lr (m c1) / (sqrt(v c2) + eps) (state: m[n] then v[n]). Queued on `stream`; returns
// cudaGetLastError() (cudaSuccess without launching when n == 0).
cudaError_t launch_optimizer_update(const OptimizerScalars& k, float* weights, const float* grads,
                                    float* state, int64_t n, cudaStream_t stream);

// dst[i] += src[i] for n floats (a received gradient onto the stage's own), rounded as on the
// CPU. Queued on `stream`; returns cudaGetLastError().
cudaError_t launch_accumulate(float* dst, const float* src, int64_t n, cudaStream_t stream);

}  // namespace gp::exec::cuda
