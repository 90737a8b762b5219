// Helpers shared by every backend's kernel factories (CPU reference, CUDA): errors that name the
// op, the op's typed attributes, per-sample shape arithmetic. Private to the executor's kernel
// libraries.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "device_api/cumsum_line.h"
#include "gp/common/status.h"
#include "gp/exec/op_kernel.h"
#include "gp/model/graph.h"
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
inline Status op_error(const model::OpNode& op, const std::string& what) {
  return invalid_argument("ops[" + std::to_string(op.index) + "] '" + op.proto->id() + "' (" +
                          op.proto->type() + "): " + what);
}

// The op's typed attributes (gp/model/op_attrs.h) as its shape inference decoded and checked
// them: kernel factories read these, never Operator.attrs.
template <class T>
Result<T> op_attrs(const model::OpNode& op) {
  if (const T* a = std::get_if<T>(&op.attrs)) return *a;
  return op_error(op,
                  "no decoded attributes of the kind its kernels read (not an op of a built "
                  "model::Graph?)");
}

// Per-sample shape helpers.
inline int64_t last_dim(const model::TensorSpec& spec) { return spec.shape(spec.shape_size() - 1); }
// Product of dims [begin, end).
inline int64_t dims_product(const model::TensorSpec& spec, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= spec.shape(d);
  return n;
}
// 4-byte units per element as the executor stores the tensor: integer tensors are int64 (2), so
// layout kernels that move floats move an integer tensor as twice as many floats.
inline int64_t float_units(const model::TensorSpec& spec) {
  return model::is_integer(spec) ? 2 : 1;
}
// Whether an integer tensor's elements sit in memory as int32: never. The executor holds every
// integer tensor as int64 (stored_size_bytes, float_units) whatever its spec's dtype: the dataset
// and the synthetic inputs widen an int32 input (ONNX ids declared int32) as they load it.
inline bool is_int32(const model::TensorSpec&) { return false; }

// Element k of an id/label tensor (int64: see is_int32).
inline int64_t load_index(const void* data, int64_t k, bool int32) {
  return int32 ? static_cast<const int32_t*>(data)[k] : static_cast<const int64_t*>(data)[k];
}

// ---- what a kernel factory reads off a validated op, the same for every backend ----------------

// The window of conv2d or a pool as its kernels take it.
inline VisionWindow vision_window(const model::Window2d& w) {
  return VisionWindow{w.c, w.h, w.w, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.ho, w.wo};
}

// embedding_bag: `bags` bags of `bag` ids per sample into a table [rows, dim].
// Ids equal to `padding` (kNoPadding: none) are skipped, and a mean is over the other ids. An
// embedding's padding_idx is `frozen_row` instead: it is looked up as any row, and its gradient
// is never taken (as torch's nn.Embedding).
constexpr int64_t kNoPadding = INT64_MIN;
struct EmbeddingBagShape {
  int64_t bags, bag, rows, dim;
  bool mean, ids32;
  int64_t padding = kNoPadding;
  int64_t frozen_row = kNoPadding;
  // The ids backward skips: the padding of a bag, an embedding's frozen row.
  int64_t backward_skip() const { return padding != kNoPadding ? padding : frozen_row; }
};
inline Result<EmbeddingBagShape> read_embedding_bag(const model::OpNode& op) {
  const model::TensorSpec& ids = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::EmbeddingAttrs a, op_attrs<model::EmbeddingAttrs>(op));
  // An embedding is a bag of one per id: the bag kernels run it unchanged.
  if (op.proto->type() == "embedding") {
    EmbeddingBagShape e{model::num_elements(ids), 1,     a.num_embeddings,
                        a.embedding_dim,          false, is_int32(ids)};
    if (a.has_padding) e.frozen_row = a.padding_idx;
    return e;
  }
  const int64_t bag = last_dim(ids);
  EmbeddingBagShape e{model::num_elements(ids) / bag,
                      bag,
                      a.num_embeddings,
                      a.embedding_dim,
                      a.mean,
                      is_int32(ids)};
  if (a.has_padding) e.padding = a.padding_idx;
  return e;
}

// clip: the bounds, as validated by shape inference.
struct ClipBounds {
  float lo, hi;
};
inline Result<ClipBounds> read_clip(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ClipAttrs a, op_attrs<model::ClipAttrs>(op));
  return ClipBounds{static_cast<float>(a.min), static_cast<float>(a.max)};
}

inline Result<CumSumShape> read_cumsum(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::CumSumAttrs a, op_attrs<model::CumSumAttrs>(op));
  return CumSumShape{dims_product(x, 0, a.axis), x.shape(a.axis),
                     dims_product(x, a.axis + 1, x.shape_size()), a.exclusive, a.reverse};
}

// reduce: per sample x [outer, len, inner] -> y [outer, 1, inner].
struct ReduceShape {
  int64_t outer, len, inner;
  bool mean;
};
inline Result<ReduceShape> read_reduce(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  const int rank = x.shape_size();
  GP_ASSIGN_OR_RETURN(const model::ReduceAttrs r, op_attrs<model::ReduceAttrs>(op));
  const int a = r.axis;
  return ReduceShape{dims_product(x, 0, a), x.shape(a), dims_product(x, a + 1, rank), r.mean};
}

// bias_add: per sample `reps` copies of a bias of `width` elements.
struct BiasAddShape {
  int64_t reps, width;
};
inline Result<BiasAddShape> read_bias_add(const model::OpNode& op) {
  const int64_t n = model::num_elements(op.input_specs[0]);
  if (op.proto->params_size() != 1) return op_error(op, "expected one parameter, the bias");
  int64_t width = 1;
  for (int64_t d : op.proto->params(0).shape()) width *= d;
  if (width <= 0 || n % width != 0) return op_error(op, "bias does not tile the input");
  return BiasAddShape{n / width, width};
}

// matmul: per sample `count` products y [m, n] = alpha op(a) op(b), op(a) [m, k], op(b) [k, n];
// a is stored [m, k], or [k, m] when transpose_a (b likewise).
struct MatmulShape {
  int64_t count, m, k, n;
  bool transpose_a = false, transpose_b = false;
  float alpha = 1;
};
inline Result<MatmulShape> read_matmul(const model::OpNode& op) {
  const model::TensorSpec& a = op.input_specs[0];
  const model::TensorSpec& b = op.input_specs[1];
  const int rank = a.shape_size();
  if (rank < 2 || b.shape_size() != rank) {
    return op_error(op, "expected inputs of one rank >= 2");
  }
  GP_ASSIGN_OR_RETURN(const model::MatmulAttrs attrs, op_attrs<model::MatmulAttrs>(op));
  const int64_t m = a.shape(attrs.transpose_a ? rank - 1 : rank - 2);
  const int64_t k = a.shape(attrs.transpose_a ? rank - 2 : rank - 1);
  const int64_t n = b.shape(attrs.transpose_b ? rank - 2 : rank - 1);
  return MatmulShape{dims_product(a, 0, rank - 2),   m, k, n, attrs.transpose_a, attrs.transpose_b,
                     static_cast<float>(attrs.alpha)};
}

// One row-major GEMM of a matmul, per (sample, leading index): c = alpha op(x) op(y) (+ c),
// where x and y name the stored operands a, b or dy, each with its leading dimension and the
// distance between consecutive matrices.
struct MatmulGemm {
  enum Operand : uint8_t { kA, kB, kDy };
  Operand x, y;
  bool transpose_x, transpose_y;
  int64_t rows, cols, inner;  // c is rows x cols; op(x) rows x inner
  int64_t ld_x, ld_y, ld_c;
  int64_t stride_x, stride_y, stride_c;
  float alpha;
};

// The forward product and the two gradients, written in the operands' stored layouts:
// dop(a) = alpha dy op(b)^T and dop(b) = alpha op(a)^T dy, transposed back where an operand is
// stored transposed, so no transposed copy of anything is ever made.
struct MatmulGemms {
  MatmulGemm forward, grad_a, grad_b;
};
// The stored operand a MatmulGemm names, in a kernel's arguments.
inline const float* matmul_operand(MatmulGemm::Operand o, const OpArgs& a) {
  switch (o) {
    case MatmulGemm::kA:
      return a.inputs[0].f();
    case MatmulGemm::kB:
      return a.inputs[1].f();
    case MatmulGemm::kDy:
      return a.grad_outputs[0].f();
  }
  return nullptr;
}

inline MatmulGemms matmul_gemms(const MatmulShape& s) {
  using G = MatmulGemm;
  const int64_t m = s.m, k = s.k, n = s.n;
  const int64_t lda = s.transpose_a ? m : k, ldb = s.transpose_b ? k : n;
  const int64_t sa = m * k, sb = k * n, sy = m * n;
  // Leading dimension and matrix stride of each stored operand, by G::Operand.
  const int64_t ld[] = {lda, ldb, n}, stride[] = {sa, sb, sy};
  auto call = [&](G::Operand x, bool tx, G::Operand y, bool ty, int64_t rows, int64_t cols,
                  int64_t inner, int64_t ld_c, int64_t stride_c) {
    return G{x,     y,     tx,   ty,        rows,      cols,     inner,
             ld[x], ld[y], ld_c, stride[x], stride[y], stride_c, s.alpha};
  };
  MatmulGemms g;
  g.forward = call(G::kA, s.transpose_a, G::kB, s.transpose_b, m, n, k, n, sy);
  g.grad_a = s.transpose_a ? call(G::kB, s.transpose_b, G::kDy, true, k, m, n, m, sa)
                           : call(G::kDy, false, G::kB, !s.transpose_b, m, k, n, k, sa);
  g.grad_b = s.transpose_b ? call(G::kDy, true, G::kA, s.transpose_a, n, k, m, k, sb)
                           : call(G::kA, !s.transpose_a, G::kDy, false, k, n, m, n, sb);
  return g;
}

// transpose: the permutation (shape inference checked it), the input's row-major stride of each
// dim, and per output dim its size and input stride. With a window, the output's `window_axis`
// holds only [start, end): `base` is the input offset of the output's first element.
struct TransposeShape {
  std::vector<int64_t> perm, in_strides, out_sizes, src_strides;
  int window_axis = -1;
  int64_t start = 0, end = 0, base = 0;
};
inline Result<TransposeShape> read_transpose(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(model::TransposeAttrs a, op_attrs<model::TransposeAttrs>(op));
  const int rank = x.shape_size();
  const auto r = static_cast<size_t>(rank);
  TransposeShape t{std::move(a.perm),
                   std::vector<int64_t>(r),
                   std::vector<int64_t>(r),
                   std::vector<int64_t>(r),
                   a.axis,
                   a.start,
                   a.end,
                   0};
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.in_strides[d] = stride;
    stride *= x.shape(d);
  }
  for (size_t d = 0; d < r; ++d) {
    const auto p = static_cast<size_t>(t.perm[d]);
    t.out_sizes[d] = x.shape(static_cast<int>(p));
    t.src_strides[d] = t.in_strides[p];
  }
  if (t.window_axis >= 0) {
    const auto w = static_cast<size_t>(t.window_axis);
    t.out_sizes[w] = t.end - t.start;
    t.base = t.start * t.src_strides[w];
  }
  return t;
}

}  // namespace gp::exec
