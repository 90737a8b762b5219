// CUDA kernels of resize (nearest or bilinear, separable taps). Mirrors
// executor/src/cpu/upsample_kernels.cc, in its float arithmetic order (explicit roundings: no
// contraction into FMAs). The gradient is gathered over the transposed tap lists, one thread per
// input element, so there are no atomics and the result is deterministic.
#include <cstdint>

#include "cuda/upsample_launch.h"

namespace gp::exec::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__global__ void resize_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      ResizeAxisTable rows, ResizeAxisTable cols, int64_t h,
                                      int64_t w, int64_t ho, int64_t wo, int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t ow = e % wo, oh = (e / wo) % ho, p = e / (wo * ho);
    const float* xp = x + p * h * w;
    float v = 0.0f;
    for (int i = 0; i < 2; ++i) {
      const ResizeTap th = rows.forward[2 * oh + i];
      for (int j = 0; j < 2; ++j) {
        const ResizeTap tw = cols.forward[2 * ow + j];
        v = __fadd_rn(v, __fmul_rn(__fmul_rn(th.weight, tw.weight), xp[th.index * w + tw.index]));
      }
    }
    y[e] = v;
  }
}

__global__ void resize_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx,
                                       ResizeAxisTable rows, ResizeAxisTable cols, int64_t h,
                                       int64_t w, int64_t ho, int64_t wo, int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t iw = e % w, ih = (e / w) % h, p = e / (w * h);
    const float* dyp = dy + p * ho * wo;
    float v = 0.0f;
    for (int64_t k = rows.offsets[ih]; k < rows.offsets[ih + 1]; ++k) {
      const ResizeTap th = rows.backward[k];
      for (int64_t l = cols.offsets[iw]; l < cols.offsets[iw + 1]; ++l) {
        const ResizeTap tw = cols.backward[l];
        v = __fadd_rn(v, __fmul_rn(__fmul_rn(th.weight, tw.weight), dyp[th.index * wo + tw.index]));
      }
    }
    dx[e] = __fadd_rn(dx[e], v);
  }
}

}  // namespace

cudaError_t launch_resize_forward(const float* x, float* y, ResizeAxisTable rows,
                                  ResizeAxisTable cols, int64_t planes, int64_t h, int64_t w,
                                  int64_t ho, int64_t wo, cudaStream_t stream) {
  const int64_t total = planes * ho * wo;
  if (total == 0) return cudaSuccess;
  resize_forward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(x, y, rows, cols, h, w, ho, wo,
                                                                    total);
  return cudaGetLastError();
}

cudaError_t launch_resize_backward(const float* dy, float* dx, ResizeAxisTable rows,
                                   ResizeAxisTable cols, int64_t planes, int64_t h, int64_t w,
                                   int64_t ho, int64_t wo, cudaStream_t stream) {
  const int64_t total = planes * h * w;
  if (total == 0) return cudaSuccess;
  resize_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(dy, dx, rows, cols, h, w, ho,
                                                                     wo, total);
  return cudaGetLastError();
}

}  // namespace gp::exec::cuda
