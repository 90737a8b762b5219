// Fluent construction of ModelGraph protos (used by the model zoo and tests). Each call appends
// one operator and returns a reference to its output; nothing is validated until Graph::build.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gp/model/ops.h"

namespace gp::model {

class GraphBuilder {
 public:
  GraphBuilder(std::string name, std::string description);

  TensorRef input(std::string id, std::vector<int64_t> shape,
                  DataType dtype = graphpipe::v1::DATA_TYPE_FLOAT32);
  TensorRef linear(std::string id, const TensorRef& x, int64_t out_features, bool bias = true,
                   std::string_view activation = "none");
  TensorRef embedding_bag(std::string id, const TensorRef& ids, int64_t num_embeddings,
                          int64_t embedding_dim);
  TensorRef embedding(std::string id, const TensorRef& ids, int64_t num_embeddings,
                      int64_t embedding_dim);
  TensorRef attention(std::string id, const TensorRef& x, int64_t num_heads);
  TensorRef layer_norm(std::string id, const TensorRef& x);
  TensorRef relu(std::string id, const TensorRef& x);
  // exact: x * Phi(x) with erf (torch's nn.GELU()); else the tanh approximation.
  TensorRef gelu(std::string id, const TensorRef& x, bool exact = false);
  TensorRef softmax(std::string id, const TensorRef& x);
  TensorRef sigmoid(std::string id, const TensorRef& x);
  TensorRef tanh(std::string id, const TensorRef& x);
  TensorRef clip(std::string id, const TensorRef& x, double min, double max);
  TensorRef mul(std::string id, const TensorRef& a, const TensorRef& b);
  // Sum (or mean, mean = true) over per-sample `axis`, which stays with size 1.
  TensorRef reduce(std::string id, const TensorRef& x, int64_t axis, bool mean = false);
  // Over a set of per-sample axes; mode sum|mean|max|l2.
  TensorRef reduce_axes(std::string id, const TensorRef& x, std::vector<int64_t> axes,
                        std::string_view mode = "sum", bool keepdims = true);
  // fn: neg|exp|log|sqrt|rsqrt|reciprocal|abs|erf|sin|cos|softplus.
  TensorRef unary(std::string id, const TensorRef& x, std::string_view fn);
  // fn: add|sub|mul|div|pow|max|min, broadcast as NumPy over the per-sample axes.
  TensorRef binary(std::string id, const TensorRef& a, const TensorRef& b, std::string_view fn);
  // fn: eq|ne|lt|le|gt|ge; a float mask of 0 and 1.
  TensorRef compare(std::string id, const TensorRef& a, const TensorRef& b, std::string_view fn);
  TensorRef where(std::string id, const TensorRef& condition, const TensorRef& a,
                  const TensorRef& b);
  // The same `values` (row-major, per-sample shape `shape`) for every sample of `batch_of`'s
  // batch; int64 when `integer`.
  TensorRef constant(std::string id, const TensorRef& batch_of, std::vector<int64_t> shape,
                     const std::vector<float>& values, bool integer = false);
  // x + a learned bias of shape `shape`, the trailing dimensions of x.
  TensorRef bias_add(std::string id, const TensorRef& x, std::vector<int64_t> shape);
  // A learned tensor of per-sample shape `shape`, the same for every sample of `batch_of`'s batch.
  TensorRef broadcast_param(std::string id, const TensorRef& batch_of, std::vector<int64_t> shape);
  TensorRef add(std::string id, const std::vector<TensorRef>& xs);
  TensorRef concat(std::string id, const std::vector<TensorRef>& xs, int64_t axis = -1);
  TensorRef slice(std::string id, const TensorRef& x, int64_t axis, int64_t start, int64_t end);
  TensorRef matmul(std::string id, const TensorRef& a, const TensorRef& b);
  TensorRef scale(std::string id, const TensorRef& x, double factor);
  TensorRef transpose(std::string id, const TensorRef& x, std::vector<int64_t> perm);
  TensorRef reshape(std::string id, const TensorRef& x, std::vector<int64_t> shape);
  TensorRef conv2d(std::string id, const TensorRef& x, int64_t out_channels,
                   std::vector<int64_t> kernel, std::vector<int64_t> stride = {1, 1},
                   std::vector<int64_t> padding = {0, 0}, bool bias = true);
  // PyTorch's ConvTranspose2d (groups 1): weight [C, out, kh, kw].
  TensorRef conv_transpose2d(std::string id, const TensorRef& x, int64_t out_channels,
                             std::vector<int64_t> kernel, std::vector<int64_t> stride = {1, 1},
                             std::vector<int64_t> padding = {0, 0},
                             std::vector<int64_t> output_padding = {0, 0}, bool bias = true);
  // To per-sample [C, size[0], size[1]]; mode nearest|bilinear.
  TensorRef resize(std::string id, const TensorRef& x, std::vector<int64_t> size,
                   std::string_view mode = "nearest", bool align_corners = false);
  // x with per-sample axis `axis` replaced by x[..., indices[j], ...] (torch.index_select).
  TensorRef gather(std::string id, const TensorRef& x, int64_t axis, std::vector<int64_t> indices);
  // An integer tensor as float32, or with `dtype` "int64" float32 numbers as int64 ids (no
  // gradient either way).
  TensorRef cast(std::string id, const TensorRef& x, std::string_view dtype = "float32");
  TensorRef cumsum(std::string id, const TensorRef& x, int64_t axis, bool exclusive = false,
                   bool reverse = false);
  // An empty stride means stride = kernel.
  TensorRef max_pool2d(std::string id, const TensorRef& x, std::vector<int64_t> kernel,
                       std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0, 0});
  TensorRef avg_pool2d(std::string id, const TensorRef& x, std::vector<int64_t> kernel,
                       std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0, 0},
                       bool count_include_pad = true);
  TensorRef batch_norm(std::string id, const TensorRef& x, double epsilon = 1e-5);
  // An operator GraphPipe cannot compute (planning only): `output` is its declared per-sample
  // output; forward_flops per sample.
  TensorRef opaque(std::string id, const std::vector<TensorRef>& inputs, const TensorSpec& output,
                   std::string onnx_type, double forward_flops, int64_t param_elements = 0);
  TensorRef mse_loss(std::string id, const TensorRef& prediction, const TensorRef& target);
  TensorRef softmax_cross_entropy(std::string id, const TensorRef& logits, const TensorRef& labels);
  // Post-LN transformer layer: attention, residual, layer norm, GELU FFN, residual, layer norm.
  TensorRef transformer_layer(const std::string& prefix, const TensorRef& x, int64_t hidden,
                              int64_t num_heads, int64_t ffn_hidden);

  void add_loss(const TensorRef& loss);
  void set_source(std::string source);
  // Raw access for tests that craft invalid models.
  Operator& add_op(std::string id, std::string_view type, const std::vector<TensorRef>& inputs);
  ModelGraph& model() { return model_; }
  ModelGraph finish() { return model_; }

 private:
  ModelGraph model_;
};

TensorRef ref(std::string op, int output = 0);

}  // namespace gp::model
