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
  bool scale = true;  // layer_norm: a learned gamma (false: torch's elementwise_affine=False)
  bool shift = true;  // layer_norm: a learned beta (false: torch's LayerNorm(bias=False))
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

enum class ReduceMode : uint8_t { kSum, kMean, kMax, kL2 };

// reduce over a set of per-sample axes. `axis` and `mean` describe the one-axis sum or mean that
// the fast kernels take (axes.size() == 1 and mode sum or mean); the general kernels read axes.
struct ReduceAttrs {
  int axis = 0;  // normalised: axes[0]
  bool mean = false;
  std::vector<int> axes;  // normalised, ascending, distinct
  ReduceMode mode = ReduceMode::kSum;
  bool keepdims = true;  // reduced axes kept with size 1 (else dropped; same memory layout)
};

// How the operands of a broadcasting element-wise op (binary, compare, where) map onto its
// output, worked out by shape inference: the output's per-sample dims and, for every operand,
// the element stride of each output axis in that operand (0 where the operand is broadcast).
// Operands are aligned on their trailing axes (NumPy); every operand has the batch axis.
struct Broadcast {
  std::vector<int64_t> dims;                  // output, per sample
  std::vector<std::vector<int64_t>> strides;  // [operand][axis]
  std::vector<int64_t> operand_elements;      // per sample, per operand
};

enum class UnaryFn : uint8_t {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kReciprocal,
  kAbs,
  kErf,
  kSin,
  kCos,
  kSoftplus
};
struct UnaryAttrs {
  UnaryFn fn = UnaryFn::kNeg;
};

enum class BinaryFn : uint8_t { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin };
struct BinaryAttrs {
  BinaryFn fn = BinaryFn::kAdd;
  Broadcast broadcast;
};

enum class CompareFn : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
struct CompareAttrs {
  CompareFn fn = CompareFn::kEq;
  Broadcast broadcast;
};

// where(condition, a, b): a where the condition is non-zero, else b.
struct WhereAttrs {
  Broadcast broadcast;
};

// constant: the same values for every sample, not trained.
struct ConstantAttrs {
  std::vector<int64_t> shape;
  bool integer = false;  // stored as int64 (ids, positions), else float32
};

struct SliceAttrs {
  int axis = 0;  // normalised
  int64_t start = 0;
  int64_t end = 0;
};

struct ScaleAttrs {
  double factor = 1;
};

// matmul: y = alpha op(a) op(b) over the last two axes, op(x) = x^T where transpose_x. The
// importer folds a transpose of either operand and a constant scale of an operand or of the
// product into these, so attention scores need neither a copy of k^T nor a pass of scaling.
struct MatmulAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1;
};

// transpose: y = x with its per-sample dims permuted. With a window (axis >= 0) y is only
// [start, end) of the permuted x's axis `axis`: the importer folds a slice of a transpose (timm's
// q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)) into one, so the permuted whole is never made.
struct TransposeAttrs {
  std::vector<int64_t> perm;  // a permutation of the per-sample dims
  int axis = -1;              // the windowed output axis (normalised), -1: none
  int64_t start = 0, end = 0;
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

// conv_transpose2d: the window of the convolution it is the transpose of, read from the output
// side: `window` holds the input [c, h, w] (the transposed conv's input), kernel, stride and
// padding, and ho, wo, the transposed conv's output size.
struct ConvTransposeAttrs {
  Window2d window;
  int64_t out_channels = 0;
  bool bias = true;
};

// resize of [c, h, w] to [c, ho, wo]: nearest (PyTorch's "nearest": source floor(o * h / ho)) or
// bilinear, with or without align_corners.
struct ResizeAttrs {
  int64_t c = 0, h = 0, w = 0, ho = 0, wo = 0;
  bool bilinear = false;
  bool align_corners = false;
};

// gather along a per-sample axis: output index j of `axis` reads input index indices[j] (each in
// [0, dim), repeats allowed); `inverse_offsets` / `inverse` list, for every input index i, the
// output indices that read it (CSR, ascending), so that backward sums them in a fixed order.
struct GatherAttrs {
  int axis = 0;  // normalised
  std::vector<int64_t> indices;
  std::vector<int64_t> inverse_offsets;  // dim + 1 entries
  std::vector<int64_t> inverse;          // indices.size() entries
};

// cumsum along a per-sample axis: y[i] = x[0] + ... + x[i] (exclusive: up to x[i - 1]; reverse:
// from the axis' end).
struct CumSumAttrs {
  int axis = 0;  // normalised
  bool exclusive = false;
  bool reverse = false;
};

// cast: the output's element type (float32 from integers, or int64 from float32).
struct CastAttrs {
  bool to_int64 = false;
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
                             MatmulAttrs, TransposeAttrs, ConvAttrs, PoolAttrs, OpaqueAttrs,
                             UnaryAttrs, BinaryAttrs, CompareAttrs, WhereAttrs, ConstantAttrs,
                             ConvTransposeAttrs, ResizeAttrs, GatherAttrs, CumSumAttrs, CastAttrs>;

}  // namespace gp::model
