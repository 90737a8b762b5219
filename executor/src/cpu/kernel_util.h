// Shared helpers of the CPU reference kernels (private to gp_cpu).
#pragma once

#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "device_api/kernel_common.h"
#include "gp/common/status.h"
#include "gp/exec/op_kernel.h"
#include "gp/model/graph.h"

namespace gp::exec::cpu {

using KernelResult = Result<std::unique_ptr<OpKernel>>;
using gp::exec::dims_product;
using gp::exec::is_int32;
using gp::exec::last_dim;
using gp::exec::load_index;
using gp::exec::op_attrs;
using gp::exec::op_error;

// Row-major C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, with leading dimensions
// (row strides) lda, ldb, ldc of the matrices as stored. Callers are kernels, made by
// make_cpu_kernel after use_best_blas_kernels() chose OpenBLAS's kernels.
inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// Factories, one per op family (dense_kernels.cc, simple_kernels.cc, layout_kernels.cc,
// vision_kernels.cc). Each reads the op's attributes and shapes once.
KernelResult make_linear(const model::OpNode& op);
KernelResult make_embedding_bag(const model::OpNode& op);
KernelResult make_attention(const model::OpNode& op);
KernelResult make_input(const model::OpNode& op);
KernelResult make_relu(const model::OpNode& op);
KernelResult make_gelu(const model::OpNode& op);
KernelResult make_softmax(const model::OpNode& op);
KernelResult make_layer_norm(const model::OpNode& op);
KernelResult make_add(const model::OpNode& op);
KernelResult make_concat(const model::OpNode& op);
KernelResult make_slice(const model::OpNode& op);
KernelResult make_mse_loss(const model::OpNode& op);
KernelResult make_softmax_cross_entropy(const model::OpNode& op);
KernelResult make_matmul(const model::OpNode& op);
KernelResult make_scale(const model::OpNode& op);
KernelResult make_transpose(const model::OpNode& op);
KernelResult make_reshape(const model::OpNode& op);
KernelResult make_conv2d(const model::OpNode& op);
KernelResult make_max_pool2d(const model::OpNode& op);
KernelResult make_avg_pool2d(const model::OpNode& op);
KernelResult make_batch_norm(const model::OpNode& op);
KernelResult make_sigmoid(const model::OpNode& op);          // pointwise_kernels.cc
KernelResult make_tanh(const model::OpNode& op);             // pointwise_kernels.cc
KernelResult make_broadcast_param(const model::OpNode& op);  // pointwise_kernels.cc
KernelResult make_clip(const model::OpNode& op);
KernelResult make_mul(const model::OpNode& op);
KernelResult make_reduce(const model::OpNode& op);
KernelResult make_bias_add(const model::OpNode& op);
// general_kernels.cc: the general element-wise ops, constants, and reduce beyond one-axis sum and
// mean (make_reduce hands those to make_general_reduce).
KernelResult make_unary(const model::OpNode& op);
KernelResult make_binary(const model::OpNode& op);
KernelResult make_compare(const model::OpNode& op);
KernelResult make_where(const model::OpNode& op);
KernelResult make_constant(const model::OpNode& op);
KernelResult make_general_reduce(const model::OpNode& op);
KernelResult make_cast(const model::OpNode& op);
KernelResult make_gather(const model::OpNode& op);  // constant indices along an axis
KernelResult make_cumsum(const model::OpNode& op);

// upsample_kernels.cc: conv_transpose2d and resize.
KernelResult make_conv_transpose2d(const model::OpNode& op);
KernelResult make_resize(const model::OpNode& op);

// True when the CPU has a kernel for every op of the type (cpu_kernels.cc's table).
bool has_kernel(model::OpType type);

}  // namespace gp::exec::cpu
