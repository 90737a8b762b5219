// CPU reference kernels of the upsampling ops: conv_transpose2d (GEMM + col2im, conv2d's input
// gradient) and resize (nearest or bilinear, separable taps). Images are per-sample [C, H, W].
#include <cstring>
#include <vector>

#include "cpu/im2col.h"
#include "cpu/kernel_util.h"
#include "device_api/resize_taps.h"

namespace gp::exec::cpu {
namespace {

// y = conv2d's input gradient for the window `u` over y-space (u: [out, Ho, Wo] -> [C, H, W]):
// per sample cols [out*kh*kw, H*W] = W^T x with W [C, out*kh*kw], y = col2im(cols) + b.
// Backward: dcols = im2col(dy), dx += W dcols, dW += x dcols^T, db += row sums of dy.
// cols is a scratch buffer of the instance (one call at a time), as conv2d's.
class ConvTranspose2dKernel final : public OpKernel {
 public:
  ConvTranspose2dKernel(const VisionWindow& u, int64_t in_channels, bool bias)
      : u_(u),
        in_channels_(in_channels),
        bias_(bias),
        taps_(u.c * u.kh * u.kw),
        pixels_(u.ho * u.wo),
        cols_(static_cast<size_t>(taps_ * pixels_)) {}
  void forward(const OpArgs& a) const override {
    const int64_t in_n = pixels_ * in_channels_, out_n = u_.c * u_.h * u_.w;
    for (int64_t s = 0; s < a.batch; ++s) {
      gemm(true, false, taps_, pixels_, in_channels_, 1.0f, a.params[0], taps_,
           a.inputs[0].f() + s * in_n, pixels_, 0.0f, cols_.data(), pixels_);
      float* y = a.outputs[0].f() + s * out_n;
      std::memset(y, 0, static_cast<size_t>(out_n) * sizeof(float));
      col2im_add(u_, cols_.data(), y);
      if (!bias_) continue;
      const int64_t plane = u_.h * u_.w;
      for (int64_t o = 0; o < u_.c; ++o) {
        for (int64_t p = 0; p < plane; ++p) y[o * plane + p] += a.params[1][o];
      }
    }
  }

  void backward(const OpArgs& a) const override {
    const int64_t in_n = pixels_ * in_channels_, out_n = u_.c * u_.h * u_.w;
    float* dx = a.grad_inputs[0].f();
    float* dw = a.param_grads[0];
    float* db = bias_ ? a.param_grads[1] : nullptr;
    for (int64_t s = 0; s < a.batch; ++s) {
      const float* dy = a.grad_outputs[0].f() + s * out_n;
      if (db != nullptr) {
        const int64_t plane = u_.h * u_.w;
        for (int64_t o = 0; o < u_.c; ++o) {
          double sum = 0;
          for (int64_t p = 0; p < plane; ++p) sum += dy[o * plane + p];
          db[o] += static_cast<float>(sum);
        }
      }
      if (dx == nullptr && dw == nullptr) continue;
      im2col(u_, dy, cols_.data());
      if (dx != nullptr) {
        gemm(false, false, in_channels_, pixels_, taps_, 1.0f, a.params[0], taps_, cols_.data(),
             pixels_, 1.0f, dx + s * in_n, pixels_);
      }
      if (dw != nullptr) {
        gemm(false, true, in_channels_, taps_, pixels_, 1.0f, a.inputs[0].f() + s * in_n, pixels_,
             cols_.data(), pixels_, 1.0f, dw, taps_);
      }
    }
  }

 private:
  VisionWindow u_;
  int64_t in_channels_;  // C: rows of the weight [C, out*kh*kw]
  bool bias_;
  int64_t taps_, pixels_;            // out*kh*kw, H*W
  mutable std::vector<float> cols_;  // [taps, pixels]
};

// y[c, oh, ow] = sum of the two-by-two taps of x; dx by the transposed tap lists (a gather).
class ResizeKernel final : public OpKernel {
 public:
  explicit ResizeKernel(const model::ResizeAttrs& r)
      : r_(r),
        rows_(resize_axis(r.h, r.ho, r.bilinear, r.align_corners)),
        cols_(resize_axis(r.w, r.wo, r.bilinear, r.align_corners)) {}

  void forward(const OpArgs& a) const override {
    for (int64_t p = 0; p < a.batch * r_.c; ++p) {
      const float* x = a.inputs[0].f() + p * r_.h * r_.w;
      float* y = a.outputs[0].f() + p * r_.ho * r_.wo;
      for (int64_t oh = 0; oh < r_.ho; ++oh) {
        for (int64_t ow = 0; ow < r_.wo; ++ow) {
          float v = 0;
          for (int i = 0; i < 2; ++i) {
            const ResizeTap& th = rows_.forward[static_cast<size_t>(2 * oh + i)];
            for (int j = 0; j < 2; ++j) {
              const ResizeTap& tw = cols_.forward[static_cast<size_t>(2 * ow + j)];
              v += th.weight * tw.weight * x[th.index * r_.w + tw.index];
            }
          }
          y[oh * r_.wo + ow] = v;
        }
      }
    }
  }

  void backward(const OpArgs& a) const override {
    float* dx_all = a.grad_inputs[0].f();
    if (dx_all == nullptr) return;
    for (int64_t p = 0; p < a.batch * r_.c; ++p) {
      const float* dy = a.grad_outputs[0].f() + p * r_.ho * r_.wo;
      float* dx = dx_all + p * r_.h * r_.w;
      for (int64_t ih = 0; ih < r_.h; ++ih) {
        for (int64_t iw = 0; iw < r_.w; ++iw) {
          float v = 0;
          for (int64_t k = rows_.offsets[ih]; k < rows_.offsets[ih + 1]; ++k) {
            const ResizeTap& th = rows_.backward[static_cast<size_t>(k)];
            for (int64_t l = cols_.offsets[iw]; l < cols_.offsets[iw + 1]; ++l) {
              const ResizeTap& tw = cols_.backward[static_cast<size_t>(l)];
              v += th.weight * tw.weight * dy[th.index * r_.wo + tw.index];
            }
          }
          dx[ih * r_.w + iw] += v;
        }
      }
    }
  }

 private:
  model::ResizeAttrs r_;
  ResizeAxis rows_, cols_;
};

}  // namespace

KernelResult make_conv_transpose2d(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ConvTransposeAttrs a, op_attrs<model::ConvTransposeAttrs>(op));
  const model::Window2d& w = a.window;
  // The conv2d this is the transpose of, from y-space [out, Ho, Wo] to x-space [C, H, W].
  const VisionWindow u{a.out_channels, w.ho, w.wo, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.h, w.w};
  return std::unique_ptr<OpKernel>(std::make_unique<ConvTranspose2dKernel>(u, w.c, a.bias));
}

KernelResult make_resize(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ResizeAttrs a, op_attrs<model::ResizeAttrs>(op));
  return std::unique_ptr<OpKernel>(std::make_unique<ResizeKernel>(a));
}

}  // namespace gp::exec::cpu
