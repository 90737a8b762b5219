// Operators with parameters: linear, embedding bag, multi-head self-attention.
#include <string>

#include "ops_internal.h"

namespace gp::model::detail {
namespace {

constexpr auto kFloat32 = graphpipe::v1::DATA_TYPE_FLOAT32;

}  // namespace

Status infer_linear(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  GP_RETURN_IF_ERROR(require_rank_at_least(x, 1, 0));
  GP_ASSIGN_OR_RETURN(int64_t out_features, attr_int(op, "out_features"));
  GP_RETURN_IF_ERROR(positive("out_features", out_features));
  GP_ASSIGN_OR_RETURN(int64_t bias, attr_int_or(op, "bias", 1));
  GP_RETURN_IF_ERROR(boolean("bias", bias));
  GP_ASSIGN_OR_RETURN(std::string act, attr_string_or(op, "activation", "none"));
  if (act != "none" && act != "relu" && act != "gelu") {
    return invalid_argument("attrs.activation = '" + act + "', expected none, relu or gelu");
  }
  out->attrs = LinearAttrs{out_features, bias != 0,
                           act == "relu"   ? Activation::kRelu
                           : act == "gelu" ? Activation::kGelu
                                           : Activation::kNone};

  const int64_t in_features = x.shape(x.shape_size() - 1);
  const double rows = static_cast<double>(num_elements(x) / in_features);
  TensorSpec y = x;
  y.set_shape(y.shape_size() - 1, out_features);
  out->outputs = {y};
  out->params.push_back(make_param("weight", {out_features, in_features}, x.dtype()));
  if (bias) out->params.push_back(make_param("bias", {out_features}, x.dtype()));
  sum_params(out);

  const double elt = static_cast<double>(dtype_size_bytes(x.dtype()));
  const double n_out = rows * static_cast<double>(out_features);
  const double gemm = 2.0 * rows * static_cast<double>(in_features * out_features);
  double act_fwd = 0, act_bwd = 0;
  if (act == "relu") act_fwd = n_out, act_bwd = n_out;
  if (act == "gelu") act_fwd = 8 * n_out, act_bwd = 12 * n_out;
  const double param_bytes = static_cast<double>(out->cost.param_count) * elt;
  OpCost& c = out->cost;
  c.forward_flops = gemm + (bias ? n_out : 0) + act_fwd;
  c.backward_flops = 2 * gemm + (bias ? n_out : 0) + act_bwd;  // dX and dW GEMMs
  c.forward_bytes = static_cast<double>(size_bytes(x)) + n_out * elt;
  c.backward_bytes =
      2.0 * static_cast<double>(size_bytes(x)) + n_out * elt * (act != "none" ? 2 : 1);
  c.forward_fixed_bytes = param_bytes;
  c.backward_fixed_bytes = 2 * param_bytes;
  // gelu's backward needs the pre-activation; a fused activation's dZ is backward's scratch.
  c.saved_bytes = act == "gelu" ? n_out * 4 : 0;
  c.workspace_bytes = act != "none" ? n_out * 4 : 0;
  c.forward_kernels = 1;
  c.backward_kernels = 2 + (bias ? 1 : 0);
  return ok_status();
}

// The ids input and the table of embedding and embedding_bag: [rows, dim].
struct Table {
  int64_t rows = 0, dim = 0;
};
Result<Table> embedding_table(const Operator& op, const TensorSpec& ids) {
  if (ids.dtype() != graphpipe::v1::DATA_TYPE_INT64 &&
      ids.dtype() != graphpipe::v1::DATA_TYPE_INT32) {
    return invalid_argument("inputs[0]: expected int64 ids, got " + shape_string(ids));
  }
  GP_RETURN_IF_ERROR(require_rank_at_least(ids, 1, 0));
  Table t;
  GP_ASSIGN_OR_RETURN(t.rows, attr_int(op, "num_embeddings"));
  GP_RETURN_IF_ERROR(positive("num_embeddings", t.rows));
  GP_ASSIGN_OR_RETURN(t.dim, attr_int(op, "embedding_dim"));
  GP_RETURN_IF_ERROR(positive("embedding_dim", t.dim));
  return t;
}

Status infer_embedding_bag(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& ids = in[0];
  GP_ASSIGN_OR_RETURN(Table table, embedding_table(op, ids));
  const int64_t rows = table.rows, dim = table.dim;
  GP_ASSIGN_OR_RETURN(std::string mode, attr_string_or(op, "mode", "sum"));
  if (mode != "sum" && mode != "mean") {
    return invalid_argument("attrs.mode = '" + mode + "', expected sum or mean");
  }
  EmbeddingAttrs attrs{rows, dim, mode == "mean"};
  if (op.attrs().count("padding_idx")) {
    GP_ASSIGN_OR_RETURN(int64_t padding, attr_int(op, "padding_idx"));
    if (padding < -1 || padding >= rows) {
      return invalid_argument(
          "attrs.padding_idx = " + std::to_string(padding) +
          ", expected -1 or a row in [0, num_embeddings = " + std::to_string(rows) + ")");
    }
    attrs.has_padding = true;
    attrs.padding_idx = padding;
  }
  out->attrs = attrs;
  // The last dimension is the bag; leading dimensions index bags.
  TensorSpec y = ids;
  y.set_shape(y.shape_size() - 1, dim);
  y.set_dtype(kFloat32);
  out->outputs = {y};
  out->params.push_back(make_param("weight", {rows, dim}, kFloat32));
  sum_params(out);

  const double lookups = static_cast<double>(num_elements(ids));
  const double gathered = lookups * static_cast<double>(dim);
  const double y_bytes = static_cast<double>(size_bytes(y));
  OpCost& c = out->cost;
  c.forward_flops = gathered;
  c.backward_flops = gathered;  // scatter-add into the touched rows only (sparse gradient)
  c.forward_bytes = static_cast<double>(size_bytes(ids)) + gathered * 4 + y_bytes;
  c.backward_bytes = y_bytes + static_cast<double>(size_bytes(ids)) + 2 * gathered * 4;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

// A lookup per id: ids [...] -> [..., dim]; the same table and costs as a bag of one.
Status infer_embedding(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& ids = in[0];
  GP_ASSIGN_OR_RETURN(Table table, embedding_table(op, ids));
  const int64_t rows = table.rows, dim = table.dim;
  EmbeddingAttrs attrs{rows, dim};
  // torch's nn.Embedding(padding_idx=p): row p is looked up as any row and never trained.
  if (op.attrs().count("padding_idx")) {
    GP_ASSIGN_OR_RETURN(int64_t p, attr_int(op, "padding_idx"));
    if (p < -rows || p >= rows) {
      return invalid_argument("attrs.padding_idx = " + std::to_string(p) + ": not a row of the " +
                              std::to_string(rows) + "-row table (torch allows -" +
                              std::to_string(rows) + " to " + std::to_string(rows - 1) + ")");
    }
    attrs.has_padding = true;
    attrs.padding_idx = p < 0 ? p + rows : p;
  }
  out->attrs = attrs;
  TensorSpec y = ids;
  y.add_shape(dim);
  y.set_dtype(kFloat32);
  out->outputs = {y};
  out->params.push_back(make_param("weight", {rows, dim}, kFloat32));
  sum_params(out);
  const double gathered = static_cast<double>(num_elements(y));
  const double ids_bytes = static_cast<double>(size_bytes(ids));
  OpCost& c = out->cost;
  c.forward_flops = 0;
  c.backward_flops = gathered;  // scatter-add into the touched rows only (sparse gradient)
  c.forward_bytes = ids_bytes + 2 * gathered * 4;
  c.backward_bytes = ids_bytes + 3 * gathered * 4;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_attention(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  if (x.shape_size() != 2) {
    return invalid_argument("inputs[0]: expected per-sample [sequence, hidden], got " +
                            shape_string(x));
  }
  GP_ASSIGN_OR_RETURN(int64_t heads, attr_int(op, "num_heads"));
  GP_RETURN_IF_ERROR(positive("num_heads", heads));
  GP_ASSIGN_OR_RETURN(int64_t bias, attr_int_or(op, "bias", 1));
  GP_RETURN_IF_ERROR(boolean("bias", bias));
  const int64_t s = x.shape(0), h = x.shape(1);
  if (h % heads != 0) {
    return invalid_argument("attrs.num_heads = " + std::to_string(heads) +
                            " does not divide the hidden size " + std::to_string(h));
  }
  out->attrs = AttentionAttrs{heads, bias != 0};
  out->outputs = {x};
  for (const char* name : {"q_weight", "k_weight", "v_weight", "out_weight"}) {
    out->params.push_back(make_param(name, {h, h}, x.dtype()));
  }
  if (bias) {
    for (const char* name : {"q_bias", "k_bias", "v_bias", "out_bias"}) {
      out->params.push_back(make_param(name, {h}, x.dtype()));
    }
  }
  sum_params(out);

  const double S = static_cast<double>(s), H = static_cast<double>(h);
  const double nh = static_cast<double>(heads);
  const double elt = static_cast<double>(dtype_size_bytes(x.dtype()));
  const double proj = 8 * S * H * H;      // Q, K, V and output projections
  const double scores = 2 * S * S * H;    // Q K^T over all heads
  const double context = 2 * S * S * H;   // P V over all heads
  const double softmax = 6 * nh * S * S;  // scale, max, exp, sum, divide
  const double biases = bias ? 4 * S * H : 0;
  const double param_bytes = static_cast<double>(out->cost.param_count) * elt;
  OpCost& c = out->cost;
  c.forward_flops = proj + scores + context + softmax + biases;
  c.backward_flops = 2 * (proj + scores + context) + 4 * nh * S * S + biases;
  // x read by three projections, Q/K/V written and read, scores written/read twice (softmax),
  // context written and read, output written.
  c.forward_bytes = (3 * S * H + 6 * S * H + 4 * nh * S * S + 2 * S * H + S * H) * elt;
  c.backward_bytes = 2 * c.forward_bytes;
  c.forward_fixed_bytes = param_bytes;
  c.backward_fixed_bytes = 2 * param_bytes;
  // Kept for backward besides the output: Q, K, V, context and the probabilities; backward's
  // scratch: dC, dQ, dK, dV and dP (all heads at once on a GPU, one head on the CPU).
  c.saved_bytes = (4 * S * H + nh * S * S) * 4;
  c.workspace_bytes = (4 * S * H + nh * S * S) * 4;
  c.forward_kernels = 8;
  c.backward_kernels = 16;
  return ok_status();
}

}  // namespace gp::model::detail
