// conv2d, pooling and batch_norm on cuDNN (its legacy API): helpers that the vision kernels
// (vision_kernels.cc) call instead of their hand-written kernels where the device uses cuDNN and
// cuDNN computes the op's output shape the same way (pooling with ceil_mode does not). NCHW float
// tensors; descriptors that depend on the batch are made on the first call of each batch size
// and kept, so later steps allocate nothing. Gradients accumulate (cuDNN's beta = 1).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_context.h"
#include "device_api/vision_window.h"

namespace gp::exec::cuda {

// y = conv(x, W) without the bias, and its two gradients, with the fastest deterministic
// algorithms that fit the kernel's workspace (the im2col columns the catalogue budgets).
class CudnnConv2d {
 public:
  // nullptr when the device does not use cuDNN or cuDNN's output shape differs from the op's.
  static std::unique_ptr<CudnnConv2d> create(const CudaContext& ctx, const VisionWindow& w,
                                             int64_t out, int64_t groups,
                                             int64_t workspace_floats_per_sample);
  ~CudnnConv2d();

  // Each is false, with nothing queued, when no such algorithm fits this batch's workspace (the
  // caller then computes it by hand); failures of queued work are recorded in the context.
  bool forward(int64_t batch, const float* x, const float* w, float* y, float* workspace) const;
  bool backward_data(int64_t batch, const float* w, const float* dy, float* dx,
                     float* workspace) const;
  bool backward_filter(int64_t batch, const float* x, const float* dy, float* dw,
                       float* workspace) const;

 private:
  struct Shared;  // filter and convolution descriptors
  struct Plan;    // one batch size's tensors and algorithms

  CudnnConv2d(const CudaContext& ctx, int64_t workspace_floats_per_sample);
  const Plan& plan_for(int64_t batch) const;

  const CudaContext& ctx_;
  int64_t workspace_floats_per_sample_;
  std::unique_ptr<Shared> shared_;
  mutable std::vector<std::unique_ptr<Plan>> plans_;
};

// Average pooling, counting the padding or not. (Not max pooling: which of tied maxima cuDNN's
// backward credits is not documented, and the CPU reference credits the first.)
class CudnnAvgPool2d {
 public:
  static std::unique_ptr<CudnnAvgPool2d> create(const CudaContext& ctx, const VisionWindow& w,
                                                bool count_include_pad);
  ~CudnnAvgPool2d();
  void forward(int64_t batch, const float* x, float* y) const;
  void backward(int64_t batch, const float* x, const float* y, const float* dy, float* dx) const;

 private:
  struct Shared;
  struct Plan;

  explicit CudnnAvgPool2d(const CudaContext& ctx);
  const Plan& plan_for(int64_t batch) const;

  const CudaContext& ctx_;
  std::unique_ptr<Shared> shared_;
  mutable std::vector<std::unique_ptr<Plan>> plans_;
};

// Batch statistics per channel over the batch and the `inner` values of each sample (spatial
// mode), biased variance, no running averages: the op's semantics.
class CudnnBatchNorm {
 public:
  static std::unique_ptr<CudnnBatchNorm> create(const CudaContext& ctx, int64_t channels,
                                                int64_t inner, double eps);
  ~CudnnBatchNorm();
  // Both are false, with nothing queued, for a single value per channel (batch * inner = 1),
  // which cuDNN need not accept; the hand-written kernel normalises it to beta.
  bool forward(int64_t batch, const float* x, const float* gamma, const float* beta,
               float* y) const;
  // dx, dgamma and dbeta all given (cuDNN writes every one).
  bool backward(int64_t batch, const float* x, const float* dy, const float* gamma, float* dx,
                float* dgamma, float* dbeta) const;

 private:
  struct Shared;
  struct Plan;

  CudnnBatchNorm(const CudaContext& ctx, int64_t channels, int64_t inner, double eps);
  const Plan& plan_for(int64_t batch) const;

  const CudaContext& ctx_;
  int64_t channels_, inner_;
  double eps_;
  std::unique_ptr<Shared> shared_;
  mutable std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace gp::exec::cuda
