// CPU reference kernels of the element-wise ops imported models need beyond relu and gelu:
// sigmoid, tanh, clip, mul, reduce (sum or mean over one axis) and bias_add. Plain loops over the
// whole batch; every backward accumulates into its gradients.
#include <algorithm>
#include <cmath>

#include "cpu/kernel_util.h"
#include "cpu/vec_math.h"

namespace gp::exec::cpu {
namespace {

// y = 1 / (1 + exp(-x)); dx += dy * y * (1 - y) from the output. Saves nothing.
class SigmoidKernel final : public OpKernel {
 public:
  explicit SigmoidKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    vec::sigmoid(a.inputs[0].f(), a.outputs[0].f(), a.batch * n_);
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* y = a.outputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] += dy[i] * y[i] * (1.0f - y[i]);
  }

 private:
  int64_t n_;
};

// y = tanh(x); dx += dy * (1 - y^2) from the output. Saves nothing.
class TanhKernel final : public OpKernel {
 public:
  explicit TanhKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    float* y = a.outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) y[i] = std::tanh(x[i]);
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* y = a.outputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
  }

 private:
  int64_t n_;
};

// y = min(max(x, lo), hi); the gradient passes strictly inside (lo, hi), as torch's hardtanh.
class ClipKernel final : public OpKernel {
 public:
  ClipKernel(int64_t n, ClipBounds b) : n_(n), b_(b) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    float* y = a.outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) y[i] = std::fmin(std::fmax(x[i], b_.lo), b_.hi);
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* x = a.inputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) {
      if (x[i] > b_.lo && x[i] < b_.hi) dx[i] += dy[i];
    }
  }

 private:
  int64_t n_;
  ClipBounds b_;
};

// y = a * b; da += dy * b, db += dy * a.
class MulKernel final : public OpKernel {
 public:
  explicit MulKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    const float* x0 = a.inputs[0].f();
    const float* x1 = a.inputs[1].f();
    float* y = a.outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) y[i] = x0[i] * x1[i];
  }
  void backward(const OpArgs& a) const override {
    const float* dy = a.grad_outputs[0].f();
    for (int k = 0; k < 2; ++k) {
      float* dx = a.grad_inputs[k].f();
      if (dx == nullptr) continue;
      const float* other = a.inputs[1 - k].f();
      for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] += dy[i] * other[i];
    }
  }

 private:
  int64_t n_;
};

// y[o, 0, i] = scale * sum_l x[o, l, i]; dx[o, l, i] += scale * dy[o, 0, i].
class ReduceKernel final : public OpKernel {
 public:
  explicit ReduceKernel(ReduceShape s)
      : s_(s), scale_(s.mean ? 1.0f / static_cast<float>(s.len) : 1.0f) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    float* y = a.outputs[0].f();
    for (int64_t o = 0; o < a.batch * s_.outer; ++o) {
      float* yo = y + o * s_.inner;
      const float* xo = x + o * s_.len * s_.inner;
      for (int64_t i = 0; i < s_.inner; ++i) yo[i] = 0;
      for (int64_t l = 0; l < s_.len; ++l) {
        for (int64_t i = 0; i < s_.inner; ++i) yo[i] += xo[l * s_.inner + i];
      }
      for (int64_t i = 0; i < s_.inner; ++i) yo[i] *= scale_;
    }
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* dy = a.grad_outputs[0].f();
    for (int64_t o = 0; o < a.batch * s_.outer; ++o) {
      const float* dyo = dy + o * s_.inner;
      float* dxo = dx + o * s_.len * s_.inner;
      for (int64_t l = 0; l < s_.len; ++l) {
        for (int64_t i = 0; i < s_.inner; ++i) dxo[l * s_.inner + i] += scale_ * dyo[i];
      }
    }
  }

 private:
  ReduceShape s_;
  float scale_;
};

// y = x + b over `reps` copies of b per sample; dx += dy, db += the sum of dy over the copies.
class BiasAddKernel final : public OpKernel {
 public:
  explicit BiasAddKernel(BiasAddShape s) : s_(s) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    const float* b = a.params[0];
    float* y = a.outputs[0].f();
    for (int64_t r = 0; r < a.batch * s_.reps; ++r) {
      for (int64_t j = 0; j < s_.width; ++j) y[r * s_.width + j] = x[r * s_.width + j] + b[j];
    }
  }
  void backward(const OpArgs& a) const override {
    const float* dy = a.grad_outputs[0].f();
    const int64_t n = a.batch * s_.reps * s_.width;
    if (float* dx = a.grad_inputs[0].f(); dx != nullptr) {
      for (int64_t i = 0; i < n; ++i) dx[i] += dy[i];
    }
    if (float* db = a.param_grads[0]; db != nullptr) {
      for (int64_t r = 0; r < a.batch * s_.reps; ++r) {
        for (int64_t j = 0; j < s_.width; ++j) db[j] += dy[r * s_.width + j];
      }
    }
  }

 private:
  BiasAddShape s_;
};

// y[b] = value for every sample b; dvalue += the sum of dy over the batch, in sample order.
// The input only sets the batch: it gets no gradient. Saves nothing.
class BroadcastParamKernel final : public OpKernel {
 public:
  explicit BroadcastParamKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    const float* v = a.params[0];
    float* y = a.outputs[0].f();
    for (int64_t b = 0; b < a.batch; ++b) {
      std::copy(v, v + n_, y + b * n_);
    }
  }
  void backward(const OpArgs& a) const override {
    float* dv = a.param_grads[0];
    if (dv == nullptr) return;
    const float* dy = a.grad_outputs[0].f();
    for (int64_t b = 0; b < a.batch; ++b) {
      for (int64_t j = 0; j < n_; ++j) dv[j] += dy[b * n_ + j];
    }
  }

 private:
  int64_t n_;
};

int64_t elements(const model::OpNode& op) { return model::num_elements(op.input_specs[0]); }

}  // namespace

KernelResult make_sigmoid(const model::OpNode& op) {
  return std::unique_ptr<OpKernel>(std::make_unique<SigmoidKernel>(elements(op)));
}

KernelResult make_broadcast_param(const model::OpNode& op) {
  return std::unique_ptr<OpKernel>(
      std::make_unique<BroadcastParamKernel>(model::num_elements(op.proto->outputs(0))));
}

KernelResult make_tanh(const model::OpNode& op) {
  return std::unique_ptr<OpKernel>(std::make_unique<TanhKernel>(elements(op)));
}

KernelResult make_clip(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(ClipBounds b, read_clip(op));
  return std::unique_ptr<OpKernel>(std::make_unique<ClipKernel>(elements(op), b));
}

KernelResult make_mul(const model::OpNode& op) {
  return std::unique_ptr<OpKernel>(std::make_unique<MulKernel>(elements(op)));
}

KernelResult make_reduce(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ReduceAttrs r, op_attrs<model::ReduceAttrs>(op));
  // Only a one-axis sum or mean takes this kernel; other reductions walk an IndexMap.
  if (r.axes.size() != 1 ||
      (r.mode != model::ReduceMode::kSum && r.mode != model::ReduceMode::kMean)) {
    return make_general_reduce(op);
  }
  GP_ASSIGN_OR_RETURN(ReduceShape s, read_reduce(op));
  return std::unique_ptr<OpKernel>(std::make_unique<ReduceKernel>(s));
}

KernelResult make_bias_add(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(BiasAddShape s, read_bias_add(op));
  return std::unique_ptr<OpKernel>(std::make_unique<BiasAddKernel>(s));
}

}  // namespace gp::exec::cpu
