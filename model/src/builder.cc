#include "gp/model/builder.h"

namespace gp::model {

TensorRef ref(std::string op, int output) {
  TensorRef r;
  r.set_op(std::move(op));
  r.set_output(output);
  return r;
}

GraphBuilder::GraphBuilder(std::string name, std::string description) {
  model_.set_name(std::move(name));
  model_.set_description(std::move(description));
}

Operator& GraphBuilder::add_op(std::string id, std::string_view type,
                               const std::vector<TensorRef>& inputs) {
  Operator* op = model_.add_ops();
  op->set_id(std::move(id));
  op->set_type(std::string(type));
  for (const auto& in : inputs) *op->add_inputs() = in;
  return *op;
}

TensorRef GraphBuilder::input(std::string id, std::vector<int64_t> shape, DataType dtype) {
  Operator& op = add_op(id, "input", {});
  *op.add_outputs() = make_spec(std::move(shape), dtype);
  return ref(std::move(id));
}

TensorRef GraphBuilder::linear(std::string id, const TensorRef& x, int64_t out_features, bool bias,
                               std::string_view activation) {
  Operator& op = add_op(id, "linear", {x});
  set_attr(op, "out_features", out_features);
  if (!bias) set_attr(op, "bias", int64_t{0});
  if (activation != "none") set_attr(op, "activation", activation);
  return ref(std::move(id));
}

TensorRef GraphBuilder::embedding_bag(std::string id, const TensorRef& ids, int64_t num_embeddings,
                                      int64_t embedding_dim) {
  Operator& op = add_op(id, "embedding_bag", {ids});
  set_attr(op, "num_embeddings", num_embeddings);
  set_attr(op, "embedding_dim", embedding_dim);
  return ref(std::move(id));
}

TensorRef GraphBuilder::embedding(std::string id, const TensorRef& ids, int64_t num_embeddings,
                                  int64_t embedding_dim) {
  Operator& op = add_op(id, "embedding", {ids});
  set_attr(op, "num_embeddings", num_embeddings);
  set_attr(op, "embedding_dim", embedding_dim);
  return ref(std::move(id));
}

TensorRef GraphBuilder::attention(std::string id, const TensorRef& x, int64_t num_heads) {
  Operator& op = add_op(id, "multi_head_attention", {x});
  set_attr(op, "num_heads", num_heads);
  return ref(std::move(id));
}

TensorRef GraphBuilder::layer_norm(std::string id, const TensorRef& x) {
  add_op(id, "layer_norm", {x});
  return ref(std::move(id));
}

TensorRef GraphBuilder::relu(std::string id, const TensorRef& x) {
  add_op(id, "relu", {x});
  return ref(std::move(id));
}

TensorRef GraphBuilder::gelu(std::string id, const TensorRef& x, bool exact) {
  Operator& op = add_op(id, "gelu", {x});
  if (exact) set_attr(op, "approximate", std::string("none"));
  return ref(std::move(id));
}

TensorRef GraphBuilder::softmax(std::string id, const TensorRef& x) {
  add_op(id, "softmax", {x});
  return ref(std::move(id));
}

TensorRef GraphBuilder::tanh(std::string id, const TensorRef& x) {
  add_op(id, "tanh", {x});
  return ref(std::move(id));
}

TensorRef GraphBuilder::sigmoid(std::string id, const TensorRef& x) {
  add_op(id, "sigmoid", {x});
  return ref(std::move(id));
}

TensorRef GraphBuilder::clip(std::string id, const TensorRef& x, double min, double max) {
  Operator& op = add_op(id, "clip", {x});
  set_attr(op, "min", min);
  set_attr(op, "max", max);
  return ref(std::move(id));
}

TensorRef GraphBuilder::mul(std::string id, const TensorRef& a, const TensorRef& b) {
  add_op(id, "mul", {a, b});
  return ref(std::move(id));
}

TensorRef GraphBuilder::reduce(std::string id, const TensorRef& x, int64_t axis, bool mean) {
  Operator& op = add_op(id, "reduce", {x});
  set_attr(op, "axis", axis);
  if (mean) set_attr(op, "mode", std::string_view("mean"));
  return ref(std::move(id));
}

TensorRef GraphBuilder::reduce_axes(std::string id, const TensorRef& x, std::vector<int64_t> axes,
                                    std::string_view mode, bool keepdims) {
  Operator& op = add_op(id, "reduce", {x});
  set_attr(op, "axes", axes);
  set_attr(op, "mode", mode);
  if (!keepdims) set_attr(op, "keepdims", int64_t{0});
  return ref(std::move(id));
}

TensorRef GraphBuilder::unary(std::string id, const TensorRef& x, std::string_view fn) {
  Operator& op = add_op(id, "unary", {x});
  set_attr(op, "fn", fn);
  return ref(std::move(id));
}

TensorRef GraphBuilder::binary(std::string id, const TensorRef& a, const TensorRef& b,
                               std::string_view fn) {
  Operator& op = add_op(id, "binary", {a, b});
  set_attr(op, "fn", fn);
  return ref(std::move(id));
}

TensorRef GraphBuilder::compare(std::string id, const TensorRef& a, const TensorRef& b,
                                std::string_view fn) {
  Operator& op = add_op(id, "compare", {a, b});
  set_attr(op, "fn", fn);
  return ref(std::move(id));
}

TensorRef GraphBuilder::where(std::string id, const TensorRef& condition, const TensorRef& a,
                              const TensorRef& b) {
  add_op(id, "where", {condition, a, b});
  return ref(std::move(id));
}

TensorRef GraphBuilder::constant(std::string id, const TensorRef& batch_of,
                                 std::vector<int64_t> shape, const std::vector<float>& values,
                                 bool integer) {
  Operator& op = add_op(id, "constant", {batch_of});
  set_attr(op, "shape", shape);
  if (integer) set_attr(op, "dtype", std::string_view("int64"));
  (*op.mutable_param_values())["value"] =
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return ref(std::move(id));
}

TensorRef GraphBuilder::conv_transpose2d(std::string id, const TensorRef& x, int64_t out_channels,
                                         std::vector<int64_t> kernel, std::vector<int64_t> stride,
                                         std::vector<int64_t> padding,
                                         std::vector<int64_t> output_padding, bool bias) {
  Operator& op = add_op(id, "conv_transpose2d", {x});
  set_attr(op, "out_channels", out_channels);
  set_attr(op, "kernel", kernel);
  set_attr(op, "stride", stride);
  set_attr(op, "padding", padding);
  set_attr(op, "output_padding", output_padding);
  if (!bias) set_attr(op, "bias", int64_t{0});
  return ref(std::move(id));
}

TensorRef GraphBuilder::resize(std::string id, const TensorRef& x, std::vector<int64_t> size,
                               std::string_view mode, bool align_corners) {
  Operator& op = add_op(id, "resize", {x});
  set_attr(op, "size", size);
  set_attr(op, "mode", mode);
  if (align_corners) set_attr(op, "align_corners", int64_t{1});
  return ref(std::move(id));
}

TensorRef GraphBuilder::gather(std::string id, const TensorRef& x, int64_t axis,
                               std::vector<int64_t> indices) {
  Operator& op = add_op(id, "gather", {x});
  set_attr(op, "axis", axis);
  set_attr(op, "indices", indices);
  return ref(std::move(id));
}

TensorRef GraphBuilder::cast(std::string id, const TensorRef& x, std::string_view dtype) {
  Operator& op = add_op(id, "cast", {x});
  if (dtype != "float32") set_attr(op, "dtype", std::string(dtype));
  return ref(std::move(id));
}

TensorRef GraphBuilder::cumsum(std::string id, const TensorRef& x, int64_t axis, bool exclusive,
                               bool reverse) {
  Operator& op = add_op(id, "cumsum", {x});
  set_attr(op, "axis", axis);
  if (exclusive) set_attr(op, "exclusive", int64_t{1});
  if (reverse) set_attr(op, "reverse", int64_t{1});
  return ref(std::move(id));
}

TensorRef GraphBuilder::bias_add(std::string id, const TensorRef& x, std::vector<int64_t> shape) {
  Operator& op = add_op(id, "bias_add", {x});
  set_attr(op, "shape", shape);
  return ref(std::move(id));
}

TensorRef GraphBuilder::broadcast_param(std::string id, const TensorRef& batch_of,
                                        std::vector<int64_t> shape) {
  Operator& op = add_op(id, "broadcast_param", {batch_of});
  set_attr(op, "shape", shape);
  return ref(std::move(id));
}

TensorRef GraphBuilder::add(std::string id, const std::vector<TensorRef>& xs) {
  add_op(id, "add", xs);
  return ref(std::move(id));
}

TensorRef GraphBuilder::concat(std::string id, const std::vector<TensorRef>& xs, int64_t axis) {
  Operator& op = add_op(id, "concat", xs);
  if (axis != -1) set_attr(op, "axis", axis);
  return ref(std::move(id));
}

TensorRef GraphBuilder::slice(std::string id, const TensorRef& x, int64_t axis, int64_t start,
                              int64_t end) {
  Operator& op = add_op(id, "slice", {x});
  set_attr(op, "axis", axis);
  set_attr(op, "start", start);
  set_attr(op, "end", end);
  return ref(std::move(id));
}

TensorRef GraphBuilder::matmul(std::string id, const TensorRef& a, const TensorRef& b) {
  add_op(id, "matmul", {a, b});
  return ref(std::move(id));
}

TensorRef GraphBuilder::scale(std::string id, const TensorRef& x, double factor) {
  Operator& op = add_op(id, "scale", {x});
  set_attr(op, "factor", factor);
  return ref(std::move(id));
}

TensorRef GraphBuilder::transpose(std::string id, const TensorRef& x, std::vector<int64_t> perm) {
  Operator& op = add_op(id, "transpose", {x});
  set_attr(op, "perm", perm);
  return ref(std::move(id));
}

TensorRef GraphBuilder::reshape(std::string id, const TensorRef& x, std::vector<int64_t> shape) {
  Operator& op = add_op(id, "reshape", {x});
  set_attr(op, "shape", shape);
  return ref(std::move(id));
}

TensorRef GraphBuilder::conv2d(std::string id, const TensorRef& x, int64_t out_channels,
                               std::vector<int64_t> kernel, std::vector<int64_t> stride,
                               std::vector<int64_t> padding, bool bias) {
  Operator& op = add_op(id, "conv2d", {x});
  set_attr(op, "out_channels", out_channels);
  set_attr(op, "kernel", kernel);
  set_attr(op, "stride", stride);
  set_attr(op, "padding", padding);
  if (!bias) set_attr(op, "bias", int64_t{0});
  return ref(std::move(id));
}

TensorRef GraphBuilder::max_pool2d(std::string id, const TensorRef& x, std::vector<int64_t> kernel,
                                   std::vector<int64_t> stride, std::vector<int64_t> padding) {
  Operator& op = add_op(id, "max_pool2d", {x});
  set_attr(op, "kernel", kernel);
  if (!stride.empty()) set_attr(op, "stride", stride);
  set_attr(op, "padding", padding);
  return ref(std::move(id));
}

TensorRef GraphBuilder::avg_pool2d(std::string id, const TensorRef& x, std::vector<int64_t> kernel,
                                   std::vector<int64_t> stride, std::vector<int64_t> padding,
                                   bool count_include_pad) {
  Operator& op = add_op(id, "avg_pool2d", {x});
  set_attr(op, "kernel", kernel);
  if (!stride.empty()) set_attr(op, "stride", stride);
  set_attr(op, "padding", padding);
  if (!count_include_pad) set_attr(op, "count_include_pad", int64_t{0});
  return ref(std::move(id));
}

TensorRef GraphBuilder::batch_norm(std::string id, const TensorRef& x, double epsilon) {
  Operator& op = add_op(id, "batch_norm", {x});
  if (epsilon != 1e-5) set_attr(op, "epsilon", epsilon);
  return ref(std::move(id));
}

TensorRef GraphBuilder::opaque(std::string id, const std::vector<TensorRef>& inputs,
                               const TensorSpec& output, std::string onnx_type,
                               double forward_flops, int64_t param_elements) {
  Operator& op = add_op(id, "opaque", inputs);
  *op.add_outputs() = output;
  set_attr(op, "onnx_type", std::string_view(onnx_type));
  set_attr(op, "forward_flops", forward_flops);
  if (param_elements != 0) set_attr(op, "param_elements", param_elements);
  return ref(std::move(id));
}

TensorRef GraphBuilder::mse_loss(std::string id, const TensorRef& prediction,
                                 const TensorRef& target) {
  add_op(id, "mse_loss", {prediction, target});
  return ref(std::move(id));
}

TensorRef GraphBuilder::softmax_cross_entropy(std::string id, const TensorRef& logits,
                                              const TensorRef& labels) {
  add_op(id, "softmax_cross_entropy", {logits, labels});
  return ref(std::move(id));
}

TensorRef GraphBuilder::transformer_layer(const std::string& prefix, const TensorRef& x,
                                          int64_t hidden, int64_t num_heads, int64_t ffn_hidden) {
  const TensorRef attn = attention(prefix + ".attn", x, num_heads);
  const TensorRef res1 = add(prefix + ".res1", {x, attn});
  const TensorRef ln1 = layer_norm(prefix + ".ln1", res1);
  const TensorRef ffn1 = linear(prefix + ".ffn1", ln1, ffn_hidden, true, "gelu");
  const TensorRef ffn2 = linear(prefix + ".ffn2", ffn1, hidden);
  const TensorRef res2 = add(prefix + ".res2", {ln1, ffn2});
  return layer_norm(prefix + ".ln2", res2);
}

void GraphBuilder::add_loss(const TensorRef& loss) { *model_.add_losses() = loss; }

void GraphBuilder::set_source(std::string source) { model_.set_source(std::move(source)); }

}  // namespace gp::model
