// Layout and linear-algebra operators without parameters: matmul of two activations, scale,
// transpose and reshape. All of them take float tensors.
#include <cmath>
#include <string>
#include <vector>

#include "ops_internal.h"

namespace gp::model::detail {
namespace {

double bytes_of(const TensorSpec& spec) { return static_cast<double>(size_bytes(spec)); }

// Pure data movement: read x once and write y once, both ways.
void copy_cost(const TensorSpec& x, InferredOp* out) {
  OpCost& c = out->cost;
  c.forward_bytes = 2 * bytes_of(x);
  c.backward_bytes = 2 * bytes_of(x);
  c.forward_kernels = 1;
  c.backward_kernels = 1;
}

// transpose's optional window: axis, start and end together, narrowing `y` (the permuted x).
Status read_transpose_window(const Operator& op, TensorSpec* y, TransposeAttrs* attrs) {
  const int given = static_cast<int>(op.attrs().count("axis") + op.attrs().count("start") +
                                     op.attrs().count("end"));
  if (given == 0) return ok_status();
  if (given != 3) {
    return invalid_argument("attrs: a window needs axis, start and end together (given " +
                            std::to_string(given) + " of them)");
  }
  GP_ASSIGN_OR_RETURN(int64_t raw_axis, attr_int(op, "axis"));
  GP_ASSIGN_OR_RETURN(int axis, normalize_axis(raw_axis, y->shape_size()));
  GP_ASSIGN_OR_RETURN(int64_t start, attr_int(op, "start"));
  GP_ASSIGN_OR_RETURN(int64_t end, attr_int(op, "end"));
  GP_RETURN_IF_ERROR(
      check_range(start, end, y->shape(axis), "the permuted axis " + std::to_string(axis)));
  y->set_shape(axis, end - start);
  attrs->axis = axis;
  attrs->start = start;
  attrs->end = end;
  return ok_status();
}

}  // namespace

Status infer_matmul(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& a = in[0];
  const TensorSpec& b = in[1];
  for (int i = 0; i < 2; ++i) {
    GP_RETURN_IF_ERROR(require_float(in[i], i));
    GP_RETURN_IF_ERROR(require_rank_at_least(in[i], 2, i));
  }
  GP_ASSIGN_OR_RETURN(int64_t transpose_a, attr_int_or(op, "transpose_a", 0));
  GP_RETURN_IF_ERROR(boolean("transpose_a", transpose_a));
  GP_ASSIGN_OR_RETURN(int64_t transpose_b, attr_int_or(op, "transpose_b", 0));
  GP_RETURN_IF_ERROR(boolean("transpose_b", transpose_b));
  GP_ASSIGN_OR_RETURN(double alpha, attr_float_or(op, "alpha", 1));
  if (!std::isfinite(alpha)) {
    return invalid_argument("attrs.alpha = " + std::to_string(alpha) + ", must be finite");
  }
  const int rank = a.shape_size();
  if (b.shape_size() != rank) {
    return invalid_argument("inputs[1]: shape " + shape_string(b) + " has " +
                            std::to_string(b.shape_size()) + " per-sample dimensions, inputs[0] " +
                            shape_string(a) + " has " + std::to_string(rank) +
                            " (matmul needs equal ranks)");
  }
  for (int d = 0; d + 2 < rank; ++d) {
    if (a.shape(d) != b.shape(d)) {
      return invalid_argument("inputs[1]: shape " + shape_string(b) + ": leading dimension " +
                              std::to_string(d) + " differs from inputs[0] " + shape_string(a));
    }
  }
  // The axes of a and b that op() makes m x k and k x n.
  const int a_rows = transpose_a ? rank - 1 : rank - 2, a_cols = 2 * rank - 3 - a_rows;
  const int b_rows = transpose_b ? rank - 1 : rank - 2, b_cols = 2 * rank - 3 - b_rows;
  const int64_t m = a.shape(a_rows), k = a.shape(a_cols), n = b.shape(b_cols);
  if (b.shape(b_rows) != k) {
    const std::string which =
        transpose_a ? "dimension " + std::to_string(a_cols) : std::string("the last dimension");
    const std::string flags = transpose_a || transpose_b
                                  ? " (transpose_a = " + std::to_string(transpose_a) +
                                        ", transpose_b = " + std::to_string(transpose_b) + ")"
                                  : "";
    return invalid_argument("inputs[1]: shape " + shape_string(b) + ": dimension " +
                            std::to_string(b_rows) + " (" + std::to_string(b.shape(b_rows)) +
                            ") must equal " + which + " of inputs[0] " + shape_string(a) + " (" +
                            std::to_string(k) + ")" + flags);
  }
  out->attrs = MatmulAttrs{transpose_a != 0, transpose_b != 0, alpha};
  TensorSpec y = a;
  y.set_shape(rank - 2, m);
  y.set_shape(rank - 1, n);
  out->outputs = {y};
  const double batches = static_cast<double>(num_elements(a) / (m * k));
  const double gemm = 2.0 * batches * static_cast<double>(m * k * n);
  OpCost& c = out->cost;
  c.forward_flops = gemm;
  c.backward_flops = 2 * gemm;  // da = dy op(b)^T, db = op(a)^T dy
  c.forward_bytes = bytes_of(a) + bytes_of(b) + bytes_of(y);
  c.backward_bytes = 2 * (bytes_of(a) + bytes_of(b)) + bytes_of(y);
  c.forward_kernels = 1;  // one batched GEMM
  c.backward_kernels = 2;
  return ok_status();
}

Status infer_scale(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  GP_RETURN_IF_ERROR(require_float(in[0], 0));
  GP_ASSIGN_OR_RETURN(double factor, attr_float(op, "factor"));
  if (!std::isfinite(factor)) {
    return invalid_argument("attrs.factor = " + std::to_string(factor) + ", must be finite");
  }
  out->attrs = ScaleAttrs{factor};
  out->outputs = {in[0]};
  copy_cost(in[0], out);
  out->cost.forward_flops = static_cast<double>(num_elements(in[0]));
  out->cost.backward_flops = out->cost.forward_flops;
  return ok_status();  // backward needs only the factor: nothing kept
}

Status infer_transpose(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> perm, attr_ints(op, "perm"));
  const int rank = x.shape_size();
  const std::string range = "0.." + std::to_string(rank - 1);
  if (static_cast<int>(perm.size()) != rank) {
    return invalid_argument("attrs.perm = " + ints_string(perm) + ": has " +
                            std::to_string(perm.size()) + " entries, the input " + shape_string(x) +
                            " has " + std::to_string(rank) +
                            " per-sample axes (need a permutation of " + range + ")");
  }
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) {
      return invalid_argument("attrs.perm = " + ints_string(perm) + ": not a permutation of " +
                              range);
    }
    seen[p] = true;
  }
  TransposeAttrs attrs{perm};
  TensorSpec y = x;
  for (int d = 0; d < rank; ++d) y.set_shape(d, x.shape(static_cast<int>(perm[d])));
  GP_RETURN_IF_ERROR(read_transpose_window(op, &y, &attrs));
  out->attrs = attrs;
  out->outputs = {y};
  copy_cost(x, out);
  if (attrs.axis >= 0) {  // as slice: the window moves; backward zero-fills the rest of dx
    out->cost.forward_bytes = 2 * bytes_of(y);
    out->cost.backward_bytes = bytes_of(x) + bytes_of(y);
  }
  return ok_status();
}

Status infer_reshape(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];  // float, or ids (int64: moved as they are, no gradient)
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, attr_ints(op, "shape"));
  if (shape.empty()) {
    return invalid_argument("attrs.shape = []: give the per-sample shape, e.g. [" +
                            std::to_string(num_elements(x)) + "]");
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) {
      return invalid_argument("attrs.shape = " + ints_string(shape) +
                              ": every dimension must be > 0 (the batch is not written)");
    }
    // A product past int64 cannot equal the input's element count (found by fuzz_onnx).
    if (__builtin_mul_overflow(n, d, &n)) {
      return invalid_argument("attrs.shape = " + ints_string(shape) +
                              ": too many elements (the product overflows)");
    }
  }
  if (n != num_elements(x)) {
    return invalid_argument("attrs.shape = " + ints_string(shape) + ": " + std::to_string(n) +
                            " elements, the input " + shape_string(x) + " has " +
                            std::to_string(num_elements(x)));
  }
  out->outputs = {make_spec(std::move(shape), x.dtype())};
  copy_cost(x, out);
  return ok_status();
}

}  // namespace gp::model::detail
