// __global__ optimizer updates and the gradient accumulation of received messages (see
// optimizer_launch.h). Every product and sum is an explicitly
// rounded intrinsic, so that nvcc cannot contract them into FMAs: the CPU rounds each operation,
// and an update that differs in the last bit makes runs on the two devices drift apart.
#include <cuda_runtime.h>

#include "cuda/optimizer_launch.h"

namespace gp::exec::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 65535 * 8;  // grid-stride loops cover the rest

#define GP_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The gradient an update reads: g, or g + wd * w with weight decay (as the CPU rounds it).
__device__ __forceinline__ float decayed(float g, float w, float wd) {
  return wd > 0 ? __fadd_rn(g, __fmul_rn(wd, w)) : g;
}

__global__ void sgd_kernel(float lr, float wd, float* w, const float* g, int64_t n) {
  GP_GRID_STRIDE(i, n) { w[i] = __fsub_rn(w[i], __fmul_rn(lr, decayed(g[i], w[i], wd))); }
}

__global__ void momentum_kernel(float lr, float mu, float wd, float* w, const float* g, float* s,
                                int64_t n) {
  GP_GRID_STRIDE(i, n) {
    const float si = __fadd_rn(__fmul_rn(mu, s[i]), decayed(g[i], w[i], wd));
    s[i] = si;
    w[i] = __fsub_rn(w[i], __fmul_rn(lr, si));
  }
}

__global__ void adam_kernel(OptimizerScalars k, float* w, const float* g, float* m, float* v,
                            int64_t n) {
  GP_GRID_STRIDE(i, n) {
    const float gi = decayed(g[i], w[i], k.weight_decay);
    const float mi = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, gi));
    const float vi =
        __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float num = __fmul_rn(k.lr, __fmul_rn(mi, k.c1));
    const float den = __fadd_rn(__fsqrt_rn(__fmul_rn(vi, k.c2)), k.eps);
    w[i] = __fsub_rn(w[i], __fdiv_rn(num, den));
  }
}

__global__ void accumulate_kernel(float* dst, const float* src, int64_t n) {
  GP_GRID_STRIDE(i, n) { dst[i] = __fadd_rn(dst[i], src[i]); }
}

unsigned grid_for(int64_t n) {
  const int64_t b = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

}  // namespace

cudaError_t launch_optimizer_update(const OptimizerScalars& k, float* weights, const float* grads,
                                    float* state, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const unsigned grid = grid_for(n);
  switch (k.update) {
    case OptimizerUpdate::kMomentum:
      momentum_kernel<<<grid, kBlock, 0, stream>>>(k.lr, k.momentum, k.weight_decay, weights, grads,
                                                   state, n);
      break;
    case OptimizerUpdate::kAdam:
      adam_kernel<<<grid, kBlock, 0, stream>>>(k, weights, grads, state, state + n, n);
      break;
    case OptimizerUpdate::kSgd:
      sgd_kernel<<<grid, kBlock, 0, stream>>>(k.lr, k.weight_decay, weights, grads, n);
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_accumulate(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  accumulate_kernel<<<grid_for(n), kBlock, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}

}  // namespace gp::exec::cuda
