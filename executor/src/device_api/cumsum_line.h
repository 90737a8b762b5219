// How cumsum walks its tensors, in plain types shared by the CPU reference
// (cpu/general_kernels.cc) and the CUDA kernel (cuda/general_kernels.cu), so both backends add
// the same floats in the same order.
//
// Per sample the tensor is [outer, len, inner]: every (outer, inner) pair is one line of `len`
// values `inner` apart, summed in double from one end. Backward is the same sum of dy taken from
// the other end (exclusive stays exclusive), added into dx.
#pragma once

#include <cstdint>

#include "device_api/index_map.h"  // GP_HD

namespace gp::exec {

struct CumSumShape {
  int64_t outer = 1;  // per sample; a call multiplies it by its batch
  int64_t len = 0;
  int64_t inner = 1;
  bool exclusive = false;
  bool reverse = false;
};

// Line `line` (of batch * outer * inner): y = cumsum of x, or with `accumulate` y += it (the
// gradient); `reverse` says which end the sums start from.
GP_HD void cumsum_line(const CumSumShape& c, int64_t line, const float* x, float* y, bool reverse,
                       bool accumulate) {
  const int64_t base = (line / c.inner) * c.len * c.inner + line % c.inner;
  double sum = 0;
  for (int64_t s = 0; s < c.len; ++s) {
    const int64_t at = base + (reverse ? c.len - 1 - s : s) * c.inner;
    const double v = x[at];
    if (!c.exclusive) sum += v;
    y[at] = accumulate ? y[at] + static_cast<float>(sum) : static_cast<float>(sum);
    if (c.exclusive) sum += v;
  }
}

}  // namespace gp::exec
