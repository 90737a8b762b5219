// Launch functions of the vision family's __global__ kernels (vision_kernels.cu), with plain types
// so that both the host C++ (vision_kernels.cc) and nvcc (C++17) can include this header. Every
// function queues its work on `stream` and returns cudaGetLastError() after launching. Pointers
// are device pointers; images are per-sample [C, H, W], batch-major.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device_api/vision_window.h"

namespace gp::exec::cuda {

using gp::exec::VisionWindow;

// ---- conv2d ----

// cols [batch, c*kh*kw, ho*wo]: row (c*kh + i)*kw + j, column oh*wo + ow of sample s holds
// x[s, c, oh*sh - ph + i, ow*sw - pw + j], zero outside the image.
cudaError_t launch_conv2d_im2col(const float* x, float* cols, const VisionWindow& w, int64_t batch,
                                 cudaStream_t stream);

// y[s, o, p] += bias[o] for y [batch, channels, plane].
cudaError_t launch_conv2d_add_bias(float* y, const float* bias, int64_t batch, int64_t channels,
                                   int64_t plane, cudaStream_t stream);

// db[o] += sum over samples and positions of dy[s, o, :] (dy [batch, channels, plane]).
cudaError_t launch_conv2d_bias_grad(const float* dy, float* db, int64_t batch, int64_t channels,
                                    int64_t plane, cudaStream_t stream);

// dx += col2im(W^T dy) for weight [out, c / groups, kh, kw] and dy [batch, out, ho, wo], each
// input cell gathering its own contributions (from its group's filters only).
cudaError_t launch_conv2d_input_grad(const float* weight, const float* dy, float* dx,
                                     const VisionWindow& w, int64_t out, int64_t groups,
                                     int64_t batch, cudaStream_t stream);

// ---- pooling ----

// y = the maximum of each window's image cells; idx (same shape as y) gets the winner's index in
// its channel plane as the bits of an int32.
cudaError_t launch_max_pool2d_forward(const float* x, float* y, float* idx, const VisionWindow& w,
                                      int64_t batch, cudaStream_t stream);

// dx[winner] += dy for every output cell.
cudaError_t launch_max_pool2d_backward(const float* dy, const float* idx, float* dx,
                                       const VisionWindow& w, int64_t batch, cudaStream_t stream);

// y = the mean of each window: its image cells' sum over kh*kw (include_pad) or over the number
// of image cells in it.
cudaError_t launch_avg_pool2d_forward(const float* x, float* y, const VisionWindow& w,
                                      bool include_pad, int64_t batch, cudaStream_t stream);

cudaError_t launch_avg_pool2d_backward(const float* dy, float* dx, const VisionWindow& w,
                                       bool include_pad, int64_t batch, cudaStream_t stream);

// ---- batch norm ----

// x [batch, channels, inner]: normalised with the call's per-channel mean and biased variance,
// then y = xh * gamma + beta.
cudaError_t launch_batch_norm_forward(const float* x, const float* gamma, const float* beta,
                                      float* y, int64_t batch, int64_t channels, int64_t inner,
                                      double eps, cudaStream_t stream);

// Recomputes the statistics; dgamma += sum(dy * xh), dbeta += sum(dy), dx += the input gradient.
// Null dx, dgamma or dbeta are skipped.
cudaError_t launch_batch_norm_backward(const float* x, const float* dy, const float* gamma,
                                       float* dx, float* dgamma, float* dbeta, int64_t batch,
                                       int64_t channels, int64_t inner, double eps,
                                       cudaStream_t stream);

}  // namespace gp::exec::cuda
