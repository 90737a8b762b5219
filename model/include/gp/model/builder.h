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
