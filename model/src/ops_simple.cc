// Parameter-free (or nearly) operators: inputs, opaque imports, element-wise ops, normalisation,
// layout, losses.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops_internal.h"

namespace gp::model::detail {
namespace {

double bytes_of(const TensorSpec& spec) { return static_cast<double>(size_bytes(spec)); }
double elems_of(const TensorSpec& spec) { return static_cast<double>(num_elements(spec)); }

// Shared by relu, gelu and softmax: same-shape float output, a per-element cost, one tensor kept.
Status unary(std::span<const TensorSpec> in, double fwd_per_elt, double bwd_per_elt,
             InferredOp* out) {
  GP_RETURN_IF_ERROR(require_float(in[0], 0));
  out->outputs = {in[0]};
  const double n = elems_of(in[0]), b = bytes_of(in[0]);
  OpCost& c = out->cost;
  c.forward_flops = fwd_per_elt * n;
  c.backward_flops = bwd_per_elt * n;
  c.forward_bytes = 2 * b;
  c.backward_bytes = 3 * b;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

TensorSpec scalar_loss() { return make_spec({1}); }

}  // namespace

Result<double> positive_epsilon(const Operator& op) {
  GP_ASSIGN_OR_RETURN(double eps, attr_float_or(op, "epsilon", 1e-5));
  if (!(eps > 0)) {
    return invalid_argument("attrs.epsilon = " + std::to_string(eps) + ", must be > 0");
  }
  return eps;
}

Status infer_input(const Operator& op, std::span<const TensorSpec>, InferredOp* out) {
  if (op.outputs_size() != 1) {
    return invalid_argument("outputs: an input op declares exactly one output, got " +
                            std::to_string(op.outputs_size()));
  }
  if (op.outputs(0).shape_size() == 0) {
    return invalid_argument("outputs[0].shape: empty; give the per-sample shape, e.g. [1]");
  }
  out->outputs = {op.outputs(0)};
  return ok_status();
}

Status infer_opaque(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  if (op.outputs_size() == 0) {
    return invalid_argument(
        "outputs[0]: missing; an opaque op declares its one output's per-sample shape and dtype");
  }
  if (op.outputs_size() != 1) {
    return invalid_argument("outputs: an opaque op declares exactly one output, got " +
                            std::to_string(op.outputs_size()));
  }
  const TensorSpec& y = op.outputs(0);
  if (y.shape_size() == 0) {
    return invalid_argument("outputs[0].shape: empty; give the per-sample shape, e.g. [1]");
  }
  GP_ASSIGN_OR_RETURN(std::string onnx_type, attr_string_or(op, "onnx_type", ""));
  if (onnx_type.empty()) {
    return invalid_argument("attrs.onnx_type: required attribute is missing or empty");
  }
  out->attrs = OpaqueAttrs{onnx_type};
  GP_ASSIGN_OR_RETURN(double flops, attr_float_or(op, "forward_flops", elems_of(y)));
  if (!(flops >= 0) || !std::isfinite(flops)) {
    return invalid_argument("attrs.forward_flops = " + std::to_string(flops) +
                            ", must be finite and >= 0");
  }
  GP_ASSIGN_OR_RETURN(int64_t param_count, attr_int_or(op, "param_elements", 0));
  if (param_count < 0) {
    return invalid_argument("attrs.param_elements = " + std::to_string(param_count) +
                            ", must be >= 0");
  }
  out->outputs = {y};
  if (param_count > 0) {
    out->params.push_back(make_param("weights", {param_count}, graphpipe::v1::DATA_TYPE_FLOAT32));
  }
  double in_bytes = 0;
  for (const TensorSpec& t : in) in_bytes += bytes_of(t);
  const double param_bytes = static_cast<double>(param_count) * 4;
  OpCost& c = out->cost;
  c.param_count = param_count;
  c.forward_flops = flops;
  c.backward_flops = 2 * flops;
  c.forward_bytes = in_bytes + bytes_of(y);
  c.backward_bytes = 2 * in_bytes + bytes_of(y);  // read inputs and dy, write the input grads
  c.forward_fixed_bytes = param_bytes;
  c.backward_fixed_bytes = 2 * param_bytes;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_relu(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  return unary(in, 1, 1, out);
}

Status infer_gelu(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  // (Not GP_ASSIGN_OR_RETURN: GCC 12 then warns that the string may be used uninitialised.)
  const auto approximate = attr_string_or(op, "approximate", "tanh");
  if (!approximate.ok()) return approximate.status();
  if (*approximate != "tanh" && *approximate != "none") {
    return invalid_argument("attrs.approximate = '" + *approximate + "', expected tanh or none");
  }
  out->attrs = GeluAttrs{*approximate == "none"};
  return unary(in, 8, 12, out);  // either form: ~8 flops forward, ~12 backward
}

Status infer_softmax(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  return unary(in, 5, 4, out);
}

Status infer_sigmoid(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  return unary(in, 4, 3, out);  // backward reads the output: dx = dy * y * (1 - y)
}

Status infer_tanh(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  return unary(in, 6, 3, out);  // backward reads the output: dx = dy * (1 - y^2)
}

Status infer_clip(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  GP_ASSIGN_OR_RETURN(double lo, attr_float(op, "min"));
  GP_ASSIGN_OR_RETURN(double hi, attr_float(op, "max"));
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi) {
    return invalid_argument("attrs.min = " + std::to_string(lo) + ", attrs.max = " +
                            std::to_string(hi) + ": both must be finite with min <= max");
  }
  out->attrs = ClipAttrs{lo, hi};
  return unary(in, 2, 2, out);
}

Status infer_mul(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  for (int i = 0; i < 2; ++i) GP_RETURN_IF_ERROR(require_float(in[i], i));
  if (!same_spec(in[1], in[0])) {
    return invalid_argument("inputs[1]: shape " + shape_string(in[1]) + " differs from inputs[0] " +
                            shape_string(in[0]) + " (no broadcasting)");
  }
  out->outputs = {in[0]};
  const double n = elems_of(in[0]), b = bytes_of(in[0]);
  OpCost& c = out->cost;
  c.forward_flops = n;
  c.backward_flops = 2 * n;
  c.forward_bytes = 3 * b;
  c.backward_bytes = 5 * b;  // read dy, a, b; write both gradients
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_bias_add(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, attr_ints(op, "shape"));
  const int rank = x.shape_size();
  bool suffix = !shape.empty() && static_cast<int>(shape.size()) <= rank;
  for (size_t k = 0; suffix && k < shape.size(); ++k) {
    suffix = shape[k] == x.shape(rank - static_cast<int>(shape.size()) + static_cast<int>(k));
  }
  if (!suffix) {
    return invalid_argument("attrs.shape = " + ints_string(shape) +
                            ": must be the trailing dimensions of the input " + shape_string(x));
  }
  out->outputs = {x};
  out->params.push_back(make_param("bias", shape, x.dtype()));
  sum_params(out);
  const double n = elems_of(x), b = bytes_of(x);
  const double p = static_cast<double>(out->cost.param_count) * 4;
  OpCost& c = out->cost;
  c.forward_flops = n;
  c.backward_flops = n;
  c.forward_bytes = 2 * b;
  c.backward_bytes = 2 * b;  // read dy, accumulate into dx
  c.forward_fixed_bytes = p;
  c.backward_fixed_bytes = 2 * p;
  c.forward_kernels = 1;
  c.backward_kernels = 2;
  return ok_status();
}

Status infer_broadcast_param(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, attr_ints(op, "shape"));
  if (shape.empty() || std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d <= 0; })) {
    return invalid_argument("attrs.shape = " + ints_string(shape) +
                            ": must be a non-empty list of positive dims");
  }
  TensorSpec y;
  y.set_dtype(graphpipe::v1::DATA_TYPE_FLOAT32);
  for (int64_t d : shape) y.add_shape(d);
  out->outputs = {y};
  out->params.push_back(make_param("value", shape, y.dtype()));
  sum_params(out);
  (void)in;
  const double b = bytes_of(y);
  OpCost& c = out->cost;
  c.forward_bytes = b;
  c.backward_bytes = b;  // read dy; the sum over the batch goes to the parameter
  c.backward_flops = elems_of(y);
  c.forward_fixed_bytes = b;
  c.backward_fixed_bytes = 2 * b;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_layer_norm(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  GP_RETURN_IF_ERROR(require_rank_at_least(x, 1, 0));
  GP_ASSIGN_OR_RETURN(const double eps, positive_epsilon(op));
  GP_ASSIGN_OR_RETURN(const int64_t scale, attr_int_or(op, "scale", 1));
  GP_RETURN_IF_ERROR(boolean("scale", scale));
  GP_ASSIGN_OR_RETURN(const int64_t shift, attr_int_or(op, "shift", 1));
  GP_RETURN_IF_ERROR(boolean("shift", shift));
  out->attrs = NormAttrs{eps, scale == 1, shift == 1};
  const int64_t d = x.shape(x.shape_size() - 1);
  out->outputs = {x};
  if (scale) out->params.push_back(make_param("gamma", {d}, x.dtype()));
  if (shift) out->params.push_back(make_param("beta", {d}, x.dtype()));
  sum_params(out);
  const double n = elems_of(x), b = bytes_of(x);
  const double rows = n / static_cast<double>(d);
  OpCost& c = out->cost;
  c.forward_flops = 8 * n;
  c.backward_flops = 14 * n;
  c.forward_bytes = 2 * b;
  c.backward_bytes = 3 * b;
  c.forward_fixed_bytes = static_cast<double>((scale + shift) * d * dtype_size_bytes(x.dtype()));
  c.backward_fixed_bytes = 2 * c.forward_fixed_bytes;
  c.saved_bytes = rows * 2 * 4;  // per-row mean and inverse std
  c.forward_kernels = 1;
  c.backward_kernels = 2;
  return ok_status();
}

Status infer_add(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    GP_RETURN_IF_ERROR(require_float(in[i], static_cast<int>(i)));
    if (!same_spec(in[i], in[0])) {
      return invalid_argument("inputs[" + std::to_string(i) + "]: shape " + shape_string(in[i]) +
                              " differs from inputs[0] " + shape_string(in[0]));
    }
  }
  out->outputs = {in[0]};
  const double k = static_cast<double>(in.size());
  const double n = elems_of(in[0]), b = bytes_of(in[0]);
  OpCost& c = out->cost;
  c.forward_flops = (k - 1) * n;
  c.forward_bytes = (k + 1) * b;
  c.backward_bytes = (k + 1) * b;  // the gradient is copied to every input
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_concat(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const int rank = in[0].shape_size();
  GP_ASSIGN_OR_RETURN(int64_t raw_axis, attr_int_or(op, "axis", -1));
  GP_ASSIGN_OR_RETURN(int axis, normalize_axis(raw_axis, rank));
  TensorSpec y = in[0];
  int64_t total = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorSpec& t = in[i];
    bool compatible = t.shape_size() == rank && dtype_name(t.dtype()) == dtype_name(y.dtype());
    for (int d = 0; compatible && d < rank; ++d) {
      if (d != axis && t.shape(d) != in[0].shape(d)) compatible = false;
    }
    if (!compatible) {
      return invalid_argument("inputs[" + std::to_string(i) + "]: shape " + shape_string(t) +
                              " cannot be concatenated with inputs[0] " + shape_string(in[0]) +
                              " along axis " + std::to_string(axis));
    }
    total += t.shape(axis);
  }
  y.set_shape(axis, total);
  out->outputs = {y};
  out->attrs = AxisAttrs{axis};
  const double b = bytes_of(y);
  OpCost& c = out->cost;
  c.forward_bytes = 2 * b;
  c.backward_bytes = 2 * b;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_slice(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_ASSIGN_OR_RETURN(int64_t raw_axis, attr_int_or(op, "axis", -1));
  GP_ASSIGN_OR_RETURN(int axis, normalize_axis(raw_axis, x.shape_size()));
  GP_ASSIGN_OR_RETURN(int64_t start, attr_int(op, "start"));
  GP_ASSIGN_OR_RETURN(int64_t end, attr_int(op, "end"));
  GP_RETURN_IF_ERROR(check_range(start, end, x.shape(axis), "axis " + std::to_string(axis)));
  out->attrs = SliceAttrs{axis, start, end};
  TensorSpec y = x;
  y.set_shape(axis, end - start);
  out->outputs = {y};
  OpCost& c = out->cost;
  c.forward_bytes = 2 * bytes_of(y);
  c.backward_bytes = bytes_of(x) + bytes_of(y);  // zero-fill the input gradient, copy the slice
  c.forward_kernels = 1;
  c.backward_kernels = 2;
  return ok_status();
}

Status infer_mse_loss(const Operator&, std::span<const TensorSpec> in, InferredOp* out) {
  GP_RETURN_IF_ERROR(require_float(in[0], 0));
  GP_RETURN_IF_ERROR(require_float(in[1], 1));
  if (!same_spec(in[0], in[1])) {
    return invalid_argument("inputs[1] (target): shape " + shape_string(in[1]) +
                            " differs from inputs[0] (prediction) " + shape_string(in[0]));
  }
  out->outputs = {scalar_loss()};
  const double n = elems_of(in[0]), b = bytes_of(in[0]);
  OpCost& c = out->cost;
  c.forward_flops = 3 * n;
  c.backward_flops = 2 * n;
  c.forward_bytes = 2 * b;
  c.backward_bytes = 2 * b;
  c.forward_kernels = 2;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_softmax_cross_entropy(const Operator&, std::span<const TensorSpec> in,
                                   InferredOp* out) {
  const TensorSpec& logits = in[0];
  const TensorSpec& labels = in[1];
  GP_RETURN_IF_ERROR(require_float(logits, 0));
  GP_RETURN_IF_ERROR(require_rank_at_least(logits, 1, 0));
  if (labels.dtype() != graphpipe::v1::DATA_TYPE_INT64 &&
      labels.dtype() != graphpipe::v1::DATA_TYPE_INT32) {
    return invalid_argument("inputs[1] (labels): expected int64 class ids, got " +
                            shape_string(labels));
  }
  // labels.shape == logits.shape[:-1], or [1] for per-sample logits [classes].
  TensorSpec expected;
  for (int d = 0; d + 1 < logits.shape_size(); ++d) expected.add_shape(logits.shape(d));
  if (expected.shape_size() == 0) expected.add_shape(1);
  expected.set_dtype(labels.dtype());
  if (!same_spec(expected, labels)) {
    return invalid_argument("inputs[1] (labels): shape " + shape_string(labels) +
                            " does not match logits " + shape_string(logits) + " (expected " +
                            shape_string(expected) + ")");
  }
  out->outputs = {scalar_loss()};
  const double n = elems_of(logits), b = bytes_of(logits);
  OpCost& c = out->cost;
  c.forward_flops = 6 * n;
  c.backward_flops = 2 * n;
  c.forward_bytes = 2 * b + bytes_of(labels);
  c.backward_bytes = 2 * b + bytes_of(labels);
  // Per row: the logsumexp, kept for backward, and the loss term, forward's scratch.
  const double rows = n / static_cast<double>(logits.shape(logits.shape_size() - 1));
  c.saved_bytes = rows * 4;
  c.workspace_bytes = rows * 4;
  c.forward_kernels = 2;
  c.backward_kernels = 1;
  return ok_status();
}

}  // namespace gp::model::detail
