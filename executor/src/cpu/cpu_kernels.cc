// make_cpu_kernel: the CPU backend's kernel table, indexed by the op's catalogue type id.
#include <string>

#include "cpu/kernel_util.h"
#include "device_api/kernel_table.h"
#include "gp/exec/device.h"

namespace gp::exec {
namespace {

using model::OpType;
using Factory = cpu::KernelResult (*)(const model::OpNode&);

// Every trainable catalogue type; opaque ops (imported for planning only) have no kernel.
constexpr KernelTable<Factory> kKernels = kernel_table<Factory>({
    {OpType::kInput, &cpu::make_input},
    {OpType::kLinear, &cpu::make_linear},
    {OpType::kEmbeddingBag, &cpu::make_embedding_bag},
    {OpType::kEmbedding, &cpu::make_embedding_bag},  // a bag of one per id
    {OpType::kAttention, &cpu::make_attention},
    {OpType::kLayerNorm, &cpu::make_layer_norm},
    {OpType::kRelu, &cpu::make_relu},
    {OpType::kGelu, &cpu::make_gelu},
    {OpType::kSoftmax, &cpu::make_softmax},
    {OpType::kSigmoid, &cpu::make_sigmoid},
    {OpType::kTanh, &cpu::make_tanh},
    {OpType::kClip, &cpu::make_clip},
    {OpType::kMul, &cpu::make_mul},
    {OpType::kReduce, &cpu::make_reduce},
    {OpType::kBiasAdd, &cpu::make_bias_add},
    {OpType::kBroadcastParam, &cpu::make_broadcast_param},
    {OpType::kAdd, &cpu::make_add},
    {OpType::kConcat, &cpu::make_concat},
    {OpType::kSlice, &cpu::make_slice},
    {OpType::kMatmul, &cpu::make_matmul},
    {OpType::kScale, &cpu::make_scale},
    {OpType::kTranspose, &cpu::make_transpose},
    {OpType::kReshape, &cpu::make_reshape},
    {OpType::kConv2d, &cpu::make_conv2d},
    {OpType::kMaxPool2d, &cpu::make_max_pool2d},
    {OpType::kAvgPool2d, &cpu::make_avg_pool2d},
    {OpType::kBatchNorm, &cpu::make_batch_norm},
    {OpType::kMseLoss, &cpu::make_mse_loss},
    {OpType::kSoftmaxCrossEntropy, &cpu::make_softmax_cross_entropy},
    {OpType::kConvTranspose2d, &cpu::make_conv_transpose2d},
    {OpType::kResize, &cpu::make_resize},
    {OpType::kUnary, &cpu::make_unary},
    {OpType::kBinary, &cpu::make_binary},
    {OpType::kCompare, &cpu::make_compare},
    {OpType::kWhere, &cpu::make_where},
    {OpType::kConstant, &cpu::make_constant},
    {OpType::kGather, &cpu::make_gather},
    {OpType::kCast, &cpu::make_cast},
    {OpType::kCumSum, &cpu::make_cumsum},
});

}  // namespace

namespace cpu {

bool has_kernel(model::OpType type) { return kKernels[model::op_type_index(type)] != nullptr; }

}  // namespace cpu

Result<std::unique_ptr<OpKernel>> make_cpu_kernel(const model::OpNode& op) {
  if (op.proto == nullptr) return invalid_argument("make_cpu_kernel: op has no proto");
  use_best_blas_kernels();  // before a kernel exists, so every GEMM of the process runs the same
  const model::OpTypeInfo* info = catalogue_entry(op);
  if (info == nullptr) {
    return cpu::op_error(op, "no CPU kernel for op type '" + op.proto->type() + "'");
  }
  if (info->id == OpType::kOpaque) {
    const auto* opaque = std::get_if<model::OpaqueAttrs>(&op.attrs);
    const std::string name = opaque != nullptr ? opaque->onnx_type : "(unnamed)";
    return cpu::op_error(op, "ONNX operator " + name +
                                 " was imported as opaque (--allow-opaque) for planning only; it "
                                 "has no kernel and cannot be trained or profiled");
  }
  // The kernels read shapes from shape inference; refuse an op that has not been through it.
  if (op.info == nullptr || static_cast<int>(op.input_specs.size()) != op.proto->inputs_size() ||
      op.proto->outputs_size() != 1) {
    return cpu::op_error(op, "not a validated graph op (build it with model::Graph::build)");
  }
  const Factory make = kKernels[model::op_type_index(op.op_type())];
  if (make == nullptr) {
    return cpu::op_error(op, "no CPU kernel for op type '" + op.proto->type() + "'");
  }
  return make(op);
}

}  // namespace gp::exec
