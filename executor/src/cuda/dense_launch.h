// Launch functions of the dense family's __global__ kernels (dense_kernels.cu): linear's bias and
// activation, embedding bag, attention's softmax, layer norm, and the shared column-sum reduction.
// Plain types only: included by both the C++20 host code and the C++17 nvcc translation unit.
// Every function queues its work on `stream` (no synchronization) and returns cudaGetLastError()
// after launching (cudaSuccess when there is nothing to do). All pointers are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gp::exec::cuda {

// Linear's activation, as an int across the language boundary.
inline constexpr int kDenseActNone = 0;
inline constexpr int kDenseActRelu = 1;
inline constexpr int kDenseActGelu = 2;

// Over a row-major [rows, cols] pre-activation z (bias may be null): z += bias (per row), then
// y = act(z). z may equal y (act none or relu); for gelu z keeps the biased pre-activation.
cudaError_t launch_linear_bias_act(float* z, float* y, const float* bias, int64_t rows,
                                   int64_t cols, int act, cudaStream_t stream);

// dz = dy * act'(.) over n elements: relu reads its output y, gelu its pre-activation z.
cudaError_t launch_linear_act_backward(const float* dy, const float* y, const float* z, float* dz,
                                       int64_t n, int act, cudaStream_t stream);

// m[r, :] += bias for every row of a row-major [rows, cols] matrix.
cudaError_t launch_add_bias_rows(float* m, const float* bias, int64_t rows, int64_t cols,
                                 cudaStream_t stream);

// out[j] += sum over rows of m[r, j]: deterministic (fixed reduction order, no atomics).
cudaError_t launch_add_column_sums(const float* m, int64_t rows, int64_t cols, float* out,
                                   cudaStream_t stream);

// y[g, :] = sum (or mean) of w[ids[g, k], :] over the bag's ids that are not `padding` (an id no
// table row has, e.g. INT64_MIN, for none); a bag of padding only is 0.
cudaError_t launch_embedding_bag_forward(const void* ids, bool ids32, const float* w, float* y,
                                         int64_t groups, int64_t bag_size, int64_t num_rows,
                                         int64_t dim, bool mean, int64_t padding,
                                         cudaStream_t stream);

// dw[ids[g, k], :] += scale_g * dy[g, :] over the ids that are not padding (atomic scatter, so
// the summation order is not fixed).
cudaError_t launch_embedding_bag_backward(const void* ids, bool ids32, const float* dy, float* dw,
                                          int64_t groups, int64_t bag_size, int64_t num_rows,
                                          int64_t dim, bool mean, int64_t padding,
                                          cudaStream_t stream);

// In-place numerically stable softmax of each row of a row-major [rows, cols] matrix.
cudaError_t launch_softmax_rows(float* p, int64_t rows, int64_t cols, cudaStream_t stream);

// In place, given the softmax output p: dp = p * (dp - rowsum(dp * p)) for each row.
cudaError_t launch_softmax_rows_backward(const float* p, float* dp, int64_t rows, int64_t cols,
                                         cudaStream_t stream);

// y = (x - mean) * rstd * gamma + beta per row of [rows, cols], biased variance; stats[2r] =
// mean, stats[2r + 1] = rstd.
cudaError_t launch_layer_norm_forward(const float* x, const float* gamma, const float* beta,
                                      float* y, float* stats, int64_t rows, int64_t cols, float eps,
                                      cudaStream_t stream);

// dx += rstd * (g - mean(g) - xh * mean(g * xh)) per row, with xh the normalized x, g = dy*gamma.
cudaError_t launch_layer_norm_backward_input(const float* x, const float* dy, const float* gamma,
                                             const float* stats, float* dx, int64_t rows,
                                             int64_t cols, cudaStream_t stream);

// dgamma += sum_r dy * xh; dbeta += sum_r dy (either may be null); deterministic.
cudaError_t launch_layer_norm_backward_params(const float* x, const float* dy, const float* stats,
                                              float* dgamma, float* dbeta, int64_t rows,
                                              int64_t cols, cudaStream_t stream);

}  // namespace gp::exec::cuda
