#include "gp/model/ops.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "ops_internal.h"

namespace gp::model {
namespace {

using namespace detail;  // NOLINT: the infer functions

// The one table that knows which op types exist, and the one place their names meet their ids.
constexpr std::array kCatalogue = {
    OpTypeInfo{
        OpType::kInput, "input", "graph input (data or labels); declares its per-sample output",
        "none; outputs[0] gives the per-sample shape and dtype; ragged_offsets (string, set by "
        "the importer: the input holding a ragged bag's offsets)",
        "ragged_offsets", 0, 0, true, false, &infer_input},
    OpTypeInfo{OpType::kLinear, "linear", "y = act(x W^T + b) over the last dimension",
               "out_features (int, required), bias (0|1, default 1), "
               "activation (none|relu|gelu, default none)",
               "out_features,bias,activation", 1, 1, false, false, &infer_linear},
    OpTypeInfo{OpType::kEmbeddingBag, "embedding_bag",
               "sum (or mean) of the embedding rows named by a bag of ids",
               "num_embeddings (int, required), embedding_dim (int, required), "
               "mode (sum|mean, default sum), padding_idx (int, optional: ids equal to it are "
               "skipped and not counted by mean; -1 pads bags of varying length)",
               "num_embeddings,embedding_dim,mode,padding_idx", 1, 1, false, false,
               &infer_embedding_bag},
    OpTypeInfo{OpType::kEmbedding, "embedding",
               "the embedding row of every id: ids [...] -> [..., embedding_dim]",
               "num_embeddings (int, required), embedding_dim (int, required), padding_idx (int, "
               "optional: that row is looked up as any other but never trained, as torch's "
               "nn.Embedding(padding_idx=...); negative counts from the end)",
               "num_embeddings,embedding_dim,padding_idx", 1, 1, false, false, &infer_embedding},
    OpTypeInfo{OpType::kAttention, "multi_head_attention",
               "self-attention: QKV projections, softmax(QK^T/sqrt(d))V, "
               "output projection",
               "num_heads (int, required, divides hidden), bias (0|1, default 1)", "num_heads,bias",
               1, 1, false, false, &infer_attention},
    OpTypeInfo{
        OpType::kLayerNorm, "layer_norm", "normalise the last dimension, then scale and shift",
        "epsilon (float, default 1e-5), scale (0|1, default 1: a learned gamma), shift (0|1, "
        "default 1: a learned beta; 0 is torch's LayerNorm(bias=False))",
        "epsilon,scale,shift", 1, 1, false, false, &infer_layer_norm},
    OpTypeInfo{OpType::kRelu, "relu", "max(x, 0)", "none", "", 1, 1, false, false, &infer_relu},
    OpTypeInfo{OpType::kGelu, "gelu", "x * Phi(x): the tanh approximation, or exact (erf)",
               "approximate (tanh|none, default tanh; none is exact, as torch's nn.GELU())",
               "approximate", 1, 1, false, false, &infer_gelu},
    OpTypeInfo{OpType::kSoftmax, "softmax", "softmax over the last dimension", "none", "", 1, 1,
               false, false, &infer_softmax},
    OpTypeInfo{OpType::kSigmoid, "sigmoid", "1 / (1 + exp(-x))", "none", "", 1, 1, false, false,
               &infer_sigmoid},
    OpTypeInfo{OpType::kTanh, "tanh", "tanh(x) (BERT's pooler, gates)", "none", "", 1, 1, false,
               false, &infer_tanh},
    OpTypeInfo{OpType::kClip, "clip", "min(max(x, min), max) (ReLU6 is clip 0..6)",
               "min (float, required, finite), max (float, required, finite, >= min)", "min,max", 1,
               1, false, false, &infer_clip},
    OpTypeInfo{OpType::kMul, "mul", "element-wise product of two tensors of one shape", "none", "",
               2, 2, false, false, &infer_mul},
    OpTypeInfo{OpType::kReduce, "reduce", "sum, mean, max or L2 norm over a set of per-sample axes",
               "axis (int, default -1) or axes (ints: several), mode (sum|mean|max|l2, default "
               "sum), keepdims (0|1, default 1: reduced axes kept with size 1); max splits the "
               "gradient of a tie equally, as PyTorch's amax",
               "axis,axes,mode,keepdims", 1, 1, false, false, &infer_reduce},
    OpTypeInfo{OpType::kBiasAdd, "bias_add",
               "y = x + b with a learned b broadcast over x's leading per-sample axes "
               "(learned position embeddings, unfused biases)",
               "shape (ints, required: b's shape, the trailing dimensions of x)", "shape", 1, 1,
               false, false, &infer_bias_add},
    OpTypeInfo{OpType::kBroadcastParam, "broadcast_param",
               "a learned tensor, the same for every sample (class tokens, learned queries); the "
               "input only sets the batch and gets no gradient",
               "shape (ints, required: the per-sample shape)", "shape", 1, 1, false, false,
               &infer_broadcast_param},
    OpTypeInfo{OpType::kAdd, "add", "element-wise sum of two or more tensors of one shape", "none",
               "", 2, -1, false, false, &infer_add},
    OpTypeInfo{OpType::kConcat, "concat", "concatenate along a per-sample axis",
               "axis (int, default -1: the last)", "axis", 1, -1, false, false, &infer_concat},
    OpTypeInfo{OpType::kSlice, "slice", "x[start:end] along a per-sample axis",
               "axis (int, default -1), start (int, required), end (int, required, exclusive)",
               "axis,start,end", 1, 1, false, false, &infer_slice},
    OpTypeInfo{OpType::kMatmul, "matmul",
               "batched matrix product alpha op(a) [..., m, k] x op(b) [..., k, n] -> [..., m, n]",
               "transpose_a, transpose_b (0|1, default 0: op(x) = x with its last two axes "
               "swapped when 1), alpha (float, default 1, finite); inputs: a, b of one rank >= 2 "
               "with identical leading dimensions",
               "transpose_a,transpose_b,alpha", 2, 2, false, false, &infer_matmul},
    OpTypeInfo{OpType::kScale, "scale", "y = factor * x", "factor (float, required, finite)",
               "factor", 1, 1, false, false, &infer_scale},
    OpTypeInfo{OpType::kTranspose, "transpose",
               "permute the per-sample axes: y.shape[i] = x.shape[perm[i]]; with axis, start and "
               "end, only y[start:end] along that axis of the permuted x",
               "perm (ints, required: a permutation of 0..rank-1 over the per-sample axes); axis, "
               "start, end (ints, optional, all three or none: 0 <= start < end <= the size of "
               "the permuted axis)",
               "perm,axis,start,end", 1, 1, false, false, &infer_transpose},
    OpTypeInfo{OpType::kReshape, "reshape",
               "same elements in the same order under a new per-sample shape",
               "shape (ints, required: per-sample, all > 0, same element count)", "shape", 1, 1,
               false, false, &infer_reshape},
    OpTypeInfo{OpType::kConv2d, "conv2d",
               "2-D convolution (cross-correlation) of x [C, H, W] -> [out, Ho, Wo]",
               "out_channels (int, required), kernel (ints [kh, kw], required), "
               "stride (ints [sh, sw], default [1, 1]), padding (ints [ph, pw], zeros on both "
               "sides, default [0, 0]), bias (0|1, default 1), groups (int, default 1: "
               "divides C and out_channels; C = groups is depthwise)",
               "out_channels,kernel,stride,padding,bias,groups", 1, 1, false, false, &infer_conv2d},
    OpTypeInfo{OpType::kMaxPool2d, "max_pool2d",
               "maximum over each window of x [C, H, W] (padding never wins)",
               "kernel (ints [kh, kw], required), stride (ints, default = kernel), "
               "padding (ints [ph, pw], each < kernel, default [0, 0]), "
               "ceil_mode (0|1, default 0: round the window count up, as PyTorch)",
               "kernel,stride,padding,ceil_mode", 1, 1, false, false, &infer_max_pool2d},
    OpTypeInfo{OpType::kAvgPool2d, "avg_pool2d", "mean over each window of x [C, H, W]",
               "kernel (ints [kh, kw], required), stride (ints, default = kernel), "
               "padding (ints [ph, pw], each < kernel, default [0, 0]), "
               "count_include_pad (0|1, default 1: divide by the window's cells in the padded "
               "image; 0: by its image cells), ceil_mode (0|1, default 0)",
               "kernel,stride,padding,count_include_pad,ceil_mode", 1, 1, false, false,
               &infer_avg_pool2d},
    OpTypeInfo{OpType::kBatchNorm, "batch_norm",
               "normalise each channel (per-sample axis 0) with the micro-batch's statistics "
               "(training mode), then scale and shift",
               "epsilon (float, default 1e-5)", "epsilon", 1, 1, false, false, &infer_batch_norm},
    OpTypeInfo{OpType::kMseLoss, "mse_loss",
               "mean squared error between prediction and target (per sample)",
               "none; inputs: prediction, target", "", 2, 2, false, true, &infer_mse_loss},
    OpTypeInfo{OpType::kSoftmaxCrossEntropy, "softmax_cross_entropy",
               "softmax over the last dimension, then cross-entropy "
               "with int64 class labels (per sample mean)",
               "none; inputs: logits [..., classes], labels [...] int64", "", 2, 2, false, true,
               &infer_softmax_cross_entropy},
    OpTypeInfo{OpType::kUnary, "unary", "an element-wise function of one tensor",
               "fn (neg|exp|log|sqrt|rsqrt|reciprocal|abs|erf|sin|cos|softplus, required)", "fn", 1,
               1, false, false, &infer_unary},
    OpTypeInfo{OpType::kBinary, "binary",
               "an element-wise function of two tensors, broadcast as NumPy over the per-sample "
               "axes (aligned on the trailing axes)",
               "fn (add|sub|mul|div|pow|max|min, required); max and min split the gradient of a "
               "tie equally, as PyTorch",
               "fn", 2, 2, false, false, &infer_binary},
    OpTypeInfo{OpType::kCompare, "compare",
               "an element-wise comparison of two tensors (broadcast as binary): a float mask of "
               "0 and 1, which carries no gradient",
               "fn (eq|ne|lt|le|gt|ge, required)", "fn", 2, 2, false, false, &infer_compare},
    OpTypeInfo{OpType::kWhere, "where",
               "where(condition, a, b): a where the condition is non-zero, else b (all three "
               "broadcast as binary; the condition gets no gradient)",
               "none; inputs: condition (a float tensor: non-zero selects a), a, b", "", 3, 3,
               false, false, &infer_where},
    OpTypeInfo{OpType::kConstant, "constant",
               "the same values for every sample, never trained (causal masks, position ids, "
               "registered buffers); the input only sets the batch and gets no gradient",
               "shape (ints, required: the per-sample shape), dtype (float32|int64, default "
               "float32); the values are param_values['value'] (float32, row-major)",
               "shape,dtype", 1, 1, false, false, &infer_constant},
    OpTypeInfo{OpType::kConvTranspose2d, "conv_transpose2d",
               "transposed 2-D convolution (the gradient of conv2d towards its input) of x "
               "[C, H, W] -> [out, Ho, Wo], Ho = (H - 1) sh - 2 ph + kh + output_padding",
               "out_channels (int, required), kernel (ints [kh, kw], required), stride (ints, "
               "default [1, 1]), padding (ints, default [0, 0]), output_padding (ints, each < "
               "the stride, default [0, 0]), bias (0|1, default 1); weight [C, out, kh, kw] as "
               "PyTorch's ConvTranspose2d (groups 1)",
               "out_channels,kernel,stride,padding,output_padding,bias,groups", 1, 1, false, false,
               &infer_conv_transpose2d},
    OpTypeInfo{OpType::kResize, "resize",
               "resize x [C, H, W] to [C, Ho, Wo] (nn.Upsample, F.interpolate)",
               "size (ints [Ho, Wo], required), mode (nearest|bilinear, default nearest), "
               "align_corners (0|1, bilinear only, default 0)",
               "size,mode,align_corners", 1, 1, false, false, &infer_resize},
    OpTypeInfo{OpType::kGather, "gather",
               "x with per-sample axis `axis` replaced by the constant `indices`: out[..., j, ...] "
               "= x[..., indices[j], ...] (torch.index_select; DLRM's Z[:, li, lj] after a "
               "reshape); the gradient of an index read several times is the sum of its reads",
               "axis (int, default 0), indices (ints, required, non-empty: each in [0, size of "
               "axis), repeats allowed)",
               "axis,indices", 1, 1, false, false, &infer_gather},
    OpTypeInfo{OpType::kCast, "cast",
               "x as another element type: an integer tensor read as float32 numbers (an "
               "attention mask given as int64 0s and 1s), or float32 numbers as int64 ids, "
               "truncated toward zero (position ids computed from ids); no gradient flows "
               "through it",
               "dtype (float32|int64, default float32: the output's type; inputs: x int64 or "
               "int32 for float32, float32 for int64)",
               "dtype", 1, 1, false, false, &infer_cast},
    OpTypeInfo{OpType::kCumSum, "cumsum",
               "cumulative sum along a per-sample axis (torch.cumsum; RoBERTa's position ids "
               "count the ids that are not padding)",
               "axis (int, default -1), exclusive (0|1, default 0; 1: each sum leaves out its "
               "own element), reverse (0|1, default 0; 1: sums from the end of the axis)",
               "axis,exclusive,reverse", 1, 1, false, false, &infer_cumsum},
    OpTypeInfo{OpType::kOpaque, "opaque",
               "an ONNX operator GraphPipe cannot compute, imported for planning only "
               "(no kernel: cannot be trained or profiled)",
               "onnx_type (string, required), forward_flops (float per sample, default: output "
               "elements), param_elements (int, default 0); outputs[0] declares the output",
               "onnx_type,forward_flops,param_elements", 0, -1, false, false, &infer_opaque},
};

// Each entry sits at its id's index: op_type_info is one load, and a new type cannot be added
// out of order.
constexpr bool ids_in_order() {
  for (size_t i = 0; i < kCatalogue.size(); ++i) {
    if (op_type_index(kCatalogue[i].id) != static_cast<int>(i)) return false;
  }
  return kCatalogue.size() == static_cast<size_t>(kNumOpTypes);
}
static_assert(ids_in_order(), "kCatalogue must list every OpType once, in enum order");

const AttrValue* find_attr(const Operator& op, std::string_view name) {
  auto it = op.attrs().find(std::string(name));
  return it == op.attrs().end() ? nullptr : &it->second;
}

std::string attr_label(std::string_view name) { return "attrs." + std::string(name); }

}  // namespace

std::span<const OpTypeInfo> op_catalogue() { return kCatalogue; }

const OpTypeInfo* find_op_type(std::string_view type) {
  for (const auto& info : kCatalogue) {
    if (info.type == type) return &info;
  }
  return nullptr;
}

const OpTypeInfo& op_type_info(OpType type) { return kCatalogue[op_type_index(type)]; }

Status check_attr_names(const Operator& op, const OpTypeInfo& info) {
  std::vector<std::string_view> known;
  for (size_t at = 0; at < info.attr_names.size();) {
    const size_t comma = std::min(info.attr_names.find(',', at), info.attr_names.size());
    known.push_back(info.attr_names.substr(at, comma - at));
    at = comma + 1;
  }
  std::vector<std::string> unknown;
  for (const auto& [name, value] : op.attrs()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) unknown.push_back(name);
  }
  if (unknown.empty()) return ok_status();
  std::sort(unknown.begin(), unknown.end());  // the map's order is unspecified
  std::string names;
  for (const auto& name : unknown) names += (names.empty() ? "attrs." : ", attrs.") + name;
  std::string takes;
  for (const auto& name : known) takes += (takes.empty() ? "" : ", ") + std::string(name);
  return invalid_argument(names + ": unknown attribute" + (unknown.size() > 1 ? "s" : "") + "; " +
                          std::string(info.type) + " takes " +
                          (takes.empty() ? std::string("none") : takes));
}

int64_t dtype_size_bytes(DataType dtype) {
  switch (dtype) {
    case graphpipe::v1::DATA_TYPE_BFLOAT16:
    case graphpipe::v1::DATA_TYPE_FLOAT16:
      return 2;
    case graphpipe::v1::DATA_TYPE_INT64:
      return 8;
    default:
      return 4;  // float32, int32, unspecified (= float32)
  }
}

std::string_view dtype_name(DataType dtype) {
  switch (dtype) {
    case graphpipe::v1::DATA_TYPE_BFLOAT16:
      return "bfloat16";
    case graphpipe::v1::DATA_TYPE_FLOAT16:
      return "float16";
    case graphpipe::v1::DATA_TYPE_INT64:
      return "int64";
    case graphpipe::v1::DATA_TYPE_INT32:
      return "int32";
    default:
      return "float32";
  }
}

Result<DataType> parse_dtype(std::string_view name) {
  if (name == "float32" || name == "float") return graphpipe::v1::DATA_TYPE_FLOAT32;
  if (name == "bfloat16") return graphpipe::v1::DATA_TYPE_BFLOAT16;
  if (name == "float16") return graphpipe::v1::DATA_TYPE_FLOAT16;
  if (name == "int64") return graphpipe::v1::DATA_TYPE_INT64;
  if (name == "int32") return graphpipe::v1::DATA_TYPE_INT32;
  return invalid_argument("unknown dtype '" + std::string(name) +
                          "' (expected float32, bfloat16, float16, int64 or int32)");
}

int64_t num_elements(const TensorSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape()) n *= d;
  return n;
}

int64_t size_bytes(const TensorSpec& spec) {
  return num_elements(spec) * dtype_size_bytes(spec.dtype());
}

bool is_integer(const TensorSpec& spec) {
  return spec.dtype() == graphpipe::v1::DATA_TYPE_INT64 ||
         spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
}

int64_t stored_size_bytes(const TensorSpec& spec) {
  return num_elements(spec) * (is_integer(spec) ? 8 : 4);
}

std::string shape_string(const TensorSpec& spec) {
  std::string s = "[";
  for (int i = 0; i < spec.shape_size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(spec.shape(i));
  }
  s += "] ";
  s += dtype_name(spec.dtype());
  return s;
}

TensorSpec make_spec(std::vector<int64_t> shape, DataType dtype) {
  TensorSpec spec;
  for (int64_t d : shape) spec.add_shape(d);
  spec.set_dtype(dtype);
  return spec;
}

bool same_spec(const TensorSpec& a, const TensorSpec& b) {
  if (a.shape_size() != b.shape_size()) return false;
  for (int i = 0; i < a.shape_size(); ++i) {
    if (a.shape(i) != b.shape(i)) return false;
  }
  return dtype_size_bytes(a.dtype()) == dtype_size_bytes(b.dtype()) &&
         dtype_name(a.dtype()) == dtype_name(b.dtype());
}

Result<int64_t> attr_int(const Operator& op, std::string_view name) {
  const AttrValue* v = find_attr(op, name);
  if (v == nullptr) return invalid_argument(attr_label(name) + ": required attribute is missing");
  if (v->value_case() != AttrValue::kI) {
    return invalid_argument(attr_label(name) + ": expected an integer (field 'i')");
  }
  return v->i();
}

Result<int64_t> attr_int_or(const Operator& op, std::string_view name, int64_t fallback) {
  if (find_attr(op, name) == nullptr) return fallback;
  return attr_int(op, name);
}

Result<double> attr_float(const Operator& op, std::string_view name) {
  if (find_attr(op, name) == nullptr) {
    return invalid_argument(attr_label(name) + ": required attribute is missing");
  }
  return attr_float_or(op, name, 0);
}

Result<double> attr_float_or(const Operator& op, std::string_view name, double fallback) {
  const AttrValue* v = find_attr(op, name);
  if (v == nullptr) return fallback;
  if (v->value_case() == AttrValue::kF) return v->f();
  if (v->value_case() == AttrValue::kI) return static_cast<double>(v->i());
  return invalid_argument(attr_label(name) + ": expected a number (field 'f')");
}

Result<std::string> attr_string_or(const Operator& op, std::string_view name,
                                   std::string_view fallback) {
  const AttrValue* v = find_attr(op, name);
  if (v == nullptr) return std::string(fallback);
  if (v->value_case() != AttrValue::kS) {
    return invalid_argument(attr_label(name) + ": expected a string (field 's')");
  }
  return v->s();
}

Result<std::vector<int64_t>> attr_ints(const Operator& op, std::string_view name) {
  const AttrValue* v = find_attr(op, name);
  if (v == nullptr) return invalid_argument(attr_label(name) + ": required attribute is missing");
  if (v->value_case() != AttrValue::kInts) {
    return invalid_argument(attr_label(name) + ": expected a list of integers (field 'ints')");
  }
  return std::vector<int64_t>(v->ints().values().begin(), v->ints().values().end());
}

void set_attr(Operator& op, std::string_view name, int64_t value) {
  (*op.mutable_attrs())[std::string(name)].set_i(value);
}
void set_attr(Operator& op, std::string_view name, double value) {
  (*op.mutable_attrs())[std::string(name)].set_f(value);
}
void set_attr(Operator& op, std::string_view name, std::string_view value) {
  (*op.mutable_attrs())[std::string(name)].set_s(std::string(value));
}
void set_attr(Operator& op, std::string_view name, const std::vector<int64_t>& values) {
  auto* list = (*op.mutable_attrs())[std::string(name)].mutable_ints();
  list->clear_values();
  for (int64_t v : values) list->add_values(v);
}

namespace detail {

Status require_float(const TensorSpec& spec, int input_index) {
  auto t = spec.dtype();
  if (t == graphpipe::v1::DATA_TYPE_INT64 || t == graphpipe::v1::DATA_TYPE_INT32) {
    return invalid_argument("inputs[" + std::to_string(input_index) +
                            "]: expected a floating-point tensor, got " + shape_string(spec));
  }
  return ok_status();
}

Status require_rank_at_least(const TensorSpec& spec, int rank, int input_index) {
  if (spec.shape_size() < rank) {
    return invalid_argument("inputs[" + std::to_string(input_index) + "]: expected at least " +
                            std::to_string(rank) + " per-sample dimension(s), got " +
                            shape_string(spec));
  }
  return ok_status();
}

Result<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return invalid_argument("attrs.axis = " + std::to_string(axis) + " is out of range for " +
                            std::to_string(rank) + " per-sample dimension(s)");
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Status check_range(int64_t start, int64_t end, int64_t size, const std::string& axis_name) {
  if (start >= 0 && end <= size && start < end) return ok_status();
  return invalid_argument(
      "attrs.start = " + std::to_string(start) + ", attrs.end = " + std::to_string(end) +
      ": need 0 <= start < end <= " + std::to_string(size) + " (size of " + axis_name + ")");
}

std::string ints_string(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

Status positive(std::string_view attr, int64_t value) {
  if (value > 0) return ok_status();
  return invalid_argument("attrs." + std::string(attr) + " = " + std::to_string(value) +
                          ", must be > 0");
}

Status boolean(std::string_view attr, int64_t value) {
  if (value == 0 || value == 1) return ok_status();
  return invalid_argument("attrs." + std::string(attr) + " = " + std::to_string(value) +
                          ", must be 0 or 1");
}

void sum_params(InferredOp* out) {
  out->cost.param_count = 0;
  for (const auto& p : out->params) out->cost.param_count += param_elements(p);
}

ParamSpec make_param(std::string name, std::vector<int64_t> shape, DataType dtype) {
  ParamSpec p;
  p.set_name(std::move(name));
  for (int64_t d : shape) p.add_shape(d);
  p.set_dtype(dtype);
  return p;
}

int64_t param_elements(const ParamSpec& p) {
  int64_t n = 1;
  for (int64_t d : p.shape()) n *= d;
  return n;
}

}  // namespace detail
}  // namespace gp::model
