// The general element-wise operators (unary functions, broadcasting binary functions, comparisons,
// where), reductions over a set of axes, and constants: what ONNX exports of ordinary PyTorch
// code are made of once the fused patterns run out.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "ops_internal.h"

namespace gp::model::detail {
namespace {

double bytes_of(const TensorSpec& spec) { return static_cast<double>(size_bytes(spec)); }
double elems_of(const TensorSpec& spec) { return static_cast<double>(num_elements(spec)); }

// Kernels index operands with one fixed-size table (the batch axis included).
constexpr int kMaxSampleRank = 7;

template <class Enum, size_t N>
Result<Enum> parse_fn(const Operator& op, const std::pair<std::string_view, Enum> (&names)[N]) {
  // (Not GP_ASSIGN_OR_RETURN: GCC 12 then warns that the string may be used uninitialised.)
  const auto fn = attr_string_or(op, "fn", "");
  if (!fn.ok()) return fn.status();
  std::string expected;
  for (const auto& [name, value] : names) {
    if (*fn == name) return value;
    expected += (expected.empty() ? "" : "|") + std::string(name);
  }
  if (fn->empty())
    return invalid_argument("attrs.fn: required attribute is missing (" + expected + ")");
  return invalid_argument("attrs.fn = '" + *fn + "', expected " + expected);
}

// NumPy broadcasting of `in`'s per-sample shapes; every operand must be float.
Result<Broadcast> broadcast(std::span<const TensorSpec> in) {
  int rank = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    GP_RETURN_IF_ERROR(require_float(in[k], static_cast<int>(k)));
    rank = std::max(rank, in[k].shape_size());
  }
  if (rank > kMaxSampleRank) {
    return invalid_argument("inputs: " + std::to_string(rank) + " per-sample axes, at most " +
                            std::to_string(kMaxSampleRank) + " broadcast");
  }
  Broadcast b;
  b.dims.assign(rank, 1);
  for (size_t k = 0; k < in.size(); ++k) {
    const int offset = rank - in[k].shape_size();
    for (int d = 0; d < in[k].shape_size(); ++d) {
      const int64_t n = in[k].shape(d);
      int64_t& out = b.dims[offset + d];
      if (n == out || n == 1) continue;
      if (out != 1) {
        std::string shapes;
        for (size_t j = 0; j < in.size(); ++j) {
          shapes += (j == 0 ? "" : ", ") + shape_string(in[j]);
        }
        return invalid_argument("inputs[" + std::to_string(k) + "]: shape " + shape_string(in[k]) +
                                " does not broadcast with the others (" + shapes + ")");
      }
      out = n;
    }
  }
  for (const TensorSpec& t : in) {
    std::vector<int64_t> strides(rank, 0);
    const int offset = rank - t.shape_size();
    int64_t stride = 1;
    for (int d = t.shape_size() - 1; d >= 0; --d) {
      if (t.shape(d) != 1) strides[offset + d] = stride;
      stride *= t.shape(d);
    }
    b.strides.push_back(std::move(strides));
    b.operand_elements.push_back(num_elements(t));
  }
  return b;
}

TensorSpec spec_of(const std::vector<int64_t>& dims) {
  TensorSpec y;
  y.set_dtype(graphpipe::v1::DATA_TYPE_FLOAT32);
  for (int64_t d : dims) y.add_shape(d);
  if (dims.empty()) y.add_shape(1);  // a per-sample scalar
  return y;
}

// Costs of a broadcasting op: `fwd` and `bwd` flops per output element; backward reads dy and
// the operands and writes each operand's gradient (`grads` of them).
void broadcast_cost(std::span<const TensorSpec> in, const TensorSpec& y, double fwd, double bwd,
                    int grads, InferredOp* out) {
  double in_bytes = 0;
  for (const TensorSpec& t : in) in_bytes += bytes_of(t);
  OpCost& c = out->cost;
  c.forward_flops = fwd * elems_of(y);
  c.backward_flops = bwd * elems_of(y);
  c.forward_bytes = in_bytes + bytes_of(y);
  c.backward_bytes = grads > 0 ? 2 * in_bytes + bytes_of(y) : 0;
  c.forward_kernels = 1;
  c.backward_kernels = grads;
}

}  // namespace

Status infer_unary(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  static constexpr std::pair<std::string_view, UnaryFn> kNames[] = {
      {"neg", UnaryFn::kNeg},          {"exp", UnaryFn::kExp},
      {"log", UnaryFn::kLog},          {"sqrt", UnaryFn::kSqrt},
      {"rsqrt", UnaryFn::kRsqrt},      {"reciprocal", UnaryFn::kReciprocal},
      {"abs", UnaryFn::kAbs},          {"erf", UnaryFn::kErf},
      {"sin", UnaryFn::kSin},          {"cos", UnaryFn::kCos},
      {"softplus", UnaryFn::kSoftplus}};
  GP_ASSIGN_OR_RETURN(const UnaryFn fn, parse_fn(op, kNames));
  GP_RETURN_IF_ERROR(require_float(in[0], 0));
  out->attrs = UnaryAttrs{fn};
  out->outputs = {in[0]};
  const double n = elems_of(in[0]), b = bytes_of(in[0]);
  OpCost& c = out->cost;
  c.forward_flops = 4 * n;  // transcendental functions: a few flops' worth each
  c.backward_flops = 4 * n;
  c.forward_bytes = 2 * b;
  c.backward_bytes = 3 * b;  // read x (or y) and dy, accumulate into dx
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_binary(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  static constexpr std::pair<std::string_view, BinaryFn> kNames[] = {
      {"add", BinaryFn::kAdd}, {"sub", BinaryFn::kSub}, {"mul", BinaryFn::kMul},
      {"div", BinaryFn::kDiv}, {"pow", BinaryFn::kPow}, {"max", BinaryFn::kMax},
      {"min", BinaryFn::kMin}};
  GP_ASSIGN_OR_RETURN(const BinaryFn fn, parse_fn(op, kNames));
  GP_ASSIGN_OR_RETURN(Broadcast b, broadcast(in));
  const TensorSpec y = spec_of(b.dims);
  out->attrs = BinaryAttrs{fn, std::move(b)};
  out->outputs = {y};
  broadcast_cost(in, y, fn == BinaryFn::kPow ? 8 : 1, fn == BinaryFn::kPow ? 16 : 3, 2, out);
  return ok_status();
}

Status infer_compare(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  static constexpr std::pair<std::string_view, CompareFn> kNames[] = {
      {"eq", CompareFn::kEq}, {"ne", CompareFn::kNe}, {"lt", CompareFn::kLt},
      {"le", CompareFn::kLe}, {"gt", CompareFn::kGt}, {"ge", CompareFn::kGe}};
  GP_ASSIGN_OR_RETURN(const CompareFn fn, parse_fn(op, kNames));
  GP_ASSIGN_OR_RETURN(Broadcast b, broadcast(in));
  const TensorSpec y = spec_of(b.dims);
  out->attrs = CompareAttrs{fn, std::move(b)};
  out->outputs = {y};
  broadcast_cost(in, y, 1, 0, 0, out);
  return ok_status();
}

Status infer_where(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  GP_ASSIGN_OR_RETURN(Broadcast b, broadcast(in));
  const TensorSpec y = spec_of(b.dims);
  out->attrs = WhereAttrs{std::move(b)};
  out->outputs = {y};
  broadcast_cost(in, y, 1, 2, 2, out);
  return ok_status();
}

Status infer_cast(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  GP_ASSIGN_OR_RETURN(std::string dtype, attr_string_or(op, "dtype", "float32"));
  if (dtype != "float32" && dtype != "int64") {
    return invalid_argument("attrs.dtype = '" + dtype + "': expected float32 or int64");
  }
  const bool to_int64 = dtype == "int64";
  if (to_int64 && is_integer(in[0])) {
    return invalid_argument("inputs[0]: expected a float32 tensor for dtype int64, got " +
                            shape_string(in[0]) + " (an integer tensor needs no cast)");
  }
  if (!to_int64 && !is_integer(in[0])) {
    return invalid_argument("inputs[0]: expected an integer tensor (int64 or int32), got " +
                            shape_string(in[0]) + " (a float tensor needs no cast)");
  }
  TensorSpec y = in[0];
  y.set_dtype(to_int64 ? graphpipe::v1::DATA_TYPE_INT64 : graphpipe::v1::DATA_TYPE_FLOAT32);
  out->outputs = {y};
  out->attrs = CastAttrs{to_int64};
  const double n = elems_of(in[0]);
  OpCost& c = out->cost;
  c.forward_flops = n;
  c.forward_bytes = static_cast<double>(stored_size_bytes(in[0])) + bytes_of(y);
  c.forward_kernels = 1;
  return ok_status();
}

Status infer_reduce(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  const int rank = x.shape_size();
  std::vector<int> axes;
  if (op.attrs().count("axes") > 0) {
    if (op.attrs().count("axis") > 0) {
      return invalid_argument("attrs.axis and attrs.axes: give one of them");
    }
    GP_ASSIGN_OR_RETURN(std::vector<int64_t> raw, attr_ints(op, "axes"));
    if (raw.empty()) return invalid_argument("attrs.axes = []: name at least one axis");
    for (int64_t a : raw) {
      auto axis = normalize_axis(a, rank);
      if (!axis.ok()) {
        return invalid_argument("attrs.axes = " + ints_string(raw) + ": axis " + std::to_string(a) +
                                " is out of range for " + std::to_string(rank) +
                                " per-sample dimension(s)");
      }
      axes.push_back(*axis);
    }
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
      return invalid_argument("attrs.axes = " + ints_string(raw) + ": an axis appears twice");
    }
  } else {
    GP_ASSIGN_OR_RETURN(int64_t raw_axis, attr_int_or(op, "axis", -1));
    GP_ASSIGN_OR_RETURN(int axis, normalize_axis(raw_axis, rank));
    axes.push_back(axis);
  }
  const auto mode_name = attr_string_or(op, "mode", "sum");
  if (!mode_name.ok()) return mode_name.status();
  static constexpr std::pair<std::string_view, ReduceMode> kModes[] = {{"sum", ReduceMode::kSum},
                                                                       {"mean", ReduceMode::kMean},
                                                                       {"max", ReduceMode::kMax},
                                                                       {"l2", ReduceMode::kL2}};
  const auto* m = std::find_if(std::begin(kModes), std::end(kModes),
                               [&](const auto& e) { return e.first == *mode_name; });
  if (m == std::end(kModes)) {
    return invalid_argument("attrs.mode = '" + *mode_name + "', expected sum, mean, max or l2");
  }
  GP_ASSIGN_OR_RETURN(int64_t keepdims, attr_int_or(op, "keepdims", 1));
  GP_RETURN_IF_ERROR(boolean("keepdims", keepdims));
  ReduceAttrs r;
  r.axes = axes;
  r.axis = axes[0];
  r.mode = m->second;
  r.mean = r.mode == ReduceMode::kMean;
  r.keepdims = keepdims == 1;
  out->attrs = r;
  std::vector<int64_t> dims;
  for (int d = 0; d < rank; ++d) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced) {
      dims.push_back(x.shape(d));
    } else if (r.keepdims) {
      dims.push_back(1);
    }
  }
  const TensorSpec y = spec_of(dims);
  out->outputs = {y};
  const double n = elems_of(x);
  OpCost& c = out->cost;
  c.forward_flops = r.mode == ReduceMode::kL2 ? 2 * n : n;
  c.backward_flops = r.mode == ReduceMode::kL2 || r.mode == ReduceMode::kMax ? 3 * n : n;
  c.forward_bytes = bytes_of(x) + bytes_of(y);
  // sum and mean broadcast dy back; max and l2 also read x and y.
  c.backward_bytes =
      (r.mode == ReduceMode::kSum || r.mode == ReduceMode::kMean ? 1 : 2) * bytes_of(x) +
      2 * bytes_of(y);
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_constant(const Operator& op, std::span<const TensorSpec>, InferredOp* out) {
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, attr_ints(op, "shape"));
  if (shape.empty() || std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d <= 0; })) {
    return invalid_argument("attrs.shape = " + ints_string(shape) +
                            ": must be a non-empty list of positive dims");
  }
  const auto dtype = attr_string_or(op, "dtype", "float32");
  if (!dtype.ok()) return dtype.status();
  if (*dtype != "float32" && *dtype != "int64") {
    return invalid_argument("attrs.dtype = '" + *dtype + "', expected float32 or int64");
  }
  const bool integer = *dtype == "int64";
  TensorSpec y;
  y.set_dtype(integer ? graphpipe::v1::DATA_TYPE_INT64 : graphpipe::v1::DATA_TYPE_FLOAT32);
  for (int64_t d : shape) y.add_shape(d);
  out->attrs = ConstantAttrs{shape, integer};
  out->outputs = {y};
  // The values are float32 whatever the dtype (integers up to 2^24 exactly).
  out->buffers.push_back(make_param("value", shape, graphpipe::v1::DATA_TYPE_FLOAT32));
  OpCost& c = out->cost;
  c.forward_bytes = static_cast<double>(stored_size_bytes(y));
  c.forward_fixed_bytes = elems_of(y) * 4;
  c.forward_kernels = 1;
  return ok_status();
}

Status infer_cumsum(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  GP_ASSIGN_OR_RETURN(int64_t raw_axis, attr_int_or(op, "axis", -1));
  GP_ASSIGN_OR_RETURN(int axis, normalize_axis(raw_axis, x.shape_size()));
  GP_ASSIGN_OR_RETURN(int64_t exclusive, attr_int_or(op, "exclusive", 0));
  GP_RETURN_IF_ERROR(boolean("exclusive", exclusive));
  GP_ASSIGN_OR_RETURN(int64_t reverse, attr_int_or(op, "reverse", 0));
  GP_RETURN_IF_ERROR(boolean("reverse", reverse));
  out->attrs = CumSumAttrs{axis, exclusive != 0, reverse != 0};
  out->outputs = {x};
  // Backward is the cumulative sum the other way: one add per element each way.
  const double n = elems_of(x), b = bytes_of(x);
  OpCost& c = out->cost;
  c.forward_flops = n;
  c.backward_flops = n;
  c.forward_bytes = 2 * b;
  c.backward_bytes = 2 * b;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_gather(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  GP_ASSIGN_OR_RETURN(int64_t raw_axis, attr_int_or(op, "axis", 0));
  GP_ASSIGN_OR_RETURN(int axis, normalize_axis(raw_axis, x.shape_size()));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> indices, attr_ints(op, "indices"));
  if (indices.empty()) return invalid_argument("attrs.indices = []: name at least one index");
  const int64_t dim = x.shape(axis);
  for (int64_t i : indices) {
    if (i < 0 || i >= dim) {
      return invalid_argument("attrs.indices: index " + std::to_string(i) +
                              " is out of range [0, " + std::to_string(dim) + ") of axis " +
                              std::to_string(axis) + " of " + shape_string(x));
    }
  }
  GatherAttrs g;
  g.axis = axis;
  // The inverse lists (CSR): for input index i, the outputs j with indices[j] == i, ascending.
  g.inverse_offsets.assign(static_cast<size_t>(dim) + 1, 0);
  for (int64_t i : indices) ++g.inverse_offsets[static_cast<size_t>(i) + 1];
  for (size_t i = 0; i < static_cast<size_t>(dim); ++i) {
    g.inverse_offsets[i + 1] += g.inverse_offsets[i];
  }
  g.inverse.resize(indices.size());
  std::vector<int64_t> next(g.inverse_offsets.begin(), g.inverse_offsets.end() - 1);
  for (size_t j = 0; j < indices.size(); ++j) {
    g.inverse[static_cast<size_t>(next[static_cast<size_t>(indices[j])]++)] =
        static_cast<int64_t>(j);
  }
  g.indices = std::move(indices);
  TensorSpec y = x;
  y.set_shape(axis, static_cast<int64_t>(g.indices.size()));
  out->attrs = std::move(g);
  out->outputs = {y};
  OpCost& c = out->cost;
  c.forward_bytes = 2 * bytes_of(y);
  c.backward_flops = elems_of(y);                    // the sums of repeated reads
  c.backward_bytes = bytes_of(y) + 2 * bytes_of(x);  // read dy, accumulate into dx
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

}  // namespace gp::model::detail
