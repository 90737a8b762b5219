// How the general element-wise ops and reductions walk their tensors, in plain types shared by
// the C++20 kernel factories and the C++17 CUDA code (so both backends walk the same way).
//
// An IndexMap enumerates a *target* tensor, contiguous over the kept axes (the batch axis first),
// and for each target element the positions of up to kMapStreams streams (the output space and
// the operands) at the target's coordinates; for each such element a kernel may also run over
// the free axes (those reduced into it), moving every stream by its free strides. The forward of
// a broadcasting op has no free axes; its backward towards an operand frees the axes that operand
// is broadcast over; a reduction frees the reduced axes.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GP_HD __host__ __device__ __forceinline__
#else
#define GP_HD inline
#endif

namespace gp::exec {

constexpr int kMapRank = 8;     // the batch axis and up to 7 per-sample axes
constexpr int kMapStreams = 4;  // the output space and up to 3 operands

struct IndexMap {
  int kept_rank = 0;
  int64_t kept_dims[kMapRank] = {};  // kept_dims[0] is the batch: set per call (with_batch)
  int64_t kept_strides[kMapStreams][kMapRank] = {};
  int free_rank = 0;
  int64_t free_dims[kMapRank] = {};
  int64_t free_strides[kMapStreams][kMapRank] = {};
};

// `m` for a call over `batch` samples.
GP_HD IndexMap with_batch(IndexMap m, int64_t batch) {
  m.kept_dims[0] = batch;
  return m;
}

GP_HD int64_t kept_count(const IndexMap& m) {
  int64_t n = 1;
  for (int d = 0; d < m.kept_rank; ++d) n *= m.kept_dims[d];
  return n;
}

GP_HD int64_t free_count(const IndexMap& m) {
  int64_t n = 1;
  for (int d = 0; d < m.free_rank; ++d) n *= m.free_dims[d];
  return n;
}

// The streams' positions of target element `j`.
GP_HD void kept_offsets(const IndexMap& m, int64_t j, int64_t (&off)[kMapStreams]) {
  for (int s = 0; s < kMapStreams; ++s) off[s] = 0;
  for (int d = m.kept_rank - 1; d >= 0; --d) {
    const int64_t c = j % m.kept_dims[d];
    j /= m.kept_dims[d];
    for (int s = 0; s < kMapStreams; ++s) off[s] += c * m.kept_strides[s][d];
  }
}

// The streams' moves for free combination `f`, added to `base` into `off`.
GP_HD void free_offsets(const IndexMap& m, int64_t f, const int64_t (&base)[kMapStreams],
                        int64_t (&off)[kMapStreams]) {
  for (int s = 0; s < kMapStreams; ++s) off[s] = base[s];
  for (int d = m.free_rank - 1; d >= 0; --d) {
    const int64_t c = f % m.free_dims[d];
    f /= m.free_dims[d];
    for (int s = 0; s < kMapStreams; ++s) off[s] += c * m.free_strides[s][d];
  }
}

}  // namespace gp::exec
