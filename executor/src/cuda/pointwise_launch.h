// Launch functions of the element-wise kernels (pointwise_kernels.cu) in plain types, shared by
// the C++20 host code (pointwise_kernels.cc) and the C++17 CUDA code. Pointers are device
// pointers; each function queues its work on `stream` and returns cudaGetLastError()
// (cudaSuccess without launching when there is nothing to do). Backward kernels accumulate.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gp::exec::cuda {

// Over n floats.
cudaError_t launch_sigmoid_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t launch_tanh_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t launch_tanh_backward(const float* y, const float* dy, float* dx, int64_t n,
                                 cudaStream_t stream);
cudaError_t launch_sigmoid_backward(const float* y, const float* dy, float* dx, int64_t n,
                                    cudaStream_t stream);
cudaError_t launch_clip_forward(const float* x, float* y, float lo, float hi, int64_t n,
                                cudaStream_t stream);
cudaError_t launch_clip_backward(const float* x, const float* dy, float* dx, float lo, float hi,
                                 int64_t n, cudaStream_t stream);
cudaError_t launch_mul_forward(const float* a, const float* b, float* y, int64_t n,
                               cudaStream_t stream);
// da += dy * b.
cudaError_t launch_mul_backward(const float* dy, const float* b, float* da, int64_t n,
                                cudaStream_t stream);

// x [groups, len, inner] -> y [groups, 1, inner] times `scale`; backward broadcasts dy back.
cudaError_t launch_reduce_forward(const float* x, float* y, int64_t groups, int64_t len,
                                  int64_t inner, float scale, cudaStream_t stream);
cudaError_t launch_reduce_backward(const float* dy, float* dx, int64_t groups, int64_t len,
                                   int64_t inner, float scale, cudaStream_t stream);

// y [rows, width] = x + b (b broadcast over rows); db [width] += the column sums of dy.
cudaError_t launch_bias_add_forward(const float* x, const float* b, float* y, int64_t rows,
                                    int64_t width, cudaStream_t stream);
// y[r * width + j] = v[j] for rows r.
cudaError_t launch_broadcast_rows(const float* v, float* y, int64_t rows, int64_t width,
                                  cudaStream_t stream);
cudaError_t launch_bias_add_param_backward(const float* dy, float* db, int64_t rows, int64_t width,
                                           cudaStream_t stream);

}  // namespace gp::exec::cuda
