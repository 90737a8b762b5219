// A sliding window over per-sample x [c, h, w] giving [*, ho, wo]: the geometry of conv2d and the
// pools. Plain C++17 so that CUDA launch headers (compiled by nvcc) share it with host code.
#pragma once

#include <cstdint>

namespace gp::exec {

struct VisionWindow {
  int64_t c, h, w;         // input
  int64_t kh, kw, sh, sw;  // kernel, stride
  int64_t ph, pw;          // padding
  int64_t ho, wo;          // output
};

}  // namespace gp::exec
