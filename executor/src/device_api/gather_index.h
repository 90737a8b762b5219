// How the gather op (constant indices along one per-sample axis) addresses its tensors, in plain
// types shared by the CPU reference (cpu/general_kernels.cc) and the CUDA kernels
// (cuda/general_kernels.cu), so both backends compute the same sums in the same order.
//
// Per sample the input is [outer, dim, inner] and the output [outer, count, inner], with `outer`
// the axes before the gathered one and `inner` those after it (the batch folds into outer).
// Backward has one writer per input element: it sums, in ascending order, the output positions
// that read it (the inverse lists, CSR), so no atomics and the same floats every run.
#pragma once

#include <cstdint>

#include "device_api/index_map.h"  // GP_HD

namespace gp::exec {

struct GatherShape {
  int64_t outer = 1;  // per sample; a call multiplies it by its batch
  int64_t dim = 0;    // the input's size of the axis
  int64_t count = 0;  // the number of indices (the output's size of the axis)
  int64_t inner = 1;
};

// The input offset that output element e (of batch * outer * count * inner) reads.
GP_HD int64_t gather_source(const GatherShape& g, const int64_t* indices, int64_t e) {
  const int64_t k = e % g.inner;
  const int64_t r = e / g.inner;
  const int64_t j = r % g.count;
  const int64_t o = r / g.count;
  return (o * g.dim + indices[j]) * g.inner + k;
}

// d input element e (of batch * outer * dim * inner): the sum of dy over the outputs that read
// it, in double.
GP_HD double gather_grad(const GatherShape& g, const int64_t* inverse_offsets,
                         const int64_t* inverse, const float* dy, int64_t e) {
  const int64_t k = e % g.inner;
  const int64_t r = e / g.inner;
  const int64_t i = r % g.dim;
  const int64_t o = r / g.dim;
  double sum = 0;
  for (int64_t t = inverse_offsets[i]; t < inverse_offsets[i + 1]; ++t) {
    sum += dy[(o * g.count + inverse[t]) * g.inner + k];
  }
  return sum;
}

}  // namespace gp::exec
