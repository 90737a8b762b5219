// What the kernel factories of the general element-wise ops (unary, binary, compare, where) and
// of reduce read off a validated op, the same for every backend: the function code and the
// IndexMaps their kernels walk (device_api/index_map.h). Private to the executor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "device_api/elementwise_math.h"
#include "device_api/index_map.h"
#include "device_api/kernel_common.h"

namespace gp::exec {

static_assert(static_cast<int>(model::UnaryFn::kSoftplus) == ew::kSoftplus);
static_assert(static_cast<int>(model::BinaryFn::kMin) == ew::kMin);
static_assert(static_cast<int>(model::CompareFn::kGe) == ew::kGe);
static_assert(static_cast<int>(model::ReduceMode::kMax) == ew::kMaxReduce);
static_assert(static_cast<int>(model::ReduceMode::kL2) == ew::kL2);

// A broadcasting op: target `forward` is the output (streams: 0 the output, 1.. the operands);
// target grad[k] is operand k, with the axes it is broadcast over free (the same streams).
struct BroadcastMaps {
  int fn = 0;
  int operands = 0;
  IndexMap forward;
  IndexMap grad[kMapStreams - 1];
};

inline BroadcastMaps broadcast_maps(int fn, const model::Broadcast& b) {
  BroadcastMaps m;
  m.fn = fn;
  m.operands = static_cast<int>(b.strides.size());
  const int rank = static_cast<int>(b.dims.size());
  std::vector<int64_t> out_strides(rank);
  int64_t out_elements = 1;
  for (int d = rank - 1; d >= 0; --d) {
    out_strides[d] = out_elements;
    out_elements *= b.dims[d];
  }
  // The batch axis: kept everywhere, each stream moving by its per-sample elements.
  auto batch_axis = [&](IndexMap& map) {
    map.kept_rank = 1;
    map.kept_strides[0][0] = out_elements;
    for (int k = 0; k < m.operands; ++k) map.kept_strides[k + 1][0] = b.operand_elements[k];
  };
  auto add_axis = [&](IndexMap& map, bool kept, int d) {
    int& r = kept ? map.kept_rank : map.free_rank;
    (kept ? map.kept_dims : map.free_dims)[r] = b.dims[d];
    (kept ? map.kept_strides : map.free_strides)[0][r] = out_strides[d];
    for (int k = 0; k < m.operands; ++k) {
      (kept ? map.kept_strides : map.free_strides)[k + 1][r] = b.strides[k][d];
    }
    ++r;
  };
  batch_axis(m.forward);
  for (int d = 0; d < rank; ++d) add_axis(m.forward, true, d);
  for (int k = 0; k < m.operands; ++k) {
    batch_axis(m.grad[k]);
    for (int d = 0; d < rank; ++d) {
      if (b.strides[k][d] != 0) {
        add_axis(m.grad[k], true, d);
      } else if (b.dims[d] > 1) {
        add_axis(m.grad[k], false, d);
      }
    }
  }
  return m;
}

inline Result<BroadcastMaps> read_binary(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::BinaryAttrs a, op_attrs<model::BinaryAttrs>(op));
  return broadcast_maps(static_cast<int>(a.fn), a.broadcast);
}
inline Result<BroadcastMaps> read_compare(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::CompareAttrs a, op_attrs<model::CompareAttrs>(op));
  return broadcast_maps(static_cast<int>(a.fn), a.broadcast);
}
inline Result<BroadcastMaps> read_where(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::WhereAttrs a, op_attrs<model::WhereAttrs>(op));
  return broadcast_maps(0, a.broadcast);
}
inline Result<int> read_unary(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::UnaryAttrs a, op_attrs<model::UnaryAttrs>(op));
  return static_cast<int>(a.fn);
}

// reduce: target the output (contiguous over the kept axes), the reduced axes free; stream 0 is
// the input. `count` is the elements reduced into each output (a mean divides by it).
struct ReduceMap {
  int mode = 0;
  int64_t count = 1;
  IndexMap map;
};
inline Result<ReduceMap> read_reduce_map(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ReduceAttrs a, op_attrs<model::ReduceAttrs>(op));
  const model::TensorSpec& x = op.input_specs[0];
  const int rank = x.shape_size();
  // Shape inference bounds broadcasting ranks but not reduce's: the map's fixed tables would
  // overflow.
  if (rank + 1 > kMapRank) {
    return op_error(op, "inputs[0]: " + std::to_string(rank) + " per-sample axes, at most " +
                            std::to_string(kMapRank - 1) + " for this reduction");
  }
  ReduceMap r;
  r.mode = static_cast<int>(a.mode);
  IndexMap& m = r.map;
  m.kept_rank = 1;
  m.kept_strides[0][0] = model::num_elements(x);
  int64_t stride = 1;
  std::vector<int64_t> strides(rank);
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= x.shape(d);
  }
  for (int d = 0; d < rank; ++d) {
    const bool reduced = std::find(a.axes.begin(), a.axes.end(), d) != a.axes.end();
    int& n = reduced ? m.free_rank : m.kept_rank;
    (reduced ? m.free_dims : m.kept_dims)[n] = x.shape(d);
    (reduced ? m.free_strides : m.kept_strides)[0][n] = strides[d];
    ++n;
    if (reduced) r.count *= x.shape(d);
  }
  return r;
}

}  // namespace gp::exec
