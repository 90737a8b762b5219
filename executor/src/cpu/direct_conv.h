// Direct 2-D convolution for stride 1 and one group, the common case of CNNs with few channels
// per layer (U-Net, ResNet stems), where im2col + GEMM spends more time copying (im2col writes
// kh*kw copies of the image, the GEMM packs them again) than multiplying. Each output row is
// accumulated in registers from a zero-padded copy of the input, a block of output channels at
// a time; the input gradient is the same convolution of the padded output gradient with the
// filters transposed and flipped, and the weight gradient a sum of products over the positions.
// Every output element sums its terms in the same order (channel, kernel row, kernel column),
// wherever it sits in the image, so results do not depend on the image's width or the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "device_api/vision_window.h"

namespace gp::exec::cpu {

class DirectConv {
 public:
  // Whether the direct path computes this convolution (else im2col + GEMM does).
  static bool applies(const VisionWindow& w, int64_t groups) {
    return w.sh == 1 && w.sw == 1 && groups == 1 && w.ph < w.kh && w.pw < w.kw;
  }

  // Per sample x [w.c, w.h, w.w] -> y [out, w.ho, w.wo], `batch` samples one after another;
  // the scratch is allocated here.
  DirectConv(const VisionWindow& w, int64_t out);

  // y = conv(x) + bias (bias may be null).
  void forward(int64_t batch, const float* x, const float* weight, const float* bias,
               float* y) const;
  // dx = the gradient of the input from dy, or dx += it when accumulate.
  void backward_data(int64_t batch, const float* dy, const float* weight, float* dx,
                     bool accumulate) const;
  // dweight += the gradient of the filters from x and dy, summed over the samples in order.
  void backward_weights(int64_t batch, const float* x, const float* dy, float* dweight) const;

 private:
  int64_t in_n() const { return w_.c * w_.h * w_.w; }     // floats per sample of x
  int64_t out_n() const { return out_ * w_.ho * w_.wo; }  // and of y
  VisionWindow w_;
  int64_t out_;
  int64_t x_stride_, dy_stride_, dy_rows_stride_;  // row strides of the padded copies
  mutable std::vector<float> padded_x_, padded_dy_, packed_weight_;
};

}  // namespace gp::exec::cpu
