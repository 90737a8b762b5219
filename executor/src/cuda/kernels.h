// CUDA kernel factories, one per op family (dense_kernels.cc, simple_kernels.cc,
// pointwise_kernels.cc, vision_kernels.cc). Each mirrors the CPU reference kernel of the same op
// (executor/src/cpu/): same attributes, same memory contract (op_kernel.h), with device pointers.
// Launch functions of the __global__ kernels are declared in the family's *_launch.h with plain
// types.
#pragma once

#include <memory>

#include "cuda/cuda_context.h"
#include "gp/exec/op_kernel.h"
#include "gp/graph/graph.h"
#include "kernel_common.h"

namespace gp::exec::cuda {

using KernelResult = Result<std::unique_ptr<OpKernel>>;

// `ctx` outlives every kernel made with it (devices live until the process exits).
KernelResult make_linear(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_embedding_bag(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_attention(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_layer_norm(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_matmul(const graph::OpNode& op, const CudaContext& ctx);

KernelResult make_input(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_relu(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_gelu(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_softmax(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_add(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_concat(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_slice(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_mse_loss(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_softmax_cross_entropy(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_scale(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_transpose(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_reshape(const graph::OpNode& op, const CudaContext& ctx);

KernelResult make_sigmoid(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_tanh(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_broadcast_param(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_clip(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_mul(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_reduce(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_bias_add(const graph::OpNode& op, const CudaContext& ctx);

KernelResult make_conv2d(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_max_pool2d(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_avg_pool2d(const graph::OpNode& op, const CudaContext& ctx);
KernelResult make_batch_norm(const graph::OpNode& op, const CudaContext& ctx);

// True when CUDA has a kernel for every op of the type (cuda_device.cc's table).
bool has_kernel(graph::OpType type);

}  // namespace gp::exec::cuda
