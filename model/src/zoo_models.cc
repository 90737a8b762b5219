#include "zoo_models.h"

#include <charconv>
#include <string>
#include <vector>

#include "gp/model/builder.h"

namespace gp::model::zoo {
namespace {

using graphpipe::v1::ModelGraph;

constexpr int64_t kMaxParam = int64_t{1} << 40;

Result<int64_t> parse_positive(std::string_view key, std::string_view text) {
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value <= 0 || value > kMaxParam) {
    return invalid_argument("zoo parameter " + std::string(key) + " = '" + std::string(text) +
                            "': expected a positive integer");
  }
  return value;
}

Result<int64_t> get(const ZooParams& params, std::string_view key) {
  return parse_positive(key, params.find(key)->second);
}

Result<std::vector<int64_t>> get_list(const ZooParams& params, std::string_view key) {
  std::string_view text = params.find(key)->second;
  std::vector<int64_t> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    GP_ASSIGN_OR_RETURN(int64_t v, parse_positive(key, text.substr(0, comma)));
    out.push_back(v);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  if (out.empty()) return invalid_argument("zoo parameter " + std::string(key) + ": empty list");
  return out;
}

std::string id(std::string_view prefix, int64_t i) {
  return std::string(prefix) + std::to_string(i);
}

// Shared by mmt and transformer: `branches` stacks of transformer layers, concatenated.
Result<ModelGraph> build_transformer_branches(const ZooParams& params, int64_t branches,
                                              std::string description) {
  GP_ASSIGN_OR_RETURN(int64_t layers, get(params, "layers"));
  GP_ASSIGN_OR_RETURN(int64_t seq, get(params, "seq"));
  GP_ASSIGN_OR_RETURN(int64_t hidden, get(params, "hidden"));
  GP_ASSIGN_OR_RETURN(int64_t heads, get(params, "heads"));
  GP_ASSIGN_OR_RETURN(int64_t ffn, get(params, "ffn"));
  if (hidden % heads != 0) {
    return invalid_argument("zoo parameter heads = " + std::to_string(heads) +
                            " must divide hidden = " + std::to_string(hidden));
  }
  GraphBuilder b("", std::move(description));
  std::vector<TensorRef> outs;
  for (int64_t br = 0; br < branches; ++br) {
    const std::string p = branches > 1 ? id("b", br) + "." : "";
    TensorRef x = b.input(p + "input", {seq, hidden});
    for (int64_t l = 0; l < layers; ++l)
      x = b.transformer_layer(p + id("l", l), x, hidden, heads, ffn);
    outs.push_back(x);
  }
  const TensorRef joined = branches > 1 ? b.concat("concat", outs) : outs[0];
  const TensorRef head = b.linear("head", joined, hidden);
  const TensorRef target = b.input("target", {seq, hidden});
  b.add_loss(b.mse_loss("loss", head, target));
  return b.finish();
}

}  // namespace

Result<ModelGraph> build_mmt(const ZooParams& params) {
  GP_ASSIGN_OR_RETURN(int64_t branches, get(params, "branches"));
  return build_transformer_branches(params, branches, "multi-modal transformer");
}

Result<ModelGraph> build_transformer(const ZooParams& params) {
  return build_transformer_branches(params, 1, "sequential transformer");
}

Result<ModelGraph> build_dlrm(const ZooParams& params) {
  GP_ASSIGN_OR_RETURN(int64_t dense_branches, get(params, "dense_branches"));
  GP_ASSIGN_OR_RETURN(int64_t sparse_branches, get(params, "sparse_branches"));
  GP_ASSIGN_OR_RETURN(int64_t dense_in, get(params, "dense_in"));
  GP_ASSIGN_OR_RETURN(int64_t dense_layers, get(params, "dense_layers"));
  GP_ASSIGN_OR_RETURN(int64_t width, get(params, "width"));
  GP_ASSIGN_OR_RETURN(int64_t rows, get(params, "rows"));
  GP_ASSIGN_OR_RETURN(int64_t dim, get(params, "dim"));
  GP_ASSIGN_OR_RETURN(int64_t bag, get(params, "bag"));
  GP_ASSIGN_OR_RETURN(int64_t top_layers, get(params, "top_layers"));
  GraphBuilder b("", "DLRM");
  std::vector<TensorRef> features;
  for (int64_t i = 0; i < dense_branches; ++i) {
    const std::string p = id("dense", i) + ".";
    TensorRef x = b.input(p + "input", {dense_in});
    for (int64_t l = 0; l < dense_layers; ++l)
      x = b.linear(p + id("fc", l), x, width, true, "relu");
    features.push_back(x);
  }
  for (int64_t i = 0; i < sparse_branches; ++i) {
    const std::string p = id("sparse", i) + ".";
    const TensorRef ids = b.input(p + "ids", {bag}, graphpipe::v1::DATA_TYPE_INT64);
    features.push_back(b.embedding_bag(p + "embedding", ids, rows, dim));
  }
  TensorRef x = b.concat("interaction", features);
  for (int64_t l = 0; l < top_layers; ++l) x = b.linear(id("top.fc", l), x, width, true, "relu");
  const TensorRef out = b.linear("top.out", x, 1);
  const TensorRef label = b.input("label", {1});
  b.add_loss(b.mse_loss("loss", out, label));
  return b.finish();
}

Result<ModelGraph> build_candle_uno(const ZooParams& params) {
  GP_ASSIGN_OR_RETURN(int64_t branches, get(params, "branches"));
  GP_ASSIGN_OR_RETURN(int64_t layers, get(params, "layers"));
  GP_ASSIGN_OR_RETURN(int64_t width, get(params, "width"));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> inputs, get_list(params, "inputs"));
  GP_ASSIGN_OR_RETURN(int64_t top_layers, get(params, "top_layers"));
  GraphBuilder b("", "CANDLE-Uno");
  std::vector<TensorRef> features;
  for (int64_t i = 0; i < branches; ++i) {
    const std::string p = id("feature", i) + ".";
    TensorRef x = b.input(p + "input", {inputs[static_cast<size_t>(i) % inputs.size()]});
    for (int64_t l = 0; l < layers; ++l) x = b.linear(p + id("fc", l), x, width, true, "relu");
    features.push_back(x);
  }
  features.push_back(b.input("dose1", {1}));
  features.push_back(b.input("dose2", {1}));
  TensorRef x = b.concat("concat", features);
  for (int64_t l = 0; l < top_layers; ++l) x = b.linear(id("top.fc", l), x, width, true, "relu");
  const TensorRef out = b.linear("top.out", x, 1);
  const TensorRef label = b.input("label", {1});
  b.add_loss(b.mse_loss("loss", out, label));
  return b.finish();
}

Result<ModelGraph> build_nbranch(const ZooParams& params) {
  GP_ASSIGN_OR_RETURN(int64_t branches, get(params, "branches"));
  GP_ASSIGN_OR_RETURN(int64_t layers, get(params, "layers"));
  GP_ASSIGN_OR_RETURN(int64_t seq, get(params, "seq"));
  GP_ASSIGN_OR_RETURN(int64_t hidden, get(params, "hidden"));
  GP_ASSIGN_OR_RETURN(int64_t heads, get(params, "heads"));
  if (hidden % heads != 0) {
    return invalid_argument("zoo parameter heads = " + std::to_string(heads) +
                            " must divide hidden = " + std::to_string(hidden));
  }
  GraphBuilder b("", "synthetic n-branch model");
  std::vector<TensorRef> outs;
  for (int64_t br = 0; br < branches; ++br) {
    const std::string p = id("b", br) + ".";
    TensorRef x = b.input(p + "input", {seq, hidden});
    for (int64_t l = 0; l < layers; ++l) {
      const std::string q = p + id("l", l) + ".";
      x = b.attention(q + "attn", x, heads);
      x = b.linear(q + "fc1", x, hidden, true, "relu");
      x = b.linear(q + "fc2", x, hidden);
    }
    outs.push_back(x);
  }
  const TensorRef joined = branches > 1 ? b.concat("concat", outs) : outs[0];
  const TensorRef head = b.linear("head", joined, hidden);
  const TensorRef target = b.input("target", {seq, hidden});
  b.add_loss(b.mse_loss("loss", head, target));
  return b.finish();
}

}  // namespace gp::model::zoo
