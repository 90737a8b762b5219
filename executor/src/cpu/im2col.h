// im2col and its transpose over one sample's [c, h, w] image for a sliding window: shared by
// conv2d (forward and backward) and conv_transpose2d, whose forward is conv2d's input gradient.
#pragma once

#include <cstdint>

#include "device_api/vision_window.h"

namespace gp::exec::cpu {

// cols [c*kh*kw, ho*wo]: row (c*kh + i)*kw + j, column oh*wo + ow holds
// x[c, oh*sh - ph + i, ow*sw - pw + j], zero outside the image.
inline void im2col(const VisionWindow& w, const float* x, float* cols) {
  const int64_t positions = w.ho * w.wo;
  float* row = cols;
  for (int64_t c = 0; c < w.c; ++c) {
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j, row += positions) {
        for (int64_t oh = 0; oh < w.ho; ++oh) {
          const int64_t ih = oh * w.sh - w.ph + i;
          float* dst = row + oh * w.wo;
          if (ih < 0 || ih >= w.h) {
            for (int64_t ow = 0; ow < w.wo; ++ow) dst[ow] = 0.0f;
            continue;
          }
          const float* src = x + (c * w.h + ih) * w.w;
          for (int64_t ow = 0; ow < w.wo; ++ow) {
            const int64_t iw = ow * w.sw - w.pw + j;
            dst[ow] = iw >= 0 && iw < w.w ? src[iw] : 0.0f;
          }
        }
      }
    }
  }
}

// x += the transpose of im2col applied to cols (padding cells dropped).
inline void col2im_add(const VisionWindow& w, const float* cols, float* x) {
  const int64_t positions = w.ho * w.wo;
  const float* row = cols;
  for (int64_t c = 0; c < w.c; ++c) {
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j, row += positions) {
        for (int64_t oh = 0; oh < w.ho; ++oh) {
          const int64_t ih = oh * w.sh - w.ph + i;
          if (ih < 0 || ih >= w.h) continue;
          const float* src = row + oh * w.wo;
          float* dst = x + (c * w.h + ih) * w.w;
          for (int64_t ow = 0; ow < w.wo; ++ow) {
            const int64_t iw = ow * w.sw - w.pw + j;
            if (iw >= 0 && iw < w.w) dst[iw] += src[ow];
          }
        }
      }
    }
  }
}

}  // namespace gp::exec::cpu
