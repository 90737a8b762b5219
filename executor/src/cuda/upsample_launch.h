// Launch functions of the upsampling family's __global__ kernels (upsample_kernels.cu), in plain
// types shared by the C++20 host code (upsample_kernels.cc) and the C++17 CUDA code. Pointers are
// device pointers; images are per-sample [C, H, W], batch-major. Each function queues its work on
// `stream` and returns cudaGetLastError() after launching. conv_transpose2d needs no kernel of its
// own: it is conv2d's input gradient (vision_launch.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device_api/resize_taps.h"

namespace gp::exec::cuda {

using gp::exec::ResizeTap;

// One axis of a resize's taps (device_api/resize_taps.h's ResizeAxis) in device memory.
struct ResizeAxisTable {
  const ResizeTap* forward;  // 2 per output index
  const int64_t* offsets;    // per input index: its range in `backward`; in + 1 entries
  const ResizeTap* backward;
};

// y [batch*c, ho, wo]: each element the sum of its 2x2 taps of x [batch*c, h, w].
cudaError_t launch_resize_forward(const float* x, float* y, ResizeAxisTable rows,
                                  ResizeAxisTable cols, int64_t planes, int64_t h, int64_t w,
                                  int64_t ho, int64_t wo, cudaStream_t stream);

// dx += the transpose: each input element gathers dy over its row and column lists.
cudaError_t launch_resize_backward(const float* dy, float* dx, ResizeAxisTable rows,
                                   ResizeAxisTable cols, int64_t planes, int64_t h, int64_t w,
                                   int64_t ho, int64_t wo, cudaStream_t stream);

}  // namespace gp::exec::cuda
