// Helpers shared by every backend's kernel factories (CPU reference, CUDA): errors that name the
// op, attribute readers, per-sample shape arithmetic. Private to the executor's kernel libraries.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/op_kernel.h"
#include "gp/graph/graph.h"
#include "vision_window.h"

namespace gp::exec {

// A graph input: its tensor is filled by the executor; nothing to compute either way, on any
// device.
class InputKernel final : public OpKernel {
 public:
  void forward(const OpArgs&) const override {}
  void backward(const OpArgs&) const override {}
};

// The saved buffer of multi_head_attention for `batch` samples of `seq` positions, `hidden` wide,
// as both backends carve it: q, k, v, the context (batch * seq * hidden each), the probabilities
// (batch * heads * seq * seq), the backward's dc, dq, dk, dv (batch * seq * hidden each), then dp,
// whose size is the backend's own.
struct AttentionSaved {
  float *q, *k, *v, *c, *p, *dc, *dq, *dk, *dv, *dp;
};
// Kept until backward (`saved`, per sample 4*S*H + heads*S*S): Q, K, V, C [S*H each], then
// P [heads*S*S], each region covering the whole batch. Backward's scratch (`workspace`): dC, dQ,
// dK, dV [S*H each], then dP.
inline int64_t attention_saved_floats(int64_t seq, int64_t hidden, int64_t heads) {
  return 4 * seq * hidden + heads * seq * seq;
}
inline AttentionSaved attention_saved(float* saved, float* workspace, int64_t batch, int64_t seq,
                                      int64_t hidden) {
  const int64_t sh = batch * seq * hidden;
  AttentionSaved l{};
  l.q = saved;
  l.k = l.q + sh;
  l.v = l.k + sh;
  l.c = l.v + sh;
  l.p = l.c + sh;
  l.dc = workspace;
  l.dq = l.dc + sh;
  l.dk = l.dq + sh;
  l.dv = l.dk + sh;
  l.dp = l.dv + sh;
  return l;
}

// "ops[3] 'enc.ffn1' (linear): " + what, as an InvalidArgument.
inline Status op_error(const graph::OpNode& op, const std::string& what) {
  return invalid_argument("ops[" + std::to_string(op.index) + "] '" + op.proto->id() + "' (" +
                          op.proto->type() + "): " + what);
}

// Attribute readers whose errors name the op.
inline Result<int64_t> op_attr_int(const graph::OpNode& op, std::string_view name) {
  auto v = graph::attr_int(*op.proto, name);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}
inline Result<int64_t> op_attr_int_or(const graph::OpNode& op, std::string_view name,
                                      int64_t fallback) {
  auto v = graph::attr_int_or(*op.proto, name, fallback);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}
inline Result<double> op_attr_float_or(const graph::OpNode& op, std::string_view name,
                                       double fallback) {
  auto v = graph::attr_float_or(*op.proto, name, fallback);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}
inline Result<std::string> op_attr_string_or(const graph::OpNode& op, std::string_view name,
                                             std::string_view fallback) {
  auto v = graph::attr_string_or(*op.proto, name, fallback);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}

// Per-sample shape helpers.
inline int64_t last_dim(const graph::TensorSpec& spec) { return spec.shape(spec.shape_size() - 1); }
// Product of dims [begin, end).
inline int64_t dims_product(const graph::TensorSpec& spec, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= spec.shape(d);
  return n;
}
inline bool is_int32(const graph::TensorSpec& spec) {
  return spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
}

// Element k of an id/label tensor, which the catalogue allows as int64 (the executor's
// convention) or int32.
inline int64_t load_index(const void* data, int64_t k, bool int32) {
  return int32 ? static_cast<const int32_t*>(data)[k] : static_cast<const int64_t*>(data)[k];
}

// ---- what a kernel factory reads off a validated op, the same for every backend ----------------

// Normalised `axis` attr of `op` for a per-sample rank (default -1, the last).
inline Result<int> op_axis(const graph::OpNode& op, int rank) {
  GP_ASSIGN_OR_RETURN(int64_t axis, op_attr_int_or(op, "axis", -1));
  if (axis < -rank || axis >= rank) {
    return op_error(op, "attrs.axis = " + std::to_string(axis) + " is out of range");
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Kernel, stride and padding of conv2d or a pool (pools default the stride to the kernel), with
// the shapes from shape inference.
inline Result<VisionWindow> read_vision_window(const graph::OpNode& op, bool pool) {
  auto pair = [&](std::string_view name, std::vector<int64_t> fallback) {
    if (op.proto->attrs().count(std::string(name)) == 0 && !fallback.empty()) {
      return Result<std::vector<int64_t>>(std::move(fallback));
    }
    return graph::attr_ints(*op.proto, name);
  };
  auto k = pair("kernel", {});
  if (!k.ok() || k->size() != 2) return op_error(op, "attrs.kernel: expected [kh, kw]");
  auto s = pair("stride", pool ? *k : std::vector<int64_t>{1, 1});
  auto p = pair("padding", {0, 0});
  if (!s.ok() || !p.ok() || s->size() != 2 || p->size() != 2) {
    return op_error(op, "attrs.stride and attrs.padding: expected [h, w] each");
  }
  const graph::TensorSpec& x = op.input_specs[0];
  const graph::TensorSpec& y = op.proto->outputs(0);
  if (x.shape_size() != 3 || y.shape_size() != 3) {
    return op_error(op, "expected per-sample [channels, height, width]");
  }
  return VisionWindow{x.shape(0), x.shape(1), x.shape(2), (*k)[0],    (*k)[1],   (*s)[0],
                      (*s)[1],    (*p)[0],    (*p)[1],    y.shape(1), y.shape(2)};
}

// embedding_bag: `bags` bags of `bag` ids per sample into a table [rows, dim].
// Ids equal to `padding` (kNoPadding: none) are skipped, and a mean is over the other ids.
constexpr int64_t kNoPadding = INT64_MIN;
struct EmbeddingBagShape {
  int64_t bags, bag, rows, dim;
  bool mean, ids32;
  int64_t padding = kNoPadding;
};
inline Result<EmbeddingBagShape> read_embedding_bag(const graph::OpNode& op) {
  const graph::TensorSpec& ids = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(int64_t rows, op_attr_int(op, "num_embeddings"));
  GP_ASSIGN_OR_RETURN(int64_t dim, op_attr_int(op, "embedding_dim"));
  GP_ASSIGN_OR_RETURN(std::string mode, op_attr_string_or(op, "mode", "sum"));
  if (mode != "sum" && mode != "mean") {
    return op_error(op, "attrs.mode = '" + mode + "', expected sum or mean");
  }
  // An embedding is a bag of one per id: the bag kernels run it unchanged.
  if (op.proto->type() == "embedding") {
    return EmbeddingBagShape{graph::num_elements(ids), 1, rows, dim, false, is_int32(ids)};
  }
  const int64_t bag = last_dim(ids);
  EmbeddingBagShape e{
      graph::num_elements(ids) / bag, bag, rows, dim, mode == "mean", is_int32(ids)};
  if (op.proto->attrs().count("padding_idx")) {
    GP_ASSIGN_OR_RETURN(e.padding, op_attr_int(op, "padding_idx"));
  }
  return e;
}

// clip: the bounds, as validated by shape inference.
struct ClipBounds {
  float lo, hi;
};
inline Result<ClipBounds> read_clip(const graph::OpNode& op) {
  GP_ASSIGN_OR_RETURN(double lo, op_attr_float_or(op, "min", 0));
  GP_ASSIGN_OR_RETURN(double hi, op_attr_float_or(op, "max", 0));
  if (!(lo <= hi)) return op_error(op, "attrs.min must be <= attrs.max");
  return ClipBounds{static_cast<float>(lo), static_cast<float>(hi)};
}

// reduce: per sample x [outer, len, inner] -> y [outer, 1, inner].
struct ReduceShape {
  int64_t outer, len, inner;
  bool mean;
};
inline Result<ReduceShape> read_reduce(const graph::OpNode& op) {
  const graph::TensorSpec& x = op.input_specs[0];
  const int rank = x.shape_size();
  GP_ASSIGN_OR_RETURN(const int a, op_axis(op, rank));
  GP_ASSIGN_OR_RETURN(std::string mode, op_attr_string_or(op, "mode", "sum"));
  return ReduceShape{dims_product(x, 0, a), x.shape(a), dims_product(x, a + 1, rank),
                     mode == "mean"};
}

// bias_add: per sample `reps` copies of a bias of `width` elements.
struct BiasAddShape {
  int64_t reps, width;
};
inline Result<BiasAddShape> read_bias_add(const graph::OpNode& op) {
  const int64_t n = graph::num_elements(op.input_specs[0]);
  if (op.proto->params_size() != 1) return op_error(op, "expected one parameter, the bias");
  int64_t width = 1;
  for (int64_t d : op.proto->params(0).shape()) width *= d;
  if (width <= 0 || n % width != 0) return op_error(op, "bias does not tile the input");
  return BiasAddShape{n / width, width};
}

// matmul: per sample `count` products a [m, k] x b [k, n].
struct MatmulShape {
  int64_t count, m, k, n;
};
inline Result<MatmulShape> read_matmul(const graph::OpNode& op) {
  const graph::TensorSpec& a = op.input_specs[0];
  const graph::TensorSpec& b = op.input_specs[1];
  const int rank = a.shape_size();
  if (rank < 2 || b.shape_size() != rank) {
    return op_error(op, "expected inputs of one rank >= 2");
  }
  return MatmulShape{dims_product(a, 0, rank - 2), a.shape(rank - 2), a.shape(rank - 1),
                     b.shape(rank - 1)};
}

// transpose: the permutation (checked: one entry per dim, each a dim) and the input's row-major
// stride of each dim.
struct TransposeShape {
  std::vector<int64_t> perm, in_strides;
};
inline Result<TransposeShape> read_transpose(const graph::OpNode& op) {
  const graph::TensorSpec& x = op.input_specs[0];
  auto perm = graph::attr_ints(*op.proto, "perm");
  if (!perm.ok()) return op_error(op, perm.status().message());
  const int rank = x.shape_size();
  if (static_cast<int>(perm->size()) != rank) return op_error(op, "attrs.perm: wrong length");
  for (int64_t p : *perm) {
    if (p < 0 || p >= rank) return op_error(op, "attrs.perm: not a permutation");
  }
  TransposeShape t{std::move(*perm), std::vector<int64_t>(static_cast<size_t>(rank))};
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.in_strides[d] = stride;
    stride *= x.shape(d);
  }
  return t;
}

}  // namespace gp::exec
