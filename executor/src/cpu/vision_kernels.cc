// CPU reference kernels of the vision ops: conv2d (direct for stride 1, else im2col + GEMM), max
// and average pooling, and batch normalisation with batch statistics. Images are per-sample [C, H,
// W], batch-major.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cpu/direct_conv.h"
#include "cpu/im2col.h"
#include "cpu/kernel_util.h"
#include "cpu/vec_math.h"

namespace gp::exec::cpu {
namespace {

using Window = VisionWindow;

// ---- conv2d ------------------------------------------------------------------------------------

// Per sample: cols [C*kh*kw, Ho*Wo] = im2col(x) (row (c*kh + i)*kw + j, column oh*Wo + ow holds
// x[c, oh*sh - ph + i, ow*sw - pw + j], zero outside the image); y [out, Ho*Wo] = W cols + b.
// Backward: dW += dY cols^T, db += row sums of dY, dcols = W^T dY, dx += col2im(dcols). With
// groups G, each of these is G GEMMs over the group's filters and rows of cols. Stride 1 with
// one group runs direct instead (direct_conv.h): no im2col copies, no GEMM packing.
// Saves nothing; cols and the direct path's copies are scratch of the instance (one call at a
// time).
class Conv2dKernel final : public OpKernel {
 public:
  Conv2dKernel(const Window& w, int64_t out, bool bias, int64_t groups)
      : w_(w),
        out_(out),
        bias_(bias),
        groups_(groups),
        patch_(w.c * w.kh * w.kw),
        positions_(w.ho * w.wo),
        group_out_(out / groups),
        group_patch_(patch_ / groups) {
    if (DirectConv::applies(w, groups)) {
      direct_.emplace(w, out);
    } else {
      cols_.resize(static_cast<size_t>(patch_ * positions_));
    }
  }

  void forward(const OpArgs& a) const override {
    const int64_t in_n = w_.c * w_.h * w_.w, out_n = out_ * positions_;
    if (direct_) {
      direct_->forward(a.batch, a.inputs[0].f(), a.params[0], bias_ ? a.params[1] : nullptr,
                       a.outputs[0].f());
      return;
    }
    for (int64_t s = 0; s < a.batch; ++s) {
      float* y = a.outputs[0].f() + s * out_n;
      im2col(w_, a.inputs[0].f() + s * in_n, cols_.data());
      // Group g: its out/G filters read its C/G channels, rows [g, g+1) * C/G*kh*kw of cols.
      for (int64_t g = 0; g < groups_; ++g) {
        gemm(false, false, group_out_, positions_, group_patch_, 1.0f, weight(a.params[0], g),
             group_patch_, group_cols(g), positions_, 0.0f, y + g * group_out_ * positions_,
             positions_);
      }
      if (!bias_) continue;
      for (int64_t o = 0; o < out_; ++o) {
        for (int64_t p = 0; p < positions_; ++p) y[o * positions_ + p] += a.params[1][o];
      }
    }
  }

  void backward(const OpArgs& a) const override {
    const int64_t in_n = w_.c * w_.h * w_.w, out_n = out_ * positions_;
    float* dw = a.param_grads[0];
    float* db = bias_ ? a.param_grads[1] : nullptr;
    float* dx = a.grad_inputs[0].f();
    if (direct_) {
      const float* dy = a.grad_outputs[0].f();
      if (dw != nullptr) direct_->backward_weights(a.batch, a.inputs[0].f(), dy, dw);
      if (db != nullptr) {
        for (int64_t s = 0; s < a.batch; ++s) add_row_sums(dy + s * out_n, db);
      }
      if (dx != nullptr) direct_->backward_data(a.batch, dy, a.params[0], dx, !a.fresh(0));
      return;
    }
    for (int64_t s = 0; s < a.batch; ++s) {
      const float* dy = a.grad_outputs[0].f() + s * out_n;
      if (dw != nullptr) {
        im2col(w_, a.inputs[0].f() + s * in_n, cols_.data());
        for (int64_t g = 0; g < groups_; ++g) {
          gemm(false, true, group_out_, group_patch_, positions_, 1.0f,
               dy + g * group_out_ * positions_, positions_, group_cols(g), positions_, 1.0f,
               weight(dw, g), group_patch_);
        }
      }
      if (db != nullptr) add_row_sums(dy, db);
      if (dx != nullptr) {
        for (int64_t g = 0; g < groups_; ++g) {
          gemm(true, false, group_patch_, positions_, group_out_, 1.0f, weight(a.params[0], g),
               group_patch_, dy + g * group_out_ * positions_, positions_, 0.0f, group_cols(g),
               positions_);
        }
        col2im_add(w_, cols_.data(), dx + s * in_n);
      }
    }
  }
  // The direct path writes the whole input gradient; col2im adds into it.
  bool overwrites_grad_input(size_t k) const override { return k == 0 && direct_.has_value(); }

 private:
  // db[o] += the sum of dy's channel o over the positions.
  void add_row_sums(const float* dy, float* db) const {
    for (int64_t o = 0; o < out_; ++o) db[o] += vec::sum(dy + o * positions_, positions_);
  }

  // Group g's filters [out/G, C/G*kh*kw] in a weight [out, C/G, kh, kw], and its rows of cols.
  template <typename T>
  T* weight(T* w, int64_t g) const {
    return w + g * group_out_ * group_patch_;
  }
  float* group_cols(int64_t g) const { return cols_.data() + g * group_patch_ * positions_; }

  Window w_;
  int64_t out_;
  bool bias_;
  int64_t groups_;
  int64_t patch_, positions_;         // C*kh*kw, Ho*Wo
  int64_t group_out_, group_patch_;   // out/G, C/G*kh*kw
  mutable std::vector<float> cols_;   // [patch, positions], im2col's path only
  std::optional<DirectConv> direct_;  // stride 1, one group
};

// ---- pooling -----------------------------------------------------------------------------------

// Calls f(oh, ow, h0, h1, w0, w1) for every output cell, with [h0, h1) x [w0, w1) its window
// clipped to the image (never empty: shape inference keeps padding < kernel).
template <typename F>
void for_each_window(const Window& w, F&& f) {
  for (int64_t oh = 0; oh < w.ho; ++oh) {
    const int64_t top = oh * w.sh - w.ph;
    const int64_t h0 = std::max<int64_t>(top, 0), h1 = std::min(top + w.kh, w.h);
    for (int64_t ow = 0; ow < w.wo; ++ow) {
      const int64_t left = ow * w.sw - w.pw;
      const int64_t w0 = std::max<int64_t>(left, 0), w1 = std::min(left + w.kw, w.w);
      f(oh, ow, h0, h1, w0, w1);
    }
  }
}

// y = the maximum of each window's image cells. Saved: per output cell, the winner's index in
// its channel plane (h*W + w), stored as the bits of an int32.
class MaxPool2dKernel final : public OpKernel {
 public:
  explicit MaxPool2dKernel(const Window& w) : w_(w) {}
  int64_t saved_floats_per_sample() const override { return w_.c * w_.ho * w_.wo; }

  void forward(const OpArgs& a) const override {
    const int64_t plane = w_.h * w_.w, out_plane = w_.ho * w_.wo;
    for (int64_t sc = 0; sc < a.batch * w_.c; ++sc) {
      const float* x = a.inputs[0].f() + sc * plane;
      float* y = a.outputs[0].f() + sc * out_plane;
      float* idx = a.saved + sc * out_plane;
      for_each_window(w_,
                      [&](int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
                        int64_t best = h0 * w_.w + w0;
                        for (int64_t ih = h0; ih < h1; ++ih) {
                          for (int64_t iw = w0; iw < w1; ++iw) {
                            if (x[ih * w_.w + iw] > x[best]) best = ih * w_.w + iw;
                          }
                        }
                        y[oh * w_.wo + ow] = x[best];
                        idx[oh * w_.wo + ow] = std::bit_cast<float>(static_cast<int32_t>(best));
                      });
    }
  }

  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const int64_t plane = w_.h * w_.w, out_plane = w_.ho * w_.wo;
    for (int64_t sc = 0; sc < a.batch * w_.c; ++sc) {
      const float* dy = a.grad_outputs[0].f() + sc * out_plane;
      const float* idx = a.saved + sc * out_plane;
      float* d = dx + sc * plane;
      for (int64_t o = 0; o < out_plane; ++o) d[std::bit_cast<int32_t>(idx[o])] += dy[o];
    }
  }

 private:
  Window w_;
};

// y = the sum of each window's image cells over kh*kw (count_include_pad) or over the number of
// image cells in the window. Saves nothing.
class AvgPool2dKernel final : public OpKernel {
 public:
  AvgPool2dKernel(const Window& w, bool include_pad) : w_(w), include_pad_(include_pad) {}

  void forward(const OpArgs& a) const override {
    const int64_t plane = w_.h * w_.w, out_plane = w_.ho * w_.wo;
    for (int64_t sc = 0; sc < a.batch * w_.c; ++sc) {
      const float* x = a.inputs[0].f() + sc * plane;
      float* y = a.outputs[0].f() + sc * out_plane;
      for_each_window(w_,
                      [&](int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
                        float sum = 0;
                        for (int64_t ih = h0; ih < h1; ++ih) {
                          for (int64_t iw = w0; iw < w1; ++iw) sum += x[ih * w_.w + iw];
                        }
                        y[oh * w_.wo + ow] = sum / divisor(oh, ow, h0, h1, w0, w1);
                      });
    }
  }

  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const int64_t plane = w_.h * w_.w, out_plane = w_.ho * w_.wo;
    for (int64_t sc = 0; sc < a.batch * w_.c; ++sc) {
      const float* dy = a.grad_outputs[0].f() + sc * out_plane;
      float* d = dx + sc * plane;
      for_each_window(w_,
                      [&](int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
                        const float g = dy[oh * w_.wo + ow] / divisor(oh, ow, h0, h1, w0, w1);
                        for (int64_t ih = h0; ih < h1; ++ih) {
                          for (int64_t iw = w0; iw < w1; ++iw) d[ih * w_.w + iw] += g;
                        }
                      });
    }
  }

 private:
  // With count_include_pad: the window's cells inside the padded image (kh * kw unless a
  // ceil-mode window hangs over its far edge), as PyTorch divides; else its image cells.
  float divisor(int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) const {
    if (!include_pad_) return static_cast<float>((h1 - h0) * (w1 - w0));
    const int64_t top = oh * w_.sh - w_.ph, left = ow * w_.sw - w_.pw;
    const int64_t bottom = std::min(top + w_.kh, w_.h + w_.ph);
    const int64_t right = std::min(left + w_.kw, w_.w + w_.pw);
    return static_cast<float>((bottom - top) * (right - left));
  }

  Window w_;
  bool include_pad_;
};

// ---- batch norm --------------------------------------------------------------------------------

// x [C, inner...]: channel c of the call is the batch * inner elements x[s, c, :]. With the
// call's statistics mean_c and biased variance var_c, rstd = 1 / sqrt(var + eps):
//   y = (x - mean) * rstd * gamma + beta.
// Backward recomputes the statistics from the input (they belong to the whole call, while saved
// scratch is per sample) and, with M = batch * inner, xh = (x - mean) * rstd:
//   dx += gamma * rstd * (dy - sum(dy) / M - xh * sum(dy * xh) / M);
//   dgamma += sum(dy * xh); dbeta += sum(dy).
// Accumulates in double. Saves nothing.
class BatchNormKernel final : public OpKernel {
 public:
  BatchNormKernel(int64_t channels, int64_t inner, double eps)
      : c_(channels), inner_(inner), eps_(eps) {}

  void forward(const OpArgs& a) const override {
    for (int64_t c = 0; c < c_; ++c) {
      const Stats st = stats(a, c);
      const double gamma = a.params[0][c], beta = a.params[1][c];
      for (int64_t s = 0; s < a.batch; ++s) {
        const int64_t off = (s * c_ + c) * inner_;
        const float* x = a.inputs[0].f() + off;
        float* y = a.outputs[0].f() + off;
        for (int64_t i = 0; i < inner_; ++i) {
          y[i] = static_cast<float>((x[i] - st.mean) * st.rstd * gamma + beta);
        }
      }
    }
  }

  void backward(const OpArgs& a) const override {
    float* dgamma = a.param_grads[0];
    float* dbeta = a.param_grads[1];
    float* dx_all = a.grad_inputs[0].f();
    const double m = static_cast<double>(a.batch * inner_);
    for (int64_t c = 0; c < c_; ++c) {
      const Stats st = stats(a, c);
      double sum_dy = 0, sum_dy_xh = 0;
      for (int64_t s = 0; s < a.batch; ++s) {
        const int64_t off = (s * c_ + c) * inner_;
        const float* x = a.inputs[0].f() + off;
        const float* dy = a.grad_outputs[0].f() + off;
        for (int64_t i = 0; i < inner_; ++i) {
          sum_dy += dy[i];
          sum_dy_xh += dy[i] * ((x[i] - st.mean) * st.rstd);
        }
      }
      if (dgamma != nullptr) dgamma[c] += static_cast<float>(sum_dy_xh);
      if (dbeta != nullptr) dbeta[c] += static_cast<float>(sum_dy);
      if (dx_all == nullptr) continue;
      const double k = a.params[0][c] * st.rstd;
      const double mean_dy = sum_dy / m, mean_dy_xh = sum_dy_xh / m;
      for (int64_t s = 0; s < a.batch; ++s) {
        const int64_t off = (s * c_ + c) * inner_;
        const float* x = a.inputs[0].f() + off;
        const float* dy = a.grad_outputs[0].f() + off;
        float* dx = dx_all + off;
        for (int64_t i = 0; i < inner_; ++i) {
          const double xh = (x[i] - st.mean) * st.rstd;
          dx[i] += static_cast<float>(k * (dy[i] - mean_dy - xh * mean_dy_xh));
        }
      }
    }
  }

 private:
  struct Stats {
    double mean, rstd;
  };
  // Two passes (no cancellation for large means).
  Stats stats(const OpArgs& a, int64_t c) const {
    double sum = 0;
    for (int64_t s = 0; s < a.batch; ++s) {
      const float* x = a.inputs[0].f() + (s * c_ + c) * inner_;
      for (int64_t i = 0; i < inner_; ++i) sum += x[i];
    }
    const double m = static_cast<double>(a.batch * inner_);
    const double mean = sum / m;
    double var = 0;
    for (int64_t s = 0; s < a.batch; ++s) {
      const float* x = a.inputs[0].f() + (s * c_ + c) * inner_;
      for (int64_t i = 0; i < inner_; ++i) var += (x[i] - mean) * (x[i] - mean);
    }
    return {mean, 1.0 / std::sqrt(var / m + eps_)};
  }

  int64_t c_, inner_;  // channels, elements per channel per sample
  double eps_;
};

KernelResult wrap(std::unique_ptr<OpKernel> k) { return KernelResult(std::move(k)); }

}  // namespace

KernelResult make_conv2d(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ConvAttrs a, op_attrs<model::ConvAttrs>(op));
  const Window w = vision_window(a.window);
  const int64_t out = a.out_channels, groups = a.groups;
  const bool bias = a.bias;
  return wrap(std::make_unique<Conv2dKernel>(w, out, bias, groups));
}

KernelResult make_max_pool2d(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::PoolAttrs a, op_attrs<model::PoolAttrs>(op));
  const Window w = vision_window(a.window);
  if (w.h * w.w > std::numeric_limits<int32_t>::max()) {
    return op_error(op, "a channel plane of more than 2^31 - 1 elements");
  }
  return wrap(std::make_unique<MaxPool2dKernel>(w));
}

KernelResult make_avg_pool2d(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::PoolAttrs a, op_attrs<model::PoolAttrs>(op));
  const Window w = vision_window(a.window);
  const bool include_pad = a.count_include_pad;
  return wrap(std::make_unique<AvgPool2dKernel>(w, include_pad));
}

KernelResult make_batch_norm(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::NormAttrs a, op_attrs<model::NormAttrs>(op));
  const double eps = a.epsilon;
  const int64_t channels = x.shape(0);
  return wrap(std::make_unique<BatchNormKernel>(channels, model::num_elements(x) / channels, eps));
}

}  // namespace gp::exec::cpu
