// CUDA kernels of the element-wise ops sigmoid, tanh, clip, mul, reduce and bias_add: the
// attributes, shapes and formulas of the CPU reference (cpu/pointwise_kernels.cc), queued on the
// context's stream; the __global__ kernels are in pointwise_kernels.cu.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "cuda/cuda_kernel.h"
#include "cuda/kernels.h"
#include "cuda/pointwise_launch.h"
#include "cuda/simple_launch.h"

namespace gp::exec::cuda {
namespace {

// The element count per sample, with CudaKernel's context and error messages.
class PointwiseKernel : public CudaKernel {
 public:
  PointwiseKernel(const model::OpNode& op, const CudaContext& ctx)
      : CudaKernel(op, ctx), n_(model::num_elements(op.input_specs[0])) {}

 protected:
  int64_t n_;  // elements per sample
};

class SigmoidKernel final : public PointwiseKernel {
 public:
  using PointwiseKernel::PointwiseKernel;
  void forward(const OpArgs& a) const override {
    check_forward(
        launch_sigmoid_forward(a.inputs[0].f(), a.outputs[0].f(), a.batch * n_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_sigmoid_backward(a.outputs[0].f(), a.grad_outputs[0].f(), dx,
                                           a.batch * n_, stream()));
  }
};

class TanhKernel final : public PointwiseKernel {
 public:
  using PointwiseKernel::PointwiseKernel;
  void forward(const OpArgs& a) const override {
    check_forward(launch_tanh_forward(a.inputs[0].f(), a.outputs[0].f(), a.batch * n_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(
        launch_tanh_backward(a.outputs[0].f(), a.grad_outputs[0].f(), dx, a.batch * n_, stream()));
  }
};

class ClipKernel final : public PointwiseKernel {
 public:
  ClipKernel(const model::OpNode& op, const CudaContext& ctx, ClipBounds b)
      : PointwiseKernel(op, ctx), b_(b) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_clip_forward(a.inputs[0].f(), a.outputs[0].f(), b_.lo, b_.hi, a.batch * n_,
                                      stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_clip_backward(a.inputs[0].f(), a.grad_outputs[0].f(), dx, b_.lo, b_.hi,
                                        a.batch * n_, stream()));
  }

 private:
  ClipBounds b_;
};

class MulKernel final : public PointwiseKernel {
 public:
  using PointwiseKernel::PointwiseKernel;
  void forward(const OpArgs& a) const override {
    check_forward(launch_mul_forward(a.inputs[0].f(), a.inputs[1].f(), a.outputs[0].f(),
                                     a.batch * n_, stream()));
  }
  void backward(const OpArgs& a) const override {
    for (int k = 0; k < 2; ++k) {
      float* dx = a.grad_inputs[k].f();
      if (dx == nullptr) continue;
      check_backward(launch_mul_backward(a.grad_outputs[0].f(), a.inputs[1 - k].f(), dx,
                                         a.batch * n_, stream()));
    }
  }
};

class ReduceKernel final : public PointwiseKernel {
 public:
  ReduceKernel(const model::OpNode& op, const CudaContext& ctx, ReduceShape s)
      : PointwiseKernel(op, ctx), s_(s), scale_(s.mean ? 1.0f / static_cast<float>(s.len) : 1.0f) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_reduce_forward(a.inputs[0].f(), a.outputs[0].f(), a.batch * s_.outer,
                                        s_.len, s_.inner, scale_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_reduce_backward(a.grad_outputs[0].f(), dx, a.batch * s_.outer, s_.len,
                                          s_.inner, scale_, stream()));
  }

 private:
  ReduceShape s_;
  float scale_;
};

class BiasAddKernel final : public PointwiseKernel {
 public:
  BiasAddKernel(const model::OpNode& op, const CudaContext& ctx, BiasAddShape s)
      : PointwiseKernel(op, ctx), s_(s) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_bias_add_forward(a.inputs[0].f(), a.params[0], a.outputs[0].f(),
                                          a.batch * s_.reps, s_.width, stream()));
  }
  void backward(const OpArgs& a) const override {
    const float* dy = a.grad_outputs[0].f();
    if (float* dx = a.grad_inputs[0].f(); dx != nullptr) {
      check_backward(launch_accumulate(dy, dx, 1.0f, a.batch * n_, stream()));
    }
    if (float* db = a.param_grads[0]; db != nullptr) {
      check_backward(launch_bias_add_param_backward(dy, db, a.batch * s_.reps, s_.width, stream()));
    }
  }

 private:
  BiasAddShape s_;
};

// The CPU's broadcast_param: the parameter copied to every sample; its gradient the sum of dy
// over the batch, one thread per element, samples in order (as the CPU sums them).
class BroadcastParamKernel final : public CudaKernel {
 public:
  BroadcastParamKernel(const model::OpNode& op, const CudaContext& ctx)
      : CudaKernel(op, ctx), n_(model::num_elements(op.proto->outputs(0))) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_broadcast_rows(a.params[0], a.outputs[0].f(), a.batch, n_, stream()));
  }
  void backward(const OpArgs& a) const override {
    if (float* dv = a.param_grads[0]; dv != nullptr) {
      check_backward(
          launch_bias_add_param_backward(a.grad_outputs[0].f(), dv, a.batch, n_, stream()));
    }
  }

 private:
  int64_t n_;
};

}  // namespace

KernelResult make_broadcast_param(const model::OpNode& op, const CudaContext& ctx) {
  return KernelResult(std::make_unique<BroadcastParamKernel>(op, ctx));
}

KernelResult make_sigmoid(const model::OpNode& op, const CudaContext& ctx) {
  return KernelResult(std::make_unique<SigmoidKernel>(op, ctx));
}

KernelResult make_tanh(const model::OpNode& op, const CudaContext& ctx) {
  return KernelResult(std::make_unique<TanhKernel>(op, ctx));
}

KernelResult make_clip(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(ClipBounds b, read_clip(op));
  return KernelResult(std::make_unique<ClipKernel>(op, ctx, b));
}

KernelResult make_mul(const model::OpNode& op, const CudaContext& ctx) {
  return KernelResult(std::make_unique<MulKernel>(op, ctx));
}

KernelResult make_reduce(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(ReduceShape s, read_reduce(op));
  return KernelResult(std::make_unique<ReduceKernel>(op, ctx, s));
}

KernelResult make_bias_add(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(BiasAddShape s, read_bias_add(op));
  return KernelResult(std::make_unique<BiasAddKernel>(op, ctx, s));
}

}  // namespace gp::exec::cuda
