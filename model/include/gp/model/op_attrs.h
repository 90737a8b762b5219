// Typed attributes of an operator: decoded and checked once, by the op's shape inference in
// Graph::build, then read by every backend's kernel factories (CPU, CUDA) as plain values.
// Nothing after shape inference parses Operator.attrs, so a backend cannot accept what the
// catalogue refused, default a missing attribute differently, or name the error differently.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace gp::model {

struct NoAttrs {};

enum class Activation : uint8_t { kNone, kRelu, kGelu };

// linear: y = act(x W^T + b) over the last dimension.
struct LinearAttrs {
  int64_t out_features = 0;
  bool bias = true;
  Activation activation = Activation::kNone;
};

// multi_head_attention over per-sample [sequence, hidden].
struct AttentionAttrs {
  int64_t num_heads = 0;
  bool bias = true;
};

// embedding and embedding_bag: a table [num_embeddings, embedding_dim]; bags sum or average their
// ids, skipping padding_idx when there is one (an embedding is a bag of one id).
struct EmbeddingAttrs {
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  bool mean = false;
  bool has_padding = false;
  int64_t padding_idx = -1;
};

// layer_norm, batch_norm.
struct NormAttrs {
  double epsilon = 1e-5;
};

struct GeluAttrs {
  bool exact = false;  // approximate = "none": the erf form; else the tanh approximation
};

struct ClipAttrs {
  double min = 0;
  double max = 0;
};

// An axis of the per-sample shape, normalised to [0, rank): concat.
struct AxisAttrs {
  int axis = 0;
};

struct ReduceAttrs {
  int axis = 0;  // normalised
  bool mean = false;
};

struct SliceAttrs {
  int axis = 0;  // normalised
  int64_t start = 0;
  int64_t end = 0;
};

struct ScaleAttrs {
  double factor = 1;
};

struct TransposeAttrs {
  std::vector<int64_t> perm;  // a permutation of the per-sample dims
};

// The sliding window of conv2d and the pools over per-sample [c, h, w], with the output size
// shape inference worked out (ceil_mode included).
struct Window2d {
  int64_t c = 0, h = 0, w = 0;  // input
  int64_t kh = 0, kw = 0;       // kernel
  int64_t sh = 1, sw = 1;       // stride
  int64_t ph = 0, pw = 0;       // zero padding on both sides
  int64_t ho = 0, wo = 0;       // output
};

struct ConvAttrs {
  Window2d window;
  int64_t out_channels = 0;
  bool bias = true;
  int64_t groups = 1;
};

struct PoolAttrs {
  Window2d window;
  bool count_include_pad = true;  // avg_pool2d
};

// An opaque op (imported for planning only): the ONNX operator it stands for.
struct OpaqueAttrs {
  std::string onnx_type;
};

using OpAttrs = std::variant<NoAttrs, LinearAttrs, AttentionAttrs, EmbeddingAttrs, NormAttrs,
                             GeluAttrs, ClipAttrs, AxisAttrs, ReduceAttrs, SliceAttrs, ScaleAttrs,
                             TransposeAttrs, ConvAttrs, PoolAttrs, OpaqueAttrs>;

}  // namespace gp::model
