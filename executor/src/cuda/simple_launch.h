// Launch functions of the simple and layout kernels (simple_kernels.cu), in plain types so that
// the C++20 host code (simple_kernels.cc) and the C++17 CUDA code share them. All pointers are
// device pointers; every function queues its work on `stream` and returns cudaGetLastError()
// (cudaSuccess without launching when there is nothing to do).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gp::exec::cuda {

// Element-wise over n floats.
cudaError_t launch_relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t launch_relu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                 cudaStream_t stream);
// exact: x Phi(x) with erf (torch's nn.GELU()); else the tanh approximation.
cudaError_t launch_gelu_forward(const float* x, float* y, int64_t n, bool exact,
                                cudaStream_t stream);
cudaError_t launch_gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool exact,
                                 cudaStream_t stream);
// y = factor * x.
cudaError_t launch_scale(const float* x, float* y, float factor, int64_t n, cudaStream_t stream);
// y += alpha * x.
cudaError_t launch_accumulate(const float* x, float* y, float alpha, int64_t n,
                              cudaStream_t stream);

// Softmax over rows of `cols` floats; backward adds y * (dy - <dy, y>) into dx.
cudaError_t launch_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols,
                                   cudaStream_t stream);
cudaError_t launch_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows,
                                    int64_t cols, cudaStream_t stream);

// For b in [0, blocks): dst[b * dst_pitch + c] (+)= src[b * src_pitch + c], c in [0, width)
// (pitches in floats). The strided copies of concat and slice.
cudaError_t launch_copy_blocks(const float* src, int64_t src_pitch, float* dst, int64_t dst_pitch,
                               int64_t blocks, int64_t width, bool accumulate, cudaStream_t stream);

// loss[s] = mean over n of (pred - target)^2; backward: g = 2 dloss[s] / n * (pred - target),
// dpred += g, dtarget -= g (either may be null).
cudaError_t launch_mse_loss_forward(const float* pred, const float* target, float* loss,
                                    int64_t batch, int64_t n, cudaStream_t stream);
cudaError_t launch_mse_loss_backward(const float* pred, const float* target, const float* dloss,
                                     float* dpred, float* dtarget, int64_t batch, int64_t n,
                                     cudaStream_t stream);

// Cross-entropy of batch * positions rows of `classes` logits with one label per row (int32 or
// int64). Forward writes lse[r] = logsumexp(row r), terms[r] = lse[r] - z[r, label] and
// loss[s] = sum of the sample's terms / positions. Backward adds
// dloss[s] / positions * (softmax(z)[j] - [j == label]) into dz. An out-of-range label traps the
// kernel (the CPU reference aborts).
cudaError_t launch_cross_entropy_forward(const float* z, const void* labels, bool labels32,
                                         float* lse, float* terms, float* loss, int64_t batch,
                                         int64_t positions, int64_t classes, cudaStream_t stream);
cudaError_t launch_cross_entropy_backward(const float* z, const void* labels, bool labels32,
                                          const float* lse, const float* dloss, float* dz,
                                          int64_t batch, int64_t positions, int64_t classes,
                                          cudaStream_t stream);

// A per-sample permutation of n elements, walked over the output: for output offset o,
// src(o) = sum_d (o / out[d]) * src[d] with o reduced modulo out[d] after each d (out: the
// output's row-major strides, descending; src: the input stride of output dim d).
inline constexpr int kMaxTransposeRank = 8;
struct TransposeStrides {
  int rank = 0;
  int64_t out[kMaxTransposeRank] = {};
  int64_t src[kMaxTransposeRank] = {};
  int64_t base = 0;  // input offset of the output's first element (a windowed transpose)
};
// y[s, o] = x[s, base + src(o)]; n_in and n_out are the elements per sample.
cudaError_t launch_transpose_forward(const float* x, float* y, const TransposeStrides& strides,
                                     int64_t batch, int64_t n_in, int64_t n_out,
                                     cudaStream_t stream);
// dx[s, base + src(o)] += dy[s, o].
cudaError_t launch_transpose_backward(const float* dy, float* dx, const TransposeStrides& strides,
                                      int64_t batch, int64_t n_in, int64_t n_out,
                                      cudaStream_t stream);

}  // namespace gp::exec::cuda
