// CUDA kernel factories, one per op family (dense_kernels.cc, simple_kernels.cc,
// pointwise_kernels.cc, general_kernels.cc, vision_kernels.cc, upsample_kernels.cc). Each mirrors
// the CPU reference kernel of the same op (executor/src/cpu/): same attributes, same memory
// contract (op_kernel.h), with device pointers.
// Launch functions of the __global__ kernels are declared in the family's *_launch.h with plain
// types.
#pragma once

#include <memory>

#include "cuda/cuda_context.h"
#include "device_api/kernel_common.h"
#include "gp/exec/op_kernel.h"
#include "gp/model/graph.h"

namespace gp::exec::cuda {

using KernelResult = Result<std::unique_ptr<OpKernel>>;

// `ctx` outlives every kernel made with it (devices live until the process exits).
KernelResult make_linear(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_embedding_bag(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_attention(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_layer_norm(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_matmul(const model::OpNode& op, const CudaContext& ctx);

KernelResult make_input(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_relu(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_gelu(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_softmax(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_add(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_concat(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_slice(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_mse_loss(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_softmax_cross_entropy(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_scale(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_transpose(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_reshape(const model::OpNode& op, const CudaContext& ctx);

KernelResult make_sigmoid(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_tanh(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_broadcast_param(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_clip(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_mul(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_reduce(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_bias_add(const model::OpNode& op, const CudaContext& ctx);

KernelResult make_unary(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_binary(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_compare(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_where(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_constant(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_gather(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_cast(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_cumsum(const model::OpNode& op, const CudaContext& ctx);
// reduce: make_reduce's kernel for one axis summed or averaged, else the general one.
KernelResult make_reduce_axes(const model::OpNode& op, const CudaContext& ctx);

KernelResult make_conv2d(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_max_pool2d(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_avg_pool2d(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_batch_norm(const model::OpNode& op, const CudaContext& ctx);

KernelResult make_conv_transpose2d(const model::OpNode& op, const CudaContext& ctx);
KernelResult make_resize(const model::OpNode& op, const CudaContext& ctx);

// True when CUDA has a kernel for every op of the type (cuda_device.cc's table).
bool has_kernel(model::OpType type);

}  // namespace gp::exec::cuda
