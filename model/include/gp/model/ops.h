// The operator catalogue: for every op type, shape inference, parameters and per-sample costs.
//
// Every number here is PER SAMPLE unless its name says "fixed" (paid once per kernel call,
// whatever the micro-batch size, e.g. reading a weight matrix). FLOPs count a multiply-add as 2.
// The catalogue is immutable after static initialisation and safe to read from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/op_attrs.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::model {

using ::graphpipe::v1::AttrValue;
using ::graphpipe::v1::DataType;
using ::graphpipe::v1::ModelGraph;
using ::graphpipe::v1::Operator;
using ::graphpipe::v1::ParamSpec;
using ::graphpipe::v1::TensorRef;
using ::graphpipe::v1::TensorSpec;

// Costs of one operator, per sample unless named "fixed".
struct OpCost {
  double forward_flops = 0;
  double backward_flops = 0;        // input gradients + parameter gradients
  double forward_bytes = 0;         // activations read + written in forward
  double backward_bytes = 0;        // activations and gradients read + written in backward
  double forward_fixed_bytes = 0;   // per call: parameters read in forward
  double backward_fixed_bytes = 0;  // per call: parameters read, parameter gradients written
  // Memory, per sample as the executor stores tensors (floats 4 bytes, ids 8; see
  // stored_size_bytes): what the op's kernels keep from forward until backward beyond its outputs
  // (the most any backend keeps), and what they use during one call only.
  double saved_bytes = 0;
  double workspace_bytes = 0;
  // Kept from forward until backward for this op: its outputs plus saved_bytes (set by Graph).
  double activation_bytes = 0;
  int64_t param_count = 0;   // trainable elements (whole op, not per sample)
  int forward_kernels = 0;   // kernel launches per forward call
  int backward_kernels = 0;  // kernel launches per backward call
};

// What shape inference produces for one operator.
struct InferredOp {
  std::vector<TensorSpec> outputs;
  std::vector<ParamSpec> params;
  OpCost cost;
  OpAttrs attrs;  // the op's attributes, decoded and checked (NoAttrs for ops without any)
  // Values the op reads that are not trained (a constant's "value"): like params, they may be
  // given in Operator.param_values, and the optimizer never sees them.
  std::vector<ParamSpec> buffers;
};

using InferFn = Status (*)(const Operator& op, std::span<const TensorSpec> inputs, InferredOp* out);

// Every op type of the catalogue, in catalogue order. Graph::build resolves each op's type name
// to its id once (OpNode::op_type()); backends index their kernel tables by it. Names and ids
// meet in the catalogue alone (find_op_type, op_type_info).
enum class OpType : uint8_t {
  kInput,
  kLinear,
  kEmbeddingBag,
  kEmbedding,
  kAttention,  // "multi_head_attention"
  kLayerNorm,
  kRelu,
  kGelu,
  kSoftmax,
  kSigmoid,
  kTanh,
  kClip,
  kMul,
  kReduce,
  kBiasAdd,
  kBroadcastParam,
  kAdd,
  kConcat,
  kSlice,
  kMatmul,
  kScale,
  kTranspose,
  kReshape,
  kConv2d,
  kMaxPool2d,
  kAvgPool2d,
  kBatchNorm,
  kMseLoss,
  kSoftmaxCrossEntropy,
  kUnary,
  kBinary,
  kCompare,
  kWhere,
  kConstant,
  kConvTranspose2d,
  kResize,
  kGather,
  kCast,
  kCumSum,
  kOpaque,
};
inline constexpr int kNumOpTypes = static_cast<int>(OpType::kOpaque) + 1;
// The id as an index into a table of kNumOpTypes entries.
constexpr int op_type_index(OpType type) { return static_cast<int>(type); }

struct OpTypeInfo {
  OpType id;
  std::string_view type;        // "linear"
  std::string_view summary;     // one line for `zoo list` and docs
  std::string_view attrs_help;  // "out_features (int, required), bias (0|1, default 1), ..."
  std::string_view attr_names;  // every attribute it reads: "out_features,bias,activation"
  int min_inputs;
  int max_inputs;  // -1: unbounded
  bool is_input;   // a graph input: outputs declared, no inputs
  bool is_loss;    // produces a per-sample scalar that training minimises
  InferFn infer;
};

// Every op type, in catalogue order.
std::span<const OpTypeInfo> op_catalogue();
// nullptr when the type is unknown.
const OpTypeInfo* find_op_type(std::string_view type);
// The catalogue entry of an id.
const OpTypeInfo& op_type_info(OpType type);
// An op whose attrs include a name its type does not read is refused (a misspelling such as
// "strides" would otherwise silently mean the default), naming every such attribute and the
// ones the type takes: "attrs.strides: unknown attribute; conv2d takes out_channels, kernel,
// stride, padding, bias, groups".
Status check_attr_names(const Operator& op, const OpTypeInfo& info);

// ---- tensor helpers ------------------------------------------------------------------------
int64_t dtype_size_bytes(DataType dtype);  // UNSPECIFIED counts as float32
std::string_view dtype_name(DataType dtype);
Result<DataType> parse_dtype(std::string_view name);  // "float32", "int64", ...
int64_t num_elements(const TensorSpec& spec);
int64_t size_bytes(const TensorSpec& spec);
// Integer tensors (ids, offsets) carry no gradients and are stored as int64.
bool is_integer(const TensorSpec& spec);
// Bytes as the executor stores the tensor: integer tensors as int64, all others as float32.
int64_t stored_size_bytes(const TensorSpec& spec);
std::string shape_string(const TensorSpec& spec);  // "[256, 1024] float32"
TensorSpec make_spec(std::vector<int64_t> shape, DataType dtype = graphpipe::v1::DATA_TYPE_FLOAT32);
bool same_spec(const TensorSpec& a, const TensorSpec& b);  // shapes equal, dtypes equal

// ---- attribute helpers (errors name the attribute and the value) ---------------------------
Result<int64_t> attr_int(const Operator& op, std::string_view name);
Result<int64_t> attr_int_or(const Operator& op, std::string_view name, int64_t fallback);
Result<double> attr_float(const Operator& op, std::string_view name);  // 'f' (or 'i')
Result<double> attr_float_or(const Operator& op, std::string_view name, double fallback);
Result<std::string> attr_string_or(const Operator& op, std::string_view name,
                                   std::string_view fallback);
Result<std::vector<int64_t>> attr_ints(const Operator& op, std::string_view name);

void set_attr(Operator& op, std::string_view name, int64_t value);
void set_attr(Operator& op, std::string_view name, double value);
void set_attr(Operator& op, std::string_view name, std::string_view value);
void set_attr(Operator& op, std::string_view name, const std::vector<int64_t>& values);

}  // namespace gp::model
