// CPU reference kernels of the parameter-free (or nearly) ops: input, element-wise activations,
// softmax, layer norm, add, concat, slice and the two losses. Plain loops over the whole batch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/kernel_util.h"
#include "cpu/vec_math.h"

namespace gp::exec::cpu {
namespace {

// y = max(x, 0); dx += dy where x > 0. Saves nothing.
class ReluKernel final : public OpKernel {
 public:
  explicit ReluKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    vec::relu(a.inputs[0].f(), a.outputs[0].f(), a.batch * n_);
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    vec::relu_backward(a.inputs[0].f(), a.grad_outputs[0].f(), dx, a.batch * n_,
                       /*accumulate=*/true);
  }

 private:
  int64_t n_;  // elements per sample
};

// GELU (tanh approximation, or exact); backward differentiates it at the input. Saves nothing.
class GeluKernel final : public OpKernel {
 public:
  GeluKernel(int64_t n, bool exact) : n_(n), exact_(exact) {}
  void forward(const OpArgs& a) const override {
    (exact_ ? vec::gelu_exact : vec::gelu)(a.inputs[0].f(), a.outputs[0].f(), a.batch * n_);
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    (exact_ ? vec::gelu_exact_backward : vec::gelu_backward)(a.inputs[0].f(), a.grad_outputs[0].f(),
                                                             dx, a.batch * n_, !a.fresh(0));
  }
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  int64_t n_;
  bool exact_;
};

// Softmax over the last dim (max-subtracted); backward uses the output. Saves nothing.
class SoftmaxKernel final : public OpKernel {
 public:
  SoftmaxKernel(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {}
  void forward(const OpArgs& a) const override {
    const int64_t n = a.batch * rows_ * cols_;
    float* y = a.outputs[0].f();
    std::memcpy(y, a.inputs[0].f(), static_cast<size_t>(n) * sizeof(float));
    vec::softmax_rows(y, a.batch * rows_, cols_);
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    vec::softmax_rows_backward(a.outputs[0].f(), a.grad_outputs[0].f(), dx, a.batch * rows_, cols_,
                               !a.fresh(0));
  }
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  int64_t rows_, cols_;  // rows per sample, last dim
};

// y = (x - mean) * rstd * gamma + beta over the last dim, rstd = 1 / sqrt(var + eps) with the
// biased variance. Saved: (mean, rstd) per row, interleaved. Without a scale gamma is 1, without a
// shift beta is 0 (they are then not parameters).
class LayerNormKernel final : public OpKernel {
 public:
  LayerNormKernel(int64_t rows, int64_t cols, float eps, bool scale, bool shift)
      : rows_(rows), cols_(cols), eps_(eps), scale_(scale), shift_(shift) {}
  int64_t saved_floats_per_sample() const override { return 2 * rows_; }

  void forward(const OpArgs& a) const override {
    vec::layer_norm(a.inputs[0].f(), gamma(a.params), beta(a.params), a.outputs[0].f(), a.saved,
                    a.batch * rows_, cols_, eps_);
  }

  // With xh = (x - mean) * rstd and g = dy * gamma:
  //   dx = rstd * (g - mean(g) - xh * mean(g * xh)); dgamma += dy * xh; dbeta += dy.
  void backward(const OpArgs& a) const override {
    vec::layer_norm_backward(a.inputs[0].f(), a.grad_outputs[0].f(), gamma(a.params), a.saved,
                             a.grad_inputs[0].f(), gamma(a.param_grads), beta(a.param_grads),
                             a.batch * rows_, cols_);
  }

 private:
  float* gamma(std::span<float* const> p) const { return scale_ ? p[0] : nullptr; }
  float* beta(std::span<float* const> p) const { return shift_ ? p[scale_ ? 1 : 0] : nullptr; }

  int64_t rows_, cols_;
  float eps_;
  bool scale_, shift_;
};

// y = sum of the inputs; every input receives dy.
class AddKernel final : public OpKernel {
 public:
  explicit AddKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    const int64_t n = a.batch * n_;
    float* y = a.outputs[0].f();
    vec::add(a.inputs[0].f(), a.inputs[1].f(), y, n);
    for (size_t k = 2; k < a.inputs.size(); ++k) vec::add_into(y, a.inputs[k].f(), n);
  }
  void backward(const OpArgs& a) const override {
    const float* dy = a.grad_outputs[0].f();
    for (size_t k = 0; k < a.grad_inputs.size(); ++k) {
      float* g = a.grad_inputs[k].f();
      if (g == nullptr) continue;
      if (a.fresh(k)) {
        std::memcpy(g, dy, static_cast<size_t>(a.batch * n_) * sizeof(float));
      } else {
        vec::add_into(g, dy, a.batch * n_);
      }
    }
  }
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  int64_t n_;
};

// Concatenation along per-sample axis `a`. With outer = product of the dims before the axis
// (times the batch, since samples are outermost) and chunk_k = input k's elements from the axis
// on, output block o is input 0's block o, then input 1's block o, ...
class ConcatKernel final : public OpKernel {
 public:
  ConcatKernel(int64_t outer, std::vector<int64_t> chunks)
      : outer_(outer), chunks_(std::move(chunks)) {
    for (int64_t c : chunks_) out_chunk_ += c;
  }
  void forward(const OpArgs& a) const override {
    float* y = a.outputs[0].f();
    for (int64_t o = 0; o < a.batch * outer_; ++o) {
      float* dst = y + o * out_chunk_;
      for (size_t k = 0; k < chunks_.size(); ++k) {
        std::memcpy(dst, a.inputs[k].f() + o * chunks_[k],
                    static_cast<size_t>(chunks_[k]) * sizeof(float));
        dst += chunks_[k];
      }
    }
  }
  void backward(const OpArgs& a) const override {
    const float* dy = a.grad_outputs[0].f();
    for (int64_t o = 0; o < a.batch * outer_; ++o) {
      const float* src = dy + o * out_chunk_;
      for (size_t k = 0; k < chunks_.size(); ++k) {
        if (float* dx = a.grad_inputs[k].f(); dx != nullptr) {
          dx += o * chunks_[k];
          for (int64_t i = 0; i < chunks_[k]; ++i) dx[i] += src[i];
        }
        src += chunks_[k];
      }
    }
  }

 private:
  int64_t outer_;                // blocks per sample
  std::vector<int64_t> chunks_;  // per input: elements per block (fixed at construction)
  int64_t out_chunk_ = 0;        // output elements per block
};

// x[start:end] along per-sample axis `a`: block o of the input (in_chunk = dim * inner elements)
// contributes its elements [start * inner, end * inner) as output block o.
class SliceKernel final : public OpKernel {
 public:
  SliceKernel(int64_t outer, int64_t in_chunk, int64_t offset, int64_t out_chunk)
      : outer_(outer), in_chunk_(in_chunk), offset_(offset), out_chunk_(out_chunk) {}
  void forward(const OpArgs& a) const override {
    for (int64_t o = 0; o < a.batch * outer_; ++o) {
      std::memcpy(a.outputs[0].f() + o * out_chunk_, a.inputs[0].f() + o * in_chunk_ + offset_,
                  static_cast<size_t>(out_chunk_) * sizeof(float));
    }
  }
  // The first gradient into x (fresh) is written whole: dy in the slice, zeros around it.
  void backward(const OpArgs& a) const override {
    float* dx_all = a.grad_inputs[0].f();
    if (dx_all == nullptr) return;
    const bool fresh = a.fresh(0);
    for (int64_t o = 0; o < a.batch * outer_; ++o) {
      const float* dy = a.grad_outputs[0].f() + o * out_chunk_;
      float* chunk = dx_all + o * in_chunk_;
      if (fresh) {
        std::fill(chunk, chunk + offset_, 0.0f);
        std::memcpy(chunk + offset_, dy, static_cast<size_t>(out_chunk_) * sizeof(float));
        std::fill(chunk + offset_ + out_chunk_, chunk + in_chunk_, 0.0f);
      } else {
        vec::add_into(chunk + offset_, dy, out_chunk_);
      }
    }
  }
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  int64_t outer_, in_chunk_, offset_, out_chunk_;
};

// loss_s = mean over the sample's n elements of (pred - target)^2. Saves nothing.
class MseLossKernel final : public OpKernel {
 public:
  explicit MseLossKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    for (int64_t s = 0; s < a.batch; ++s) {
      const float* p = a.inputs[0].f() + s * n_;
      const float* t = a.inputs[1].f() + s * n_;
      // In double: a float sum of ~1e5 squares drifts ~1e-5 off (PyTorch's pairwise sum does not).
      double sum = 0;
      for (int64_t i = 0; i < n_; ++i) {
        const double d = static_cast<double>(p[i]) - static_cast<double>(t[i]);
        sum += d * d;
      }
      a.outputs[0].f()[s] = static_cast<float>(sum / static_cast<double>(n_));
    }
  }
  // d loss_s / d pred = 2 (pred - target) / n = -d loss_s / d target.
  void backward(const OpArgs& a) const override {
    float* dp = a.grad_inputs[0].f();
    float* dt = a.grad_inputs[1].f();
    for (int64_t s = 0; s < a.batch; ++s) {
      const float scale = 2.0f * a.grad_outputs[0].f()[s] / static_cast<float>(n_);
      const float* p = a.inputs[0].f() + s * n_;
      const float* t = a.inputs[1].f() + s * n_;
      for (int64_t i = 0; i < n_; ++i) {
        const float g = scale * (p[i] - t[i]);
        if (dp != nullptr) dp[s * n_ + i] += g;
        if (dt != nullptr) dt[s * n_ + i] -= g;
      }
    }
  }

 private:
  int64_t n_;
};

// Logits [..., C] with `positions` rows per sample and one label per row:
//   loss_s = (1 / positions) * sum over rows of (logsumexp(z) - z[label]).
// Saved: logsumexp per row. No gradient to the labels.
class SoftmaxCrossEntropyKernel final : public OpKernel {
 public:
  SoftmaxCrossEntropyKernel(int64_t positions, int64_t classes, bool labels32)
      : positions_(positions), classes_(classes), labels32_(labels32) {}
  int64_t saved_floats_per_sample() const override { return positions_; }

  void forward(const OpArgs& a) const override {
    for (int64_t s = 0; s < a.batch; ++s) {
      double sum = 0;  // over positions, in double as mse_loss
      for (int64_t p = 0; p < positions_; ++p) {
        const int64_t r = s * positions_ + p;
        const float* z = a.inputs[0].f() + r * classes_;
        const float lse = vec::log_sum_exp(z, classes_);
        a.saved[r] = lse;
        sum += static_cast<double>(lse - z[label(a, r)]);
      }
      a.outputs[0].f()[s] = static_cast<float>(sum / static_cast<double>(positions_));
    }
  }

  // d loss_s / d z[j] = (softmax(z)[j] - [j == label]) / positions.
  void backward(const OpArgs& a) const override {
    float* dz_all = a.grad_inputs[0].f();
    if (dz_all == nullptr) return;
    for (int64_t s = 0; s < a.batch; ++s) {
      const float g = a.grad_outputs[0].f()[s] / static_cast<float>(positions_);
      for (int64_t p = 0; p < positions_; ++p) {
        const int64_t r = s * positions_ + p;
        const float* z = a.inputs[0].f() + r * classes_;
        float* dz = dz_all + r * classes_;
        vec::add_scaled_softmax(z, a.saved[r], g, dz, classes_);
        dz[label(a, r)] -= g;
      }
    }
  }

 private:
  int64_t label(const OpArgs& a, int64_t r) const {
    const int64_t l = load_index(a.inputs[1].data, r, labels32_);
    GP_CHECK(l >= 0 && l < classes_, "softmax_cross_entropy: label out of range [0, classes)");
    return l;
  }

  int64_t positions_, classes_;
  bool labels32_;
};

KernelResult wrap(std::unique_ptr<OpKernel> k) { return KernelResult(std::move(k)); }

}  // namespace

KernelResult make_input(const model::OpNode&) { return wrap(std::make_unique<InputKernel>()); }

KernelResult make_relu(const model::OpNode& op) {
  return wrap(std::make_unique<ReluKernel>(model::num_elements(op.input_specs[0])));
}

KernelResult make_gelu(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::GeluAttrs a, op_attrs<model::GeluAttrs>(op));
  const bool exact = a.exact;
  return wrap(std::make_unique<GeluKernel>(model::num_elements(op.input_specs[0]), exact));
}

KernelResult make_softmax(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  const int64_t cols = last_dim(x);
  return wrap(std::make_unique<SoftmaxKernel>(model::num_elements(x) / cols, cols));
}

KernelResult make_layer_norm(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::NormAttrs a, op_attrs<model::NormAttrs>(op));
  const double eps = a.epsilon;
  const int64_t cols = last_dim(x);
  return wrap(std::make_unique<LayerNormKernel>(model::num_elements(x) / cols, cols,
                                                static_cast<float>(eps), a.scale, a.shift));
}

KernelResult make_add(const model::OpNode& op) {
  return wrap(std::make_unique<AddKernel>(model::num_elements(op.input_specs[0])));
}

KernelResult make_concat(const model::OpNode& op) {
  const int rank = op.input_specs[0].shape_size();
  GP_ASSIGN_OR_RETURN(const model::AxisAttrs a, op_attrs<model::AxisAttrs>(op));
  const int axis = a.axis;
  std::vector<int64_t> chunks;
  // Integer tensors (ids) move as twice as many floats; they carry no gradient.
  for (const auto& spec : op.input_specs) {
    chunks.push_back(dims_product(spec, axis, rank) * float_units(spec));
  }
  return wrap(
      std::make_unique<ConcatKernel>(dims_product(op.input_specs[0], 0, axis), std::move(chunks)));
}

KernelResult make_slice(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  const int rank = x.shape_size();
  GP_ASSIGN_OR_RETURN(const model::SliceAttrs a, op_attrs<model::SliceAttrs>(op));
  const int axis = a.axis;
  const int64_t start = a.start, end = a.end;
  const int64_t inner = dims_product(x, axis + 1, rank) * float_units(x);  // ids: 2 floats each
  return wrap(std::make_unique<SliceKernel>(dims_product(x, 0, axis), x.shape(axis) * inner,
                                            start * inner, (end - start) * inner));
}

KernelResult make_mse_loss(const model::OpNode& op) {
  return wrap(std::make_unique<MseLossKernel>(model::num_elements(op.input_specs[0])));
}

KernelResult make_softmax_cross_entropy(const model::OpNode& op) {
  const model::TensorSpec& logits = op.input_specs[0];
  const int64_t classes = last_dim(logits);
  return wrap(std::make_unique<SoftmaxCrossEntropyKernel>(model::num_elements(logits) / classes,
                                                          classes, is_int32(op.input_specs[1])));
}

}  // namespace gp::exec::cpu
