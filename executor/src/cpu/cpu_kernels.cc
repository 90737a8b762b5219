// make_cpu_kernel: maps an op type to its CPU reference kernel.
#include <array>
#include <string>
#include <string_view>

#include "cpu/kernel_util.h"

namespace gp::exec {
namespace {

enum class Kind {
  kUnknown,
  kInput,
  kLinear,
  kEmbeddingBag,
  kAttention,
  kLayerNorm,
  kRelu,
  kGelu,
  kSoftmax,
  kAdd,
  kConcat,
  kSlice,
  kMseLoss,
  kSoftmaxCrossEntropy,
  kMatmul,
  kScale,
  kTranspose,
  kReshape,
  kConv2d,
  kMaxPool2d,
  kAvgPool2d,
  kBatchNorm,
  kSigmoid,
  kTanh,
  kBroadcastParam,
  kClip,
  kMul,
  kReduce,
  kBiasAdd,
  kEmbedding,
  kOpaque,
};

struct KindName {
  std::string_view type;
  Kind kind;
};

constexpr std::array kKinds = {
    KindName{"input", Kind::kInput},
    KindName{"linear", Kind::kLinear},
    KindName{"embedding_bag", Kind::kEmbeddingBag},
    KindName{"multi_head_attention", Kind::kAttention},
    KindName{"layer_norm", Kind::kLayerNorm},
    KindName{"relu", Kind::kRelu},
    KindName{"gelu", Kind::kGelu},
    KindName{"softmax", Kind::kSoftmax},
    KindName{"add", Kind::kAdd},
    KindName{"concat", Kind::kConcat},
    KindName{"slice", Kind::kSlice},
    KindName{"mse_loss", Kind::kMseLoss},
    KindName{"softmax_cross_entropy", Kind::kSoftmaxCrossEntropy},
    KindName{"matmul", Kind::kMatmul},
    KindName{"scale", Kind::kScale},
    KindName{"transpose", Kind::kTranspose},
    KindName{"reshape", Kind::kReshape},
    KindName{"conv2d", Kind::kConv2d},
    KindName{"max_pool2d", Kind::kMaxPool2d},
    KindName{"avg_pool2d", Kind::kAvgPool2d},
    KindName{"batch_norm", Kind::kBatchNorm},
    KindName{"sigmoid", Kind::kSigmoid},
    KindName{"tanh", Kind::kTanh},
    KindName{"broadcast_param", Kind::kBroadcastParam},
    KindName{"clip", Kind::kClip},
    KindName{"mul", Kind::kMul},
    KindName{"reduce", Kind::kReduce},
    KindName{"bias_add", Kind::kBiasAdd},
    KindName{"embedding", Kind::kEmbedding},
    KindName{"opaque", Kind::kOpaque},
};

Kind kind_of(std::string_view type) {
  for (const auto& k : kKinds) {
    if (k.type == type) return k.kind;
  }
  return Kind::kUnknown;
}

}  // namespace

Result<std::unique_ptr<OpKernel>> make_cpu_kernel(const graph::OpNode& op) {
  if (op.proto == nullptr) return invalid_argument("make_cpu_kernel: op has no proto");
  // The proto's type, not op.type(): an op that never went through Graph::build has no info.
  const Kind kind = kind_of(op.proto->type());
  if (kind == Kind::kUnknown) {
    return cpu::op_error(op, "no CPU kernel for op type '" + op.proto->type() + "'");
  }
  if (kind == Kind::kOpaque) {
    const auto* opaque = std::get_if<graph::OpaqueAttrs>(&op.attrs);
    const std::string name = opaque != nullptr ? opaque->onnx_type : "(unnamed)";
    return cpu::op_error(op, "ONNX operator " + name +
                                 " was imported as opaque (--allow-opaque) for planning only; it "
                                 "has no kernel and cannot be trained or profiled");
  }
  // The kernels read shapes from shape inference; refuse an op that has not been through it.
  if (op.info == nullptr || static_cast<int>(op.input_specs.size()) != op.proto->inputs_size() ||
      op.proto->outputs_size() != 1) {
    return cpu::op_error(op, "not a validated graph op (build it with graph::Graph::build)");
  }
  switch (kind) {
    case Kind::kInput:
      return cpu::make_input(op);
    case Kind::kLinear:
      return cpu::make_linear(op);
    case Kind::kEmbeddingBag:
      return cpu::make_embedding_bag(op);
    case Kind::kAttention:
      return cpu::make_attention(op);
    case Kind::kLayerNorm:
      return cpu::make_layer_norm(op);
    case Kind::kRelu:
      return cpu::make_relu(op);
    case Kind::kGelu:
      return cpu::make_gelu(op);
    case Kind::kSoftmax:
      return cpu::make_softmax(op);
    case Kind::kAdd:
      return cpu::make_add(op);
    case Kind::kConcat:
      return cpu::make_concat(op);
    case Kind::kSlice:
      return cpu::make_slice(op);
    case Kind::kMseLoss:
      return cpu::make_mse_loss(op);
    case Kind::kSoftmaxCrossEntropy:
      return cpu::make_softmax_cross_entropy(op);
    case Kind::kMatmul:
      return cpu::make_matmul(op);
    case Kind::kScale:
      return cpu::make_scale(op);
    case Kind::kTranspose:
      return cpu::make_transpose(op);
    case Kind::kReshape:
      return cpu::make_reshape(op);
    case Kind::kConv2d:
      return cpu::make_conv2d(op);
    case Kind::kMaxPool2d:
      return cpu::make_max_pool2d(op);
    case Kind::kAvgPool2d:
      return cpu::make_avg_pool2d(op);
    case Kind::kBatchNorm:
      return cpu::make_batch_norm(op);
    case Kind::kSigmoid:
      return cpu::make_sigmoid(op);
    case Kind::kTanh:
      return cpu::make_tanh(op);
    case Kind::kBroadcastParam:
      return cpu::make_broadcast_param(op);
    case Kind::kClip:
      return cpu::make_clip(op);
    case Kind::kMul:
      return cpu::make_mul(op);
    case Kind::kReduce:
      return cpu::make_reduce(op);
    case Kind::kBiasAdd:
      return cpu::make_bias_add(op);
    case Kind::kEmbedding:
      return cpu::make_embedding_bag(op);  // a bag of one per id
    case Kind::kOpaque:
    case Kind::kUnknown:
      break;
  }
  return cpu::op_error(op, "no CPU kernel for op type '" + op.proto->type() + "'");
}

}  // namespace gp::exec
