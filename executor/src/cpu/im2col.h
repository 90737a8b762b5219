// im2col and its transpose over one sample's [c, h, w] image for a sliding window: shared by
// conv2d (forward and backward) and conv_transpose2d, whose forward is conv2d's input gradient.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "cpu/vec_math.h"
#include "device_api/vision_window.h"

namespace gp::exec::cpu {

// The output columns [first, last) of kernel column j whose input column ow*sw - pw + j lies
// inside the image: outside them a row of cols is padding, inside a (strided) run of the input
// row, so the loops below copy runs instead of testing every cell.
inline std::pair<int64_t, int64_t> inside_columns(const VisionWindow& w, int64_t j) {
  const int64_t low = w.pw - j;         // ow * sw >= pw - j
  const int64_t high = w.w + w.pw - j;  // ow * sw < w + pw - j
  const int64_t first = low <= 0 ? 0 : (low + w.sw - 1) / w.sw;
  const int64_t last = std::min(high <= 0 ? 0 : (high + w.sw - 1) / w.sw, w.wo);
  return {std::min(first, last), last};
}

// cols [c*kh*kw, ho*wo]: row (c*kh + i)*kw + j, column oh*wo + ow holds
// x[c, oh*sh - ph + i, ow*sw - pw + j], zero outside the image.
inline void im2col(const VisionWindow& w, const float* x, float* cols) {
  const int64_t positions = w.ho * w.wo;
  float* row = cols;
  for (int64_t c = 0; c < w.c; ++c) {
    for (int64_t i = 0; i < w.kh; ++i) {
      for (int64_t j = 0; j < w.kw; ++j, row += positions) {
        const auto [first, last] = inside_columns(w, j);
        for (int64_t oh = 0; oh < w.ho; ++oh) {
          const int64_t ih = oh * w.sh - w.ph + i;
          float* dst = row + oh * w.wo;
          if (ih < 0 || ih >= w.h) {
            std::fill(dst, dst + w.wo, 0.0f);
            continue;
          }
          std::fill(dst, dst + first, 0.0f);
          std::fill(dst + last, dst + w.wo, 0.0f);
          const float* src = x + (c * w.h + ih) * w.w;
          const int64_t shift = j - w.pw;  // column ow reads src[ow * sw + shift]
          if (w.sw == 1) {
            std::copy(src + first + shift, src + last + shift, dst + first);
          } else {
            for (int64_t ow = first; ow < last; ++ow) dst[ow] = src[ow * w.sw + shift];
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
        const auto [first, last] = inside_columns(w, j);
        for (int64_t oh = 0; oh < w.ho; ++oh) {
          const int64_t ih = oh * w.sh - w.ph + i;
          if (ih < 0 || ih >= w.h) continue;
          const float* src = row + oh * w.wo;
          float* dst = x + (c * w.h + ih) * w.w;
          const int64_t shift = j - w.pw;  // column ow adds into dst[ow * sw + shift]
          if (w.sw == 1) {
            if (last > first) vec::add_into(dst + first + shift, src + first, last - first);
          } else {
            for (int64_t ow = first; ow < last; ++ow) dst[ow * w.sw + shift] += src[ow];
          }
        }
      }
    }
  }
}

}  // namespace gp::exec::cpu
