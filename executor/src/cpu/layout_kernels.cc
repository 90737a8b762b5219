// CPU reference kernels of the layout and linear-algebra ops without parameters: matmul of two
// activations, scale, transpose and reshape.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernel_util.h"
#include "cpu/vec_math.h"

namespace gp::exec::cpu {
namespace {

// y[l] = alpha op(a[l]) op(b[l]) for every (sample, leading index) l (kernel_common.h's
// matmul_gemms). Saves nothing (backward reads both inputs).
class MatmulKernel final : public OpKernel {
 public:
  explicit MatmulKernel(const MatmulShape& s) : g_(matmul_gemms(s)), count_(s.count) {}

  void forward(const OpArgs& a) const override { run(g_.forward, a, a.outputs[0].f(), false); }

  bool overwrites_grad_input(size_t) const override { return true; }
  void backward(const OpArgs& a) const override {
    if (float* da = a.grad_inputs[0].f(); da != nullptr) run(g_.grad_a, a, da, !a.fresh(0));
    if (float* db = a.grad_inputs[1].f(); db != nullptr) run(g_.grad_b, a, db, !a.fresh(1));
  }

 private:
  void run(const MatmulGemm& g, const OpArgs& a, float* c, bool accumulate) const {
    const float* x = matmul_operand(g.x, a);
    const float* y = matmul_operand(g.y, a);
    for (int64_t l = 0; l < a.batch * count_; ++l) {
      gemm(g.transpose_x, g.transpose_y, g.rows, g.cols, g.inner, g.alpha, x + l * g.stride_x,
           g.ld_x, y + l * g.stride_y, g.ld_y, accumulate ? 1.0f : 0.0f, c + l * g.stride_c,
           g.ld_c);
    }
  }

  MatmulGemms g_;
  int64_t count_;  // matrices per sample
};

// y = factor * x; dx += factor * dy.
class ScaleKernel final : public OpKernel {
 public:
  ScaleKernel(int64_t n, float factor) : n_(n), factor_(factor) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    float* y = a.outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) y[i] = factor_ * x[i];
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* dy = a.grad_outputs[0].f();
    if (a.fresh(0)) {
      for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] = factor_ * dy[i];
      return;
    }
    for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] += factor_ * dy[i];
  }
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  int64_t n_;
  float factor_;
};

// y[i_0, ..., i_{r-1}] = x at index j with j[perm[d]] = i_d (offset by `base` under a window).
// Walks the output row by row (its last dim); within a row the input advances by the stride of
// its axis perm[r-1].
class TransposeKernel final : public OpKernel {
 public:
  TransposeKernel(const model::TensorSpec& x, const TransposeShape& t)
      : n_in_(model::num_elements(x)), base_(t.base), src_strides_(t.src_strides) {
    const size_t rank = t.out_sizes.size();
    out_strides_.resize(rank);
    int64_t stride = 1;
    for (size_t d = rank; d-- > 0;) {
      out_strides_[d] = stride;
      stride *= t.out_sizes[d];
    }
    n_out_ = stride;
    row_ = t.out_sizes.back();
    if (t.window_axis >= 0) {  // the input axis the window narrows: what dx has outside it
      const auto p = static_cast<size_t>(t.perm[static_cast<size_t>(t.window_axis)]);
      const int64_t inner = t.in_strides[p];
      gap_ = {n_in_ / (inner * x.shape(static_cast<int>(p))), t.start * inner, t.end * inner,
              inner * x.shape(static_cast<int>(p))};
    }
  }

  void forward(const OpArgs& a) const override {
    const int64_t step = src_strides_.back();
    for (int64_t s = 0; s < a.batch; ++s) {
      const float* x = a.inputs[0].f() + s * n_in_ + base_;
      float* y = a.outputs[0].f() + s * n_out_;
      for (int64_t o = 0; o < n_out_; o += row_) {
        const int64_t src = source(o);
        if (step == 1) {  // the last axis stays last: whole rows move (heads split or merged)
          std::memcpy(y + o, x + src, static_cast<size_t>(row_) * sizeof(float));
          continue;
        }
        for (int64_t i = 0; i < row_; ++i) y[o + i] = x[src + i * step];
      }
    }
  }

  void backward(const OpArgs& a) const override {
    if (a.grad_inputs[0].f() == nullptr) return;
    const bool fresh = a.fresh(0);
    const int64_t step = src_strides_.back();
    for (int64_t s = 0; s < a.batch; ++s) {
      float* dx_sample = a.grad_inputs[0].f() + s * n_in_;
      if (fresh && gap_.outer > 0) zero_outside_window(dx_sample);
      float* dx = dx_sample + base_;
      const float* dy = a.grad_outputs[0].f() + s * n_out_;
      for (int64_t o = 0; o < n_out_; o += row_) {
        const int64_t src = source(o);
        if (step == 1) {  // contiguous rows: copied, or added vectorised
          if (fresh) {
            std::memcpy(dx + src, dy + o, static_cast<size_t>(row_) * sizeof(float));
          } else {
            vec::add_into(dx + src, dy + o, row_);
          }
        } else if (fresh) {
          for (int64_t i = 0; i < row_; ++i) dx[src + i * step] = dy[o + i];
        } else {
          for (int64_t i = 0; i < row_; ++i) dx[src + i * step] += dy[o + i];
        }
      }
    }
  }
  // Every input element receives one output element, or (windowed) a zero.
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  // Input offset (from base) of output element o.
  int64_t source(int64_t o) const {
    int64_t src = 0;
    for (size_t d = 0; d < out_strides_.size(); ++d) {
      src += (o / out_strides_[d]) * src_strides_[d];
      o %= out_strides_[d];
    }
    return src;
  }
  // The input gradient outside the window, per outer index of the windowed input axis.
  void zero_outside_window(float* dx) const {
    for (int64_t o = 0; o < gap_.outer; ++o) {
      float* chunk = dx + o * gap_.chunk;
      std::fill(chunk, chunk + gap_.begin, 0.0f);
      std::fill(chunk + gap_.end, chunk + gap_.chunk, 0.0f);
    }
  }

  int64_t n_in_, n_out_ = 0;  // elements per sample
  int64_t base_;
  std::vector<int64_t> out_strides_, src_strides_;
  int64_t row_ = 1;  // the output's last dim
  struct {
    int64_t outer = 0, begin = 0, end = 0, chunk = 0;
  } gap_;
};

// The same elements in the same order: a copy.
class ReshapeKernel final : public OpKernel {
 public:
  explicit ReshapeKernel(int64_t n) : n_(n) {}
  void forward(const OpArgs& a) const override {
    std::memcpy(a.outputs[0].f(), a.inputs[0].f(),
                static_cast<size_t>(a.batch * n_) * sizeof(float));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* dy = a.grad_outputs[0].f();
    if (a.fresh(0)) {
      std::memcpy(dx, dy, static_cast<size_t>(a.batch * n_) * sizeof(float));
      return;
    }
    for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] += dy[i];
  }
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  int64_t n_;
};

KernelResult wrap(std::unique_ptr<OpKernel> k) { return KernelResult(std::move(k)); }

}  // namespace

KernelResult make_matmul(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(MatmulShape s, read_matmul(op));
  return wrap(std::make_unique<MatmulKernel>(s));
}

KernelResult make_scale(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ScaleAttrs a, op_attrs<model::ScaleAttrs>(op));
  return wrap(std::make_unique<ScaleKernel>(model::num_elements(op.input_specs[0]),
                                            static_cast<float>(a.factor)));
}

KernelResult make_transpose(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(TransposeShape t, read_transpose(op));
  return wrap(std::make_unique<TransposeKernel>(op.input_specs[0], t));
}

KernelResult make_reshape(const model::OpNode& op) {
  // Ids (int64) move as twice as many floats.
  return wrap(std::make_unique<ReshapeKernel>(model::num_elements(op.input_specs[0]) *
                                              float_units(op.input_specs[0])));
}

}  // namespace gp::exec::cpu
