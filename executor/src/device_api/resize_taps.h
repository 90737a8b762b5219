// resize (nearest or bilinear) as separable taps: along each axis every output index reads two
// input indices with weights (nearest: one with weight 1), and every input index is read by a
// list of (output, weight) pairs (the transpose, for a gather-form backward with no atomics).
// Built once by the kernel factories of both backends, so that they resample identically.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace gp::exec {

struct ResizeTap {
  int64_t index;  // input index (forward taps) or output index (backward lists)
  float weight;
};

struct ResizeAxis {
  std::vector<ResizeTap> forward;   // 2 per output index
  std::vector<int64_t> offsets;     // per input index: its range in `backward`; size in + 1
  std::vector<ResizeTap> backward;  // (output, weight) pairs, grouped by input index
};

// One axis of `in` -> `out` elements, as PyTorch's upsample_nearest / upsample_bilinear2d with
// the output size given (scale in / out).
inline ResizeAxis resize_axis(int64_t in, int64_t out, bool bilinear, bool align_corners) {
  ResizeAxis a;
  a.forward.reserve(static_cast<size_t>(2 * out));
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    if (!bilinear) {
      const auto i = std::min<int64_t>(static_cast<int64_t>(std::floor(o * scale)), in - 1);
      a.forward.push_back({i, 1.0f});
      a.forward.push_back({i, 0.0f});
      continue;
    }
    double src;
    if (align_corners) {
      src = out > 1 ? static_cast<double>(o) * static_cast<double>(in - 1) /
                          static_cast<double>(out - 1)
                    : 0.0;
    } else {
      src = std::max(0.0, (static_cast<double>(o) + 0.5) * scale - 0.5);
    }
    const auto i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in - 1);
    const int64_t i1 = std::min<int64_t>(i0 + 1, in - 1);
    const auto l1 = static_cast<float>(src - static_cast<double>(i0));
    a.forward.push_back({i0, 1.0f - l1});
    a.forward.push_back({i1, l1});
  }
  a.offsets.assign(static_cast<size_t>(in + 1), 0);
  for (const ResizeTap& t : a.forward) ++a.offsets[static_cast<size_t>(t.index + 1)];
  for (int64_t i = 0; i < in; ++i) a.offsets[i + 1] += a.offsets[i];
  a.backward.resize(a.forward.size());
  std::vector<int64_t> fill(a.offsets.begin(), a.offsets.end() - 1);
  for (int64_t o = 0; o < out; ++o) {
    for (int k = 0; k < 2; ++k) {
      const ResizeTap& t = a.forward[static_cast<size_t>(2 * o + k)];
      a.backward[static_cast<size_t>(fill[t.index]++)] = {o, t.weight};
    }
  }
  return a;
}

}  // namespace gp::exec
