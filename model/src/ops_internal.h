// Shared by the catalogue's translation units, Graph's validation and the ONNX importer's (which
// checks the weights without copying them).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gp/model/ops.h"

namespace gp::model::detail {

// Initial values `bytes` long for parameter (or buffer) `spec` of op i hold all of it, as float32:
// else the error, naming the op and param_values[name].
Status check_param_value_size(int i, const Operator& op, const std::string& name, size_t bytes,
                              const ParamSpec& spec);

// Infer functions, one per op type (see ops.cc for the table).
Status infer_input(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_linear(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_embedding_bag(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_embedding(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_attention(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_layer_norm(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_relu(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_gelu(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_softmax(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_sigmoid(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_tanh(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_broadcast_param(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_clip(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_mul(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_reduce(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_bias_add(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_add(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_concat(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_slice(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_mse_loss(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_softmax_cross_entropy(const Operator& op, std::span<const TensorSpec> in,
                                   InferredOp* out);
Status infer_matmul(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_scale(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_transpose(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_reshape(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_conv2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_max_pool2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_avg_pool2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_batch_norm(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_unary(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_binary(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_compare(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_where(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_cast(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_cumsum(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_constant(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_conv_transpose2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_resize(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_gather(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);
Status infer_opaque(const Operator& op, std::span<const TensorSpec> in, InferredOp* out);

// "inputs[1]: expected float tensor, got [4] int64"
Status require_float(const TensorSpec& spec, int input_index);
Status require_rank_at_least(const TensorSpec& spec, int rank, int input_index);
// Normalises a possibly negative axis against `rank`; error names attrs.axis.
Result<int> normalize_axis(int64_t axis, int rank);
// attrs.start and attrs.end of a window of `size` elements along `axis_name` (slice, a windowed
// transpose): 0 <= start < end <= size, else the error names both and the axis's size.
Status check_range(int64_t start, int64_t end, int64_t size, const std::string& axis_name);
// "attrs.<attr> = <value>, must be > 0" / "must be 0 or 1" unless it is.
Status positive(std::string_view attr, int64_t value);
Status boolean(std::string_view attr, int64_t value);
// param_count = the elements of every ParamSpec in out->params.
void sum_params(InferredOp* out);
// "[0, 2, 1]"
std::string ints_string(const std::vector<int64_t>& values);
ParamSpec make_param(std::string name, std::vector<int64_t> shape, DataType dtype);
int64_t param_elements(const ParamSpec& p);
// attrs.epsilon (default 1e-5), which must be > 0: shared by the normalisations.
Result<double> positive_epsilon(const Operator& op);

}  // namespace gp::model::detail
