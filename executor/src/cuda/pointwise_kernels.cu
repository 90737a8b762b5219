// __global__ kernels of the element-wise ops (see pointwise_launch.h), in the CPU reference's
// order of operations (cpu/pointwise_kernels.cc); products the CPU rounds before an addition use
// __fmul_rn so that nvcc does not contract them into FMAs.
#include <cuda_runtime.h>

#include "cuda/pointwise_launch.h"

namespace gp::exec::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 65535 * 8;  // grid-stride loops cover the rest

unsigned grid_for(int64_t items) {
  const int64_t b = (items + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

#define GP_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void sigmoid_forward_kernel(const float* x, float* y, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = 1.0f / (1.0f + expf(-x[i])); }
}
__global__ void sigmoid_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  GP_GRID_STRIDE(i, n) { dx[i] += __fmul_rn(__fmul_rn(dy[i], y[i]), 1.0f - y[i]); }
}
__global__ void tanh_forward_kernel(const float* x, float* y, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = tanhf(x[i]); }
}
__global__ void tanh_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  GP_GRID_STRIDE(i, n) { dx[i] += __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(y[i], y[i]))); }
}
__global__ void clip_forward_kernel(const float* x, float* y, float lo, float hi, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = fminf(fmaxf(x[i], lo), hi); }
}
__global__ void clip_backward_kernel(const float* x, const float* dy, float* dx, float lo, float hi,
                                     int64_t n) {
  GP_GRID_STRIDE(i, n) {
    if (x[i] > lo && x[i] < hi) dx[i] += dy[i];
  }
}
__global__ void mul_forward_kernel(const float* a, const float* b, float* y, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = __fmul_rn(a[i], b[i]); }
}
__global__ void mul_backward_kernel(const float* dy, const float* b, float* da, int64_t n) {
  GP_GRID_STRIDE(i, n) { da[i] += __fmul_rn(dy[i], b[i]); }
}
// One thread per output cell, summing along the axis in order, as the CPU does.
__global__ void reduce_forward_kernel(const float* x, float* y, int64_t groups, int64_t len,
                                      int64_t inner, float scale) {
  GP_GRID_STRIDE(k, groups * inner) {
    const int64_t g = k / inner, i = k % inner;
    const float* xg = x + g * len * inner + i;
    float s = 0;
    for (int64_t l = 0; l < len; ++l) s += xg[l * inner];
    y[k] = __fmul_rn(s, scale);
  }
}
__global__ void reduce_backward_kernel(const float* dy, float* dx, int64_t groups, int64_t len,
                                       int64_t inner, float scale) {
  GP_GRID_STRIDE(k, groups * len * inner) {
    const int64_t g = k / (len * inner), i = k % inner;
    dx[k] += __fmul_rn(scale, dy[g * inner + i]);
  }
}
__global__ void bias_add_forward_kernel(const float* x, const float* b, float* y, int64_t rows,
                                        int64_t width) {
  GP_GRID_STRIDE(k, rows * width) { y[k] = x[k] + b[k % width]; }
}
__global__ void broadcast_rows_kernel(const float* v, float* y, int64_t rows, int64_t width) {
  GP_GRID_STRIDE(k, rows * width) { y[k] = v[k % width]; }
}
// One thread per column, rows in order: deterministic, and as the CPU sums them.
__global__ void bias_add_param_backward_kernel(const float* dy, float* db, int64_t rows,
                                               int64_t width) {
  GP_GRID_STRIDE(j, width) {
    float s = db[j];
    for (int64_t r = 0; r < rows; ++r) s += dy[r * width + j];
    db[j] = s;
  }
}

}  // namespace

cudaError_t launch_sigmoid_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  sigmoid_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}
cudaError_t launch_sigmoid_backward(const float* y, const float* dy, float* dx, int64_t n,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  sigmoid_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}
cudaError_t launch_tanh_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  tanh_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}
cudaError_t launch_tanh_backward(const float* y, const float* dy, float* dx, int64_t n,
                                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  tanh_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}
cudaError_t launch_clip_forward(const float* x, float* y, float lo, float hi, int64_t n,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  clip_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, lo, hi, n);
  return cudaGetLastError();
}
cudaError_t launch_clip_backward(const float* x, const float* dy, float* dx, float lo, float hi,
                                 int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  clip_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, dy, dx, lo, hi, n);
  return cudaGetLastError();
}
cudaError_t launch_mul_forward(const float* a, const float* b, float* y, int64_t n,
                               cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  mul_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, b, y, n);
  return cudaGetLastError();
}
cudaError_t launch_mul_backward(const float* dy, const float* b, float* da, int64_t n,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  mul_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dy, b, da, n);
  return cudaGetLastError();
}
cudaError_t launch_reduce_forward(const float* x, float* y, int64_t groups, int64_t len,
                                  int64_t inner, float scale, cudaStream_t stream) {
  if (groups * inner <= 0) return cudaSuccess;
  reduce_forward_kernel<<<grid_for(groups * inner), kBlock, 0, stream>>>(x, y, groups, len, inner,
                                                                         scale);
  return cudaGetLastError();
}
cudaError_t launch_reduce_backward(const float* dy, float* dx, int64_t groups, int64_t len,
                                   int64_t inner, float scale, cudaStream_t stream) {
  if (groups * len * inner <= 0) return cudaSuccess;
  reduce_backward_kernel<<<grid_for(groups * len * inner), kBlock, 0, stream>>>(dy, dx, groups, len,
                                                                                inner, scale);
  return cudaGetLastError();
}
cudaError_t launch_bias_add_forward(const float* x, const float* b, float* y, int64_t rows,
                                    int64_t width, cudaStream_t stream) {
  if (rows * width <= 0) return cudaSuccess;
  bias_add_forward_kernel<<<grid_for(rows * width), kBlock, 0, stream>>>(x, b, y, rows, width);
  return cudaGetLastError();
}
cudaError_t launch_broadcast_rows(const float* v, float* y, int64_t rows, int64_t width,
                                  cudaStream_t stream) {
  if (rows * width <= 0) return cudaSuccess;
  broadcast_rows_kernel<<<grid_for(rows * width), kBlock, 0, stream>>>(v, y, rows, width);
  return cudaGetLastError();
}
cudaError_t launch_bias_add_param_backward(const float* dy, float* db, int64_t rows, int64_t width,
                                           cudaStream_t stream) {
  if (rows * width <= 0) return cudaSuccess;
  bias_add_param_backward_kernel<<<grid_for(width), kBlock, 0, stream>>>(dy, db, rows, width);
  return cudaGetLastError();
}

}  // namespace gp::exec::cuda
