// CUDA kernels of the dense family: linear, embedding bag, multi-head self-attention, layer norm
// and matmul. Each mirrors its CPU reference (cpu/dense_kernels.cc, cpu/simple_kernels.cc,
// cpu/layout_kernels.cc): same attributes, parameter order and layout, formulas and accumulation
// rules. GEMMs go through gemm()/gemm_batched() (ctx.precision); the rest is in dense_kernels.cu.
// Everything is queued on ctx.stream and every failure is recorded in ctx.
//
// Saved-scratch layouts are private and, like the CPU's, laid out region by region over the whole
// call: backward must get the batch and saved buffer of the forward it follows. Backward never
// modifies what forward saved, so it may run more than once.
#include <cmath>
#include <string>

#include "cuda/dense_launch.h"
#include "cuda/kernels.h"
#include "cuda/lt_linear.h"

namespace gp::exec::cuda {
namespace {

KernelResult wrap(std::unique_ptr<OpKernel> k) { return KernelResult(std::move(k)); }

// ---- linear ------------------------------------------------------------------------------------

// y = act(x W^T + b) over the last dim. Saved as on the CPU: relu -> dZ scratch [n]; gelu -> the
// pre-activation Z [n] then dZ scratch [n] (n = batch * rows * out); none -> nothing (dZ = dY).
// Forward is one cuBLASLt GEMM with the bias and activation in its epilogue where the device uses
// cuBLASLt, else a GEMM and a bias/activation pass.
class LinearKernel final : public OpKernel {
 public:
  LinearKernel(const CudaContext& ctx, int64_t rows, int64_t in, int64_t out, bool bias, int act)
      : ctx_(ctx),
        rows_(rows),
        in_(in),
        out_(out),
        bias_(bias),
        act_(act),
        fused_(LtLinear::create(ctx, in, out, bias, act)) {}

  // gelu keeps its pre-activation; backward's dZ goes to the workspace.
  int64_t saved_floats_per_sample() const override {
    return act_ == kDenseActGelu ? rows_ * out_ : 0;
  }
  int64_t workspace_floats_per_sample() const override {
    return act_ == kDenseActNone ? 0 : rows_ * out_;
  }

  void forward(const OpArgs& a) const override {
    const int64_t m = a.batch * rows_;
    float* y = a.outputs[0].f();
    // gelu's backward needs the pre-activation, so it goes to saved; relu's derivative is read off
    // the output, so Z is computed in place in y.
    float* z = act_ == kDenseActGelu ? a.saved : y;
    if (fused_ != nullptr &&
        fused_->forward(m, a.inputs[0].f(), a.params[0], bias_ ? a.params[1] : nullptr, y, z)) {
      return;
    }
    gemm(ctx_, "linear forward", false, true, m, out_, in_, 1.0f, a.inputs[0].f(), in_, a.params[0],
         in_, 0.0f, z, out_);
    if (bias_ || act_ != kDenseActNone) {
      ctx_.check(
          launch_linear_bias_act(z, y, bias_ ? a.params[1] : nullptr, m, out_, act_, ctx_.stream),
          "linear forward bias/activation");
    }
  }

  void backward(const OpArgs& a) const override {
    const int64_t m = a.batch * rows_, n = m * out_;
    const float* dy = a.grad_outputs[0].f();
    const float* dz = dy;
    if (act_ != kDenseActNone) {
      float* scratch = a.workspace;
      ctx_.check(
          launch_linear_act_backward(dy, a.outputs[0].f(), a.saved, scratch, n, act_, ctx_.stream),
          "linear backward activation");
      dz = scratch;
    }
    // dX += dZ W; dW += dZ^T X; db += column sums of dZ.
    if (float* dx = a.grad_inputs[0].f(); dx != nullptr) {
      gemm(ctx_, "linear backward dx", false, false, m, in_, out_, 1.0f, dz, out_, a.params[0], in_,
           1.0f, dx, in_);
    }
    if (a.param_grads[0] != nullptr) {
      gemm(ctx_, "linear backward dW", true, false, out_, in_, m, 1.0f, dz, out_, a.inputs[0].f(),
           in_, 1.0f, a.param_grads[0], in_);
    }
    if (bias_ && a.param_grads[1] != nullptr) {
      ctx_.check(launch_add_column_sums(dz, m, out_, a.param_grads[1], ctx_.stream),
                 "linear backward db");
    }
  }

 private:
  const CudaContext& ctx_;
  int64_t rows_, in_, out_;  // rows per sample, in and out features
  bool bias_;
  int act_;                          // kDenseAct*
  std::unique_ptr<LtLinear> fused_;  // the cuBLASLt form, when the device uses it
};

// ---- embedding bag -----------------------------------------------------------------------------

// y[bag] = sum (or mean) of W[id] over the ids of the bag (the ids' last dim). Saves nothing; the
// gradient goes to the weight only (ids are integers).
class EmbeddingBagKernel final : public OpKernel {
 public:
  EmbeddingBagKernel(const CudaContext& ctx, const EmbeddingBagShape& e) : ctx_(ctx), e_(e) {}

  void forward(const OpArgs& a) const override {
    ctx_.check(launch_embedding_bag_forward(a.inputs[0].data, e_.ids32, a.params[0],
                                            a.outputs[0].f(), a.batch * e_.bags, e_.bag, e_.rows,
                                            e_.dim, e_.mean, e_.padding, ctx_.stream),
               "embedding_bag forward");
  }

  void backward(const OpArgs& a) const override {
    float* dw = a.param_grads[0];
    if (dw == nullptr) return;
    ctx_.check(launch_embedding_bag_backward(a.inputs[0].data, e_.ids32, a.grad_outputs[0].f(), dw,
                                             a.batch * e_.bags, e_.bag, e_.rows, e_.dim, e_.mean,
                                             e_.backward_skip(), ctx_.stream),
               "embedding_bag backward");
  }

 private:
  const CudaContext& ctx_;
  EmbeddingBagShape e_;
};

// ---- multi-head self-attention -----------------------------------------------------------------

// Per sample x [S, H], heads of width d = H / heads (as the CPU reference):
//   Q = x Wq^T + bq (K, V likewise); P_h = softmax(Q_h K_h^T / sqrt(d)); C_h = P_h V_h;
//   out = C Wo^T + bo, with C the heads concatenated along the hidden dim.
// Params: Wq, Wk, Wv, Wo [H, H], then (with bias) bq, bk, bv, bo [H].
// Head h of Q is the column block [h*d, (h+1)*d) of the [S, H] matrix. Head blocks of successive
// samples are S*H apart, so each head is one strided-batched GEMM over the batch.
// Saved: Q, K, V, C [S*H each], P [heads*S*S] (sample-major, then head; kernel_common.h);
// backward's workspace: dC, dQ, dK, dV [S*H each], dP [heads*S*S] (all heads at once, unlike the
// CPU's one-head dP, so the softmax backward is one launch).
class AttentionKernel final : public OpKernel {
 public:
  AttentionKernel(const CudaContext& ctx, int64_t seq, int64_t hidden, int64_t heads, bool bias)
      : ctx_(ctx), s_(seq), h_(hidden), heads_(heads), d_(hidden / heads), bias_(bias) {}

  int64_t saved_floats_per_sample() const override {
    return attention_saved_floats(s_, h_, heads_);
  }
  int64_t workspace_floats_per_sample() const override { return 4 * s_ * h_ + heads_ * s_ * s_; }

  void forward(const OpArgs& a) const override {
    const AttentionSaved l = layout(a);
    const int64_t m = a.batch * s_, sh = s_ * h_, sp = heads_ * s_ * s_;
    const float* x = a.inputs[0].f();
    float* qkv[3] = {l.q, l.k, l.v};
    for (int p = 0; p < 3; ++p) {  // Q, K, V projections over all batch * S rows
      gemm(ctx_, "attention forward qkv", false, true, m, h_, h_, 1.0f, x, h_, a.params[p], h_,
           0.0f, qkv[p], h_);
      if (bias_) {
        ctx_.check(launch_add_bias_rows(qkv[p], a.params[4 + p], m, h_, ctx_.stream),
                   "attention forward qkv bias");
      }
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t hd = 0; hd < heads_; ++hd) {
      const int64_t off = hd * d_;
      gemm_batched(ctx_, "attention forward scores", false, true, s_, s_, d_, scale, l.q + off, h_,
                   sh, l.k + off, h_, sh, 0.0f, l.p + hd * s_ * s_, s_, sp, a.batch);
    }
    ctx_.check(launch_softmax_rows(l.p, a.batch * heads_ * s_, s_, ctx_.stream),
               "attention forward softmax");
    for (int64_t hd = 0; hd < heads_; ++hd) {
      const int64_t off = hd * d_;
      gemm_batched(ctx_, "attention forward context", false, false, s_, d_, s_, 1.0f,
                   l.p + hd * s_ * s_, s_, sp, l.v + off, h_, sh, 0.0f, l.c + off, h_, sh, a.batch);
    }
    float* y = a.outputs[0].f();
    gemm(ctx_, "attention forward output", false, true, m, h_, h_, 1.0f, l.c, h_, a.params[3], h_,
         0.0f, y, h_);
    if (bias_) {
      ctx_.check(launch_add_bias_rows(y, a.params[7], m, h_, ctx_.stream),
                 "attention forward output bias");
    }
  }

  void backward(const OpArgs& a) const override {
    const AttentionSaved l = layout(a);
    const int64_t m = a.batch * s_, sh = s_ * h_, sp = heads_ * s_ * s_;
    const float* x = a.inputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    float* const* dparams = a.param_grads.data();

    // Output projection: dC = dY Wo; dWo += dY^T C; dbo += column sums of dY.
    gemm(ctx_, "attention backward dC", false, false, m, h_, h_, 1.0f, dy, h_, a.params[3], h_,
         0.0f, l.dc, h_);
    if (dparams[3] != nullptr) {
      gemm(ctx_, "attention backward dWo", true, false, h_, h_, m, 1.0f, dy, h_, l.c, h_, 1.0f,
           dparams[3], h_);
    }
    if (bias_ && dparams[7] != nullptr) {
      ctx_.check(launch_add_column_sums(dy, m, h_, dparams[7], ctx_.stream),
                 "attention backward dbo");
    }

    // Per head: dP = dC_h V_h^T; dV_h = P^T dC_h.
    for (int64_t hd = 0; hd < heads_; ++hd) {
      const int64_t off = hd * d_;
      const float* p = l.p + hd * s_ * s_;
      gemm_batched(ctx_, "attention backward dP", false, true, s_, s_, d_, 1.0f, l.dc + off, h_, sh,
                   l.v + off, h_, sh, 0.0f, l.dp + hd * s_ * s_, s_, sp, a.batch);
      gemm_batched(ctx_, "attention backward dV", true, false, s_, d_, s_, 1.0f, p, s_, sp,
                   l.dc + off, h_, sh, 0.0f, l.dv + off, h_, sh, a.batch);
    }
    // Softmax backward in place on dP: dScores = P * (dP - rowsum(dP * P)).
    ctx_.check(launch_softmax_rows_backward(l.p, l.dp, a.batch * heads_ * s_, s_, ctx_.stream),
               "attention backward softmax");
    // Scores = scale * Q_h K_h^T: dQ_h = scale * dScores K_h; dK_h = scale * dScores^T Q_h.
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t hd = 0; hd < heads_; ++hd) {
      const int64_t off = hd * d_;
      const float* ds = l.dp + hd * s_ * s_;
      gemm_batched(ctx_, "attention backward dQ", false, false, s_, d_, s_, scale, ds, s_, sp,
                   l.k + off, h_, sh, 0.0f, l.dq + off, h_, sh, a.batch);
      gemm_batched(ctx_, "attention backward dK", true, false, s_, d_, s_, scale, ds, s_, sp,
                   l.q + off, h_, sh, 0.0f, l.dk + off, h_, sh, a.batch);
    }

    // Input projections: dX += dQ Wq + dK Wk + dV Wv; dW_p += dP_p^T X; db_p += column sums.
    const float* dqkv[3] = {l.dq, l.dk, l.dv};
    float* dx = a.grad_inputs[0].f();
    for (int p = 0; p < 3; ++p) {
      if (dx != nullptr) {
        gemm(ctx_, "attention backward dx", false, false, m, h_, h_, 1.0f, dqkv[p], h_, a.params[p],
             h_, 1.0f, dx, h_);
      }
      if (dparams[p] != nullptr) {
        gemm(ctx_, "attention backward dW", true, false, h_, h_, m, 1.0f, dqkv[p], h_, x, h_, 1.0f,
             dparams[p], h_);
      }
      if (bias_ && dparams[4 + p] != nullptr) {
        ctx_.check(launch_add_column_sums(dqkv[p], m, h_, dparams[4 + p], ctx_.stream),
                   "attention backward db");
      }
    }
  }

 private:
  AttentionSaved layout(const OpArgs& a) const {
    return attention_saved(a.saved, a.workspace, a.batch, s_, h_);
  }

  const CudaContext& ctx_;
  int64_t s_, h_, heads_, d_;  // sequence, hidden, heads, head width
  bool bias_;
};

// ---- layer norm --------------------------------------------------------------------------------

// y = (x - mean) * rstd * gamma + beta over the last dim, rstd = 1 / sqrt(var + eps) with the
// biased variance. Params: gamma, beta [cols], each only where the op has it (else 1 and 0).
// Saved: (mean, rstd) per row, interleaved.
class LayerNormKernel final : public OpKernel {
 public:
  LayerNormKernel(const CudaContext& ctx, int64_t rows, int64_t cols, float eps, bool scale,
                  bool shift)
      : ctx_(ctx), rows_(rows), cols_(cols), eps_(eps), scale_(scale), shift_(shift) {}
  int64_t saved_floats_per_sample() const override { return 2 * rows_; }

  void forward(const OpArgs& a) const override {
    ctx_.check(launch_layer_norm_forward(a.inputs[0].f(), gamma(a.params), beta(a.params),
                                         a.outputs[0].f(), a.saved, a.batch * rows_, cols_, eps_,
                                         ctx_.stream),
               "layer_norm forward");
  }

  // With xh = (x - mean) * rstd and g = dy * gamma:
  //   dx = rstd * (g - mean(g) - xh * mean(g * xh)); dgamma += dy * xh; dbeta += dy.
  void backward(const OpArgs& a) const override {
    const int64_t rows = a.batch * rows_;
    const float* x = a.inputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    if (scale_ || shift_) {
      ctx_.check(launch_layer_norm_backward_params(x, dy, a.saved, gamma(a.param_grads),
                                                   beta(a.param_grads), rows, cols_, ctx_.stream),
                 "layer_norm backward params");
    }
    if (float* dx = a.grad_inputs[0].f(); dx != nullptr) {
      ctx_.check(launch_layer_norm_backward_input(x, dy, gamma(a.params), a.saved, dx, rows, cols_,
                                                  ctx_.stream),
                 "layer_norm backward dx");
    }
  }

 private:
  float* gamma(std::span<float* const> p) const { return scale_ ? p[0] : nullptr; }
  float* beta(std::span<float* const> p) const { return shift_ ? p[scale_ ? 1 : 0] : nullptr; }

  const CudaContext& ctx_;
  int64_t rows_, cols_;  // rows per sample, last dim
  float eps_;
  bool scale_, shift_;
};

// ---- matmul ------------------------------------------------------------------------------------

// y[l] = alpha op(a[l]) op(b[l]) for every (sample, leading index) l (kernel_common.h's
// matmul_gemms); all batch * count products are one strided-batched GEMM. Saves nothing
// (backward reads both inputs). Gradients accumulate (the runner zeroes them first).
class MatmulKernel final : public OpKernel {
 public:
  MatmulKernel(const CudaContext& ctx, const MatmulShape& s)
      : ctx_(ctx), g_(matmul_gemms(s)), count_(s.count) {}

  void forward(const OpArgs& a) const override {
    run("matmul forward", g_.forward, a, a.outputs[0].f(), 0.0f);
  }

  void backward(const OpArgs& a) const override {
    if (float* da = a.grad_inputs[0].f(); da != nullptr) {
      run("matmul backward da", g_.grad_a, a, da, 1.0f);
    }
    if (float* db = a.grad_inputs[1].f(); db != nullptr) {
      run("matmul backward db", g_.grad_b, a, db, 1.0f);
    }
  }

 private:
  void run(const char* what, const MatmulGemm& g, const OpArgs& a, float* c, float beta) const {
    gemm_batched(ctx_, what, g.transpose_x, g.transpose_y, g.rows, g.cols, g.inner, g.alpha,
                 matmul_operand(g.x, a), g.ld_x, g.stride_x, matmul_operand(g.y, a), g.ld_y,
                 g.stride_y, beta, c, g.ld_c, g.stride_c, a.batch * count_);
  }

  const CudaContext& ctx_;
  MatmulGemms g_;
  int64_t count_;  // matrices per sample
};

}  // namespace

KernelResult make_linear(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::LinearAttrs a, op_attrs<model::LinearAttrs>(op));
  const int kind = a.activation == model::Activation::kRelu   ? kDenseActRelu
                   : a.activation == model::Activation::kGelu ? kDenseActGelu
                                                              : kDenseActNone;
  const int64_t in = last_dim(x);
  return wrap(std::make_unique<LinearKernel>(ctx, model::num_elements(x) / in, in, a.out_features,
                                             a.bias, kind));
}

KernelResult make_embedding_bag(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(EmbeddingBagShape e, read_embedding_bag(op));
  return wrap(std::make_unique<EmbeddingBagKernel>(ctx, e));
}

KernelResult make_attention(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::AttentionAttrs a, op_attrs<model::AttentionAttrs>(op));
  return wrap(std::make_unique<AttentionKernel>(ctx, x.shape(0), x.shape(1), a.num_heads, a.bias));
}

KernelResult make_layer_norm(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::NormAttrs a, op_attrs<model::NormAttrs>(op));
  const double eps = a.epsilon;
  const int64_t cols = last_dim(x);
  return wrap(std::make_unique<LayerNormKernel>(ctx, model::num_elements(x) / cols, cols,
                                                static_cast<float>(eps), a.scale, a.shift));
}

KernelResult make_matmul(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(MatmulShape s, read_matmul(op));
  return wrap(std::make_unique<MatmulKernel>(ctx, s));
}

}  // namespace gp::exec::cuda
