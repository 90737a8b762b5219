// CPU reference kernels of the ops with parameters: linear, embedding bag, multi-head
// self-attention. GEMMs run on CBLAS over the whole batch (tensors are batch-major, so a batch of
// per-sample [rows, features] tensors is one [batch * rows, features] matrix).
//
// Saved-scratch layout is private to each kernel and laid out region by region over the whole
// call (e.g. all samples' Q, then all samples' K): backward must be given the same batch and saved
// buffer as the forward it follows, which the executor does. Backward never modifies the values
// forward saved, so it may be called more than once.
#include <cmath>
#include <cstring>
#include <string>

#include "cpu/kernel_util.h"
#include "cpu/vec_math.h"

namespace gp::exec::cpu {
namespace {

using vec::add_bias_rows;
using vec::add_column_sums;

// ---- linear ------------------------------------------------------------------------------------

enum class Act { kNone, kRelu, kGelu };

// y = act(x W^T + b) over the last dim. Saved: relu -> dZ scratch [n]; gelu -> the pre-activation
// Z [n] then dZ scratch [n] (n = batch * rows * out); none -> nothing (dZ = dY).
class LinearKernel final : public OpKernel {
 public:
  LinearKernel(int64_t rows, int64_t in, int64_t out, bool bias, Act act)
      : rows_(rows), in_(in), out_(out), bias_(bias), act_(act) {}

  // gelu keeps its pre-activation; backward's dZ goes to the workspace.
  int64_t saved_floats_per_sample() const override { return act_ == Act::kGelu ? rows_ * out_ : 0; }
  int64_t workspace_floats_per_sample() const override {
    return act_ == Act::kNone ? 0 : rows_ * out_;
  }

  void forward(const OpArgs& a) const override {
    const int64_t m = a.batch * rows_, n = m * out_;
    float* y = a.outputs[0].f();
    // The pre-activation goes where backward can find it: Z in saved for gelu, else y itself
    // (relu's derivative is read off its output).
    float* z = act_ == Act::kGelu ? a.saved : y;
    // The bias rows first, the product added onto them: one pass over z fewer than adding the
    // bias afterwards (with beta 0 the BLAS clears z itself).
    if (bias_) {
      const size_t row_bytes = static_cast<size_t>(out_) * sizeof(float);
      for (int64_t r = 0; r < m; ++r) std::memcpy(z + r * out_, a.params[1], row_bytes);
    }
    gemm(false, true, m, out_, in_, 1.0f, a.inputs[0].f(), in_, a.params[0], in_,
         bias_ ? 1.0f : 0.0f, z, out_);
    if (act_ == Act::kRelu) {
      vec::relu(y, y, n);
    } else if (act_ == Act::kGelu) {
      vec::gelu(z, y, n);
    }
  }

  void backward(const OpArgs& a) const override {
    const int64_t m = a.batch * rows_, n = m * out_;
    const float* dy = a.grad_outputs[0].f();
    const float* dz = dy;
    if (act_ != Act::kNone) {
      float* scratch = a.workspace;
      if (act_ == Act::kRelu) {
        vec::relu_backward(a.outputs[0].f(), dy, scratch, n, /*accumulate=*/false);
      } else {
        vec::gelu_backward(a.saved, dy, scratch, n, /*accumulate=*/false);
      }
      dz = scratch;
    }
    // dX += dZ W; dW += dZ^T X; db += column sums of dZ.
    if (float* dx = a.grad_inputs[0].f(); dx != nullptr) {
      gemm(false, false, m, in_, out_, 1.0f, dz, out_, a.params[0], in_, a.fresh(0) ? 0.0f : 1.0f,
           dx, in_);
    }
    if (a.param_grads[0] != nullptr) {
      gemm(true, false, out_, in_, m, 1.0f, dz, out_, a.inputs[0].f(), in_, 1.0f, a.param_grads[0],
           in_);
    }
    if (bias_ && a.param_grads[1] != nullptr) add_column_sums(dz, m, out_, a.param_grads[1]);
  }
  bool overwrites_grad_input(size_t k) const override { return k == 0; }

 private:
  int64_t rows_, in_, out_;  // rows per sample, in and out features
  bool bias_;
  Act act_;
};

// ---- embedding bag -----------------------------------------------------------------------------

// y[bag] = sum (or mean) of W[id] over the ids of the bag (the ids' last dim), skipping ids equal
// to the padding id (bags of varying length padded to one length; a bag of padding only is 0).
// An embedding's frozen row is read, but gets no gradient. Saves nothing; the gradient goes to the
// weight only (ids are integers).
class EmbeddingBagKernel final : public OpKernel {
 public:
  explicit EmbeddingBagKernel(const EmbeddingBagShape& e) : e_(e) {}

  void forward(const OpArgs& a) const override {
    const float* w = a.params[0];
    for (int64_t g = 0; g < a.batch * e_.bags; ++g) {
      float* y = a.outputs[0].f() + g * e_.dim;
      for (int64_t j = 0; j < e_.dim; ++j) y[j] = 0;
      for (int64_t k = 0; k < e_.bag; ++k) {
        const int64_t id = load_index(a.inputs[0].data, g * e_.bag + k, e_.ids32);
        if (id == e_.padding) continue;
        const float* row = w + checked(id) * e_.dim;
        for (int64_t j = 0; j < e_.dim; ++j) y[j] += row[j];
      }
      const float scale = scale_of(a.inputs[0].data, g);
      for (int64_t j = 0; j < e_.dim; ++j) y[j] *= scale;
    }
  }

  void backward(const OpArgs& a) const override {
    float* dw = a.param_grads[0];
    if (dw == nullptr) return;
    for (int64_t g = 0; g < a.batch * e_.bags; ++g) {
      const float* dy = a.grad_outputs[0].f() + g * e_.dim;
      const float scale = scale_of(a.inputs[0].data, g);
      for (int64_t k = 0; k < e_.bag; ++k) {
        const int64_t id = load_index(a.inputs[0].data, g * e_.bag + k, e_.ids32);
        if (id == e_.backward_skip()) continue;
        float* row = dw + checked(id) * e_.dim;
        for (int64_t j = 0; j < e_.dim; ++j) row[j] += scale * dy[j];
      }
    }
  }

 private:
  int64_t checked(int64_t id) const {
    GP_CHECK(id >= 0 && id < e_.rows, "embedding_bag: id out of range [0, num_embeddings)");
    return id;
  }

  // 1 for a sum; for a mean 1 / the bag's ids that are not padding (0 when there are none).
  float scale_of(const void* ids, int64_t g) const {
    if (!e_.mean) return 1.0f;
    int64_t count = 0;
    for (int64_t k = 0; k < e_.bag; ++k) {
      count += load_index(ids, g * e_.bag + k, e_.ids32) != e_.padding ? 1 : 0;
    }
    return count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  }

  EmbeddingBagShape e_;
};

// ---- multi-head self-attention -----------------------------------------------------------------

// Per sample x [S, H], heads of width d = H / heads:
//   Q = x Wq^T + bq (K, V likewise); P_h = softmax(Q_h K_h^T / sqrt(d)); C_h = P_h V_h;
//   out = C Wo^T + bo, with C the heads concatenated along the hidden dim.
// Head h of Q is the column block [h*d, (h+1)*d) of the [S, H] matrix: base Q + h*d, row stride H.
// Saved: Q, K, V, C [S*H each], P [heads*S*S] (kernel_common.h); backward's workspace: dC, dQ,
// dK, dV [S*H each], dP [S*S] (one head at a time).
class AttentionKernel final : public OpKernel {
 public:
  AttentionKernel(int64_t seq, int64_t hidden, int64_t heads, bool bias)
      : s_(seq), h_(hidden), heads_(heads), d_(hidden / heads), bias_(bias) {}

  int64_t saved_floats_per_sample() const override {
    return attention_saved_floats(s_, h_, heads_);
  }
  int64_t workspace_floats_per_sample() const override { return 4 * s_ * h_ + s_ * s_; }

  void forward(const OpArgs& a) const override {
    const AttentionSaved l = layout(a);
    const int64_t m = a.batch * s_;
    const float* x = a.inputs[0].f();
    float* qkv[3] = {l.q, l.k, l.v};
    for (int p = 0; p < 3; ++p) {  // Q, K, V projections over all batch * S rows
      gemm(false, true, m, h_, h_, 1.0f, x, h_, a.params[p], h_, 0.0f, qkv[p], h_);
      if (bias_) add_bias_rows(qkv[p], m, h_, a.params[4 + p]);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t s = 0; s < a.batch; ++s) {
      for (int64_t hd = 0; hd < heads_; ++hd) {
        const int64_t off = s * s_ * h_ + hd * d_;  // head block of sample s
        float* p = l.p + (s * heads_ + hd) * s_ * s_;
        gemm(false, true, s_, s_, d_, scale, l.q + off, h_, l.k + off, h_, 0.0f, p, s_);
        vec::softmax_rows(p, s_, s_);
        gemm(false, false, s_, d_, s_, 1.0f, p, s_, l.v + off, h_, 0.0f, l.c + off, h_);
      }
    }
    float* y = a.outputs[0].f();
    gemm(false, true, m, h_, h_, 1.0f, l.c, h_, a.params[3], h_, 0.0f, y, h_);
    if (bias_) add_bias_rows(y, m, h_, a.params[7]);
  }

  void backward(const OpArgs& a) const override {
    const AttentionSaved l = layout(a);
    const int64_t m = a.batch * s_;
    const float* x = a.inputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    float* const* dparams = a.param_grads.data();

    // Output projection: dC = dY Wo; dWo += dY^T C; dbo += column sums of dY.
    gemm(false, false, m, h_, h_, 1.0f, dy, h_, a.params[3], h_, 0.0f, l.dc, h_);
    if (dparams[3] != nullptr)
      gemm(true, false, h_, h_, m, 1.0f, dy, h_, l.c, h_, 1.0f, dparams[3], h_);
    if (bias_ && dparams[7] != nullptr) add_column_sums(dy, m, h_, dparams[7]);

    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t s = 0; s < a.batch; ++s) {
      for (int64_t hd = 0; hd < heads_; ++hd) {
        const int64_t off = s * s_ * h_ + hd * d_;
        const float* p = l.p + (s * heads_ + hd) * s_ * s_;
        // dP = dC_h V_h^T; dV_h = P^T dC_h.
        gemm(false, true, s_, s_, d_, 1.0f, l.dc + off, h_, l.v + off, h_, 0.0f, l.dp, s_);
        gemm(true, false, s_, d_, s_, 1.0f, p, s_, l.dc + off, h_, 0.0f, l.dv + off, h_);
        // Softmax backward in place: dScores = P * (dP - rowsum(dP * P)).
        vec::softmax_rows_backward(p, l.dp, l.dp, s_, s_, /*accumulate=*/false);
        // Scores = scale * Q_h K_h^T: dQ_h = scale * dScores K_h; dK_h = scale * dScores^T Q_h.
        gemm(false, false, s_, d_, s_, scale, l.dp, s_, l.k + off, h_, 0.0f, l.dq + off, h_);
        gemm(true, false, s_, d_, s_, scale, l.dp, s_, l.q + off, h_, 0.0f, l.dk + off, h_);
      }
    }

    // Input projections: dX += dQ Wq + dK Wk + dV Wv; dW_p += dP_p^T X; db_p += column sums.
    const float* dqkv[3] = {l.dq, l.dk, l.dv};
    float* dx = a.grad_inputs[0].f();
    for (int p = 0; p < 3; ++p) {
      if (dx != nullptr)
        gemm(false, false, m, h_, h_, 1.0f, dqkv[p], h_, a.params[p], h_, 1.0f, dx, h_);
      if (dparams[p] != nullptr) {
        gemm(true, false, h_, h_, m, 1.0f, dqkv[p], h_, x, h_, 1.0f, dparams[p], h_);
      }
      if (bias_ && dparams[4 + p] != nullptr) add_column_sums(dqkv[p], m, h_, dparams[4 + p]);
    }
  }

 private:
  AttentionSaved layout(const OpArgs& a) const {
    return attention_saved(a.saved, a.workspace, a.batch, s_, h_);
  }

  int64_t s_, h_, heads_, d_;  // sequence, hidden, heads, head width
  bool bias_;
};

}  // namespace

KernelResult make_linear(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::LinearAttrs a, op_attrs<model::LinearAttrs>(op));
  const Act kind = a.activation == model::Activation::kRelu   ? Act::kRelu
                   : a.activation == model::Activation::kGelu ? Act::kGelu
                                                              : Act::kNone;
  const int64_t in = last_dim(x);
  return std::unique_ptr<OpKernel>(std::make_unique<LinearKernel>(model::num_elements(x) / in, in,
                                                                  a.out_features, a.bias, kind));
}

KernelResult make_embedding_bag(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(EmbeddingBagShape e, read_embedding_bag(op));
  return std::unique_ptr<OpKernel>(std::make_unique<EmbeddingBagKernel>(e));
}

KernelResult make_attention(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::AttentionAttrs a, op_attrs<model::AttentionAttrs>(op));
  return std::unique_ptr<OpKernel>(
      std::make_unique<AttentionKernel>(x.shape(0), x.shape(1), a.num_heads, a.bias));
}

}  // namespace gp::exec::cpu
