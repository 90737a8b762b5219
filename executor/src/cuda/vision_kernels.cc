// CUDA kernels of the vision ops: conv2d, max and average pooling, and batch normalisation with
// batch statistics, on cuDNN where the device uses it (cudnn_vision.h), by hand otherwise or where
// cuDNN cannot (conv2d by im2col + cuBLAS GEMM). Same attributes, validation and semantics as the
// CPU reference (executor/src/cpu/vision_kernels.cc); the __global__ kernels are in
// vision_kernels.cu.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda/cudnn_vision.h"
#include "cuda/kernels.h"
#include "cuda/vision_launch.h"

namespace gp::exec::cuda {
namespace {

// ---- conv2d ------------------------------------------------------------------------------------

// Per sample: cols [C*kh*kw, Ho*Wo] = im2col(x); y [out, Ho*Wo] = W cols + b. The columns live in
// the workspace only: backward rebuilds them from x for dW += dY cols^T (im2col is a cheap,
// memory-bound pass), so a convolution keeps nothing but its output between forward and
// backward. dx gathers col2im(W^T dY) directly.
class Conv2dKernel final : public OpKernel {
 public:
  Conv2dKernel(const CudaContext& ctx, const VisionWindow& w, int64_t out, bool bias,
               int64_t groups)
      : ctx_(ctx),
        w_(w),
        out_(out),
        bias_(bias),
        groups_(groups),
        patch_(w.c * w.kh * w.kw),
        positions_(w.ho * w.wo),
        group_out_(out / groups),
        group_patch_(patch_ / groups),
        dnn_(CudnnConv2d::create(ctx, w, out, groups, patch_ * positions_)) {}

  int64_t workspace_floats_per_sample() const override { return patch_ * positions_; }

  void forward(const OpArgs& a) const override {
    float* y = a.outputs[0].f();
    if (dnn_ == nullptr || !dnn_->forward(a.batch, a.inputs[0].f(), a.params[0], y, a.workspace)) {
      ctx_.check(launch_conv2d_im2col(a.inputs[0].f(), a.workspace, w_, a.batch, ctx_.stream),
                 "conv2d forward: im2col");
      // W is shared by every sample: stride 0. Group g: its filters times its rows of cols.
      for (int64_t g = 0; g < groups_; ++g) {
        gemm_batched(ctx_, "conv2d forward", false, false, group_out_, positions_, group_patch_,
                     1.0f, a.params[0] + g * group_out_ * group_patch_, group_patch_, 0,
                     a.workspace + g * group_patch_ * positions_, positions_, patch_ * positions_,
                     0.0f, y + g * group_out_ * positions_, positions_, out_ * positions_, a.batch);
      }
    }
    if (bias_) {
      ctx_.check(launch_conv2d_add_bias(y, a.params[1], a.batch, out_, positions_, ctx_.stream),
                 "conv2d forward: bias");
    }
  }

  void backward(const OpArgs& a) const override {
    const int64_t out_n = out_ * positions_;
    const float* dy = a.grad_outputs[0].f();
    float* dw = a.param_grads[0];
    float* db = bias_ ? a.param_grads[1] : nullptr;
    float* dx = a.grad_inputs[0].f();
    if (dw != nullptr && (dnn_ == nullptr ||
                          !dnn_->backward_filter(a.batch, a.inputs[0].f(), dy, dw, a.workspace))) {
      ctx_.check(launch_conv2d_im2col(a.inputs[0].f(), a.workspace, w_, a.batch, ctx_.stream),
                 "conv2d backward: im2col");
      // The sum over samples and positions is not one strided GEMM; accumulate sample by sample
      // in the CPU's order (stream-ordered, so deterministic).
      for (int64_t s = 0; s < a.batch; ++s) {
        for (int64_t g = 0; g < groups_; ++g) {
          gemm(ctx_, "conv2d backward: weight gradient", false, true, group_out_, group_patch_,
               positions_, 1.0f, dy + s * out_n + g * group_out_ * positions_, positions_,
               a.workspace + s * patch_ * positions_ + g * group_patch_ * positions_, positions_,
               1.0f, dw + g * group_out_ * group_patch_, group_patch_);
        }
      }
    }
    if (db != nullptr) {
      ctx_.check(launch_conv2d_bias_grad(dy, db, a.batch, out_, positions_, ctx_.stream),
                 "conv2d backward: bias gradient");
    }
    if (dx != nullptr &&
        (dnn_ == nullptr || !dnn_->backward_data(a.batch, a.params[0], dy, dx, a.workspace))) {
      ctx_.check(
          launch_conv2d_input_grad(a.params[0], dy, dx, w_, out_, groups_, a.batch, ctx_.stream),
          "conv2d backward: input gradient");
    }
  }

 private:
  const CudaContext& ctx_;
  VisionWindow w_;
  int64_t out_;
  bool bias_;
  int64_t groups_;
  int64_t patch_, positions_;         // C*kh*kw, Ho*Wo
  int64_t group_out_, group_patch_;   // out/G, C/G*kh*kw
  std::unique_ptr<CudnnConv2d> dnn_;  // cuDNN's form, when the device uses it
};

// ---- pooling -----------------------------------------------------------------------------------

// y = the maximum of each window's image cells (the first maximum in row-major order). Saved: per
// output cell, the winner's index in its channel plane (h*W + w), stored as the bits of an int32.
class MaxPool2dKernel final : public OpKernel {
 public:
  // Hand-written only: the gradient of tied cells (all-zero windows after a ReLU are common)
  // must go to the first maximum as on the CPU, and cuDNN does not document which tied cell its
  // backward picks.
  MaxPool2dKernel(const CudaContext& ctx, const VisionWindow& w) : ctx_(ctx), w_(w) {}
  int64_t saved_floats_per_sample() const override { return w_.c * w_.ho * w_.wo; }

  void forward(const OpArgs& a) const override {
    ctx_.check(launch_max_pool2d_forward(a.inputs[0].f(), a.outputs[0].f(), a.saved, w_, a.batch,
                                         ctx_.stream),
               "max_pool2d forward");
  }

  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    ctx_.check(
        launch_max_pool2d_backward(a.grad_outputs[0].f(), a.saved, dx, w_, a.batch, ctx_.stream),
        "max_pool2d backward");
  }

 private:
  const CudaContext& ctx_;
  VisionWindow w_;
};

// y = the sum of each window's image cells over kh*kw (count_include_pad) or over the number of
// image cells in the window. Saves nothing.
class AvgPool2dKernel final : public OpKernel {
 public:
  AvgPool2dKernel(const CudaContext& ctx, const VisionWindow& w, bool include_pad)
      : ctx_(ctx),
        w_(w),
        include_pad_(include_pad),
        dnn_(CudnnAvgPool2d::create(ctx, w, include_pad)) {}

  void forward(const OpArgs& a) const override {
    if (dnn_ != nullptr) return dnn_->forward(a.batch, a.inputs[0].f(), a.outputs[0].f());
    ctx_.check(launch_avg_pool2d_forward(a.inputs[0].f(), a.outputs[0].f(), w_, include_pad_,
                                         a.batch, ctx_.stream),
               "avg_pool2d forward");
  }

  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    if (dnn_ != nullptr) {
      return dnn_->backward(a.batch, a.inputs[0].f(), a.outputs[0].f(), a.grad_outputs[0].f(), dx);
    }
    ctx_.check(launch_avg_pool2d_backward(a.grad_outputs[0].f(), dx, w_, include_pad_, a.batch,
                                          ctx_.stream),
               "avg_pool2d backward");
  }

 private:
  const CudaContext& ctx_;
  VisionWindow w_;
  bool include_pad_;
  std::unique_ptr<CudnnAvgPool2d> dnn_;
};

// ---- batch norm --------------------------------------------------------------------------------

// x [C, inner...] normalised per channel with the call's mean and biased variance (over batch *
// inner values), y = xh * gamma + beta; params gamma [C], beta [C]. Like the CPU, backward
// recomputes the statistics from the input (they belong to the whole call, while saved scratch is
// per sample) and accumulates in double. Saves nothing.
class BatchNormKernel final : public OpKernel {
 public:
  BatchNormKernel(const CudaContext& ctx, int64_t channels, int64_t inner, double eps)
      : ctx_(ctx),
        c_(channels),
        inner_(inner),
        eps_(eps),
        dnn_(CudnnBatchNorm::create(ctx, channels, inner, eps)) {}

  void forward(const OpArgs& a) const override {
    if (dnn_ != nullptr &&
        dnn_->forward(a.batch, a.inputs[0].f(), a.params[0], a.params[1], a.outputs[0].f())) {
      return;
    }
    ctx_.check(launch_batch_norm_forward(a.inputs[0].f(), a.params[0], a.params[1],
                                         a.outputs[0].f(), a.batch, c_, inner_, eps_, ctx_.stream),
               "batch_norm forward");
  }

  void backward(const OpArgs& a) const override {
    // cuDNN writes every gradient; a skipped one (null) takes the hand-written kernel.
    if (dnn_ != nullptr && a.grad_inputs[0].f() != nullptr && a.param_grads[0] != nullptr &&
        a.param_grads[1] != nullptr &&
        dnn_->backward(a.batch, a.inputs[0].f(), a.grad_outputs[0].f(), a.params[0],
                       a.grad_inputs[0].f(), a.param_grads[0], a.param_grads[1])) {
      return;
    }
    ctx_.check(launch_batch_norm_backward(a.inputs[0].f(), a.grad_outputs[0].f(), a.params[0],
                                          a.grad_inputs[0].f(), a.param_grads[0], a.param_grads[1],
                                          a.batch, c_, inner_, eps_, ctx_.stream),
               "batch_norm backward");
  }

 private:
  const CudaContext& ctx_;
  int64_t c_, inner_;  // channels, elements per channel per sample
  double eps_;
  std::unique_ptr<CudnnBatchNorm> dnn_;
};

KernelResult wrap(std::unique_ptr<OpKernel> k) { return KernelResult(std::move(k)); }

}  // namespace

KernelResult make_conv2d(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::ConvAttrs a, op_attrs<model::ConvAttrs>(op));
  const VisionWindow w = vision_window(a.window);
  const int64_t out = a.out_channels, groups = a.groups;
  const bool bias = a.bias;
  return wrap(std::make_unique<Conv2dKernel>(ctx, w, out, bias, groups));
}

KernelResult make_max_pool2d(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::PoolAttrs a, op_attrs<model::PoolAttrs>(op));
  const VisionWindow w = vision_window(a.window);
  if (w.h * w.w > std::numeric_limits<int32_t>::max()) {
    return op_error(op, "a channel plane of more than 2^31 - 1 elements");
  }
  return wrap(std::make_unique<MaxPool2dKernel>(ctx, w));
}

KernelResult make_avg_pool2d(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::PoolAttrs a, op_attrs<model::PoolAttrs>(op));
  const VisionWindow w = vision_window(a.window);
  const bool include_pad = a.count_include_pad;
  return wrap(std::make_unique<AvgPool2dKernel>(ctx, w, include_pad));
}

KernelResult make_batch_norm(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::NormAttrs a, op_attrs<model::NormAttrs>(op));
  const double eps = a.epsilon;
  const int64_t channels = x.shape(0);
  return wrap(
      std::make_unique<BatchNormKernel>(ctx, channels, model::num_elements(x) / channels, eps));
}

}  // namespace gp::exec::cuda
