#include "cuda/cuda_context.h"

#include <limits>

namespace gp::exec::cuda {
namespace {

bool fits_int(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace

cublasComputeType_t compute_type(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MatmulPrecision::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case MatmulPrecision::kFp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

bool CudaContext::check(cudaError_t e, const char* what) const {
  if (e == cudaSuccess) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_error_.empty()) {
    first_error_ =
        std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  }
  return false;
}

bool CudaContext::check(cublasStatus_t s, const char* what) const {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_error_.empty()) {
    first_error_ = std::string(what) + ": cuBLAS " +
                   (cublas != nullptr ? std::string(cublas->status_name(s)) + " (" +
                                            cublas->status_string(s) + ")"
                                      : "status " + std::to_string(static_cast<int>(s)));
  }
  return false;
}

bool CudaContext::check(cudnnStatus_t s, const char* what) const {
  if (s == CUDNN_STATUS_SUCCESS) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_error_.empty()) {
    first_error_ = std::string(what) + ": cuDNN " +
                   (cudnn != nullptr ? std::string(cudnn->error_string(s))
                                     : "status " + std::to_string(static_cast<int>(s)));
  }
  return false;
}

Status CudaContext::take_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_error_.empty()) return ok_status();
  Status s = internal_error("cuda:" + std::to_string(device_index) + ": " + first_error_);
  first_error_.clear();
  return s;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
void gemm(const CudaContext& ctx, const char* what, bool trans_a, bool trans_b, int64_t m,
          int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
      !fits_int(ldc)) {
    ctx.check(CUBLAS_STATUS_INVALID_VALUE, what);
    return;
  }
  ctx.check(ctx.cublas->gemm_ex(ctx.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_32F,
                                static_cast<int>(ldb), a, CUDA_R_32F, static_cast<int>(lda), &beta,
                                c, CUDA_R_32F, static_cast<int>(ldc), compute_type(ctx.precision),
                                CUBLAS_GEMM_DEFAULT),
            what);
}

void gemm_batched(const CudaContext& ctx, const char* what, bool trans_a, bool trans_b, int64_t m,
                  int64_t n, int64_t k, float alpha, const float* a, int64_t lda, int64_t stride_a,
                  const float* b, int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                  int64_t stride_c, int64_t count) {
  if (m == 0 || n == 0 || count == 0) return;
  if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
      !fits_int(ldc) || !fits_int(count)) {
    ctx.check(CUBLAS_STATUS_INVALID_VALUE, what);
    return;
  }
  ctx.check(ctx.cublas->gemm_strided_batched_ex(
                ctx.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                CUDA_R_32F, static_cast<int>(ldb), stride_b, a, CUDA_R_32F, static_cast<int>(lda),
                stride_a, &beta, c, CUDA_R_32F, static_cast<int>(ldc), stride_c,
                static_cast<int>(count), compute_type(ctx.precision), CUBLAS_GEMM_DEFAULT),
            what);
}

}  // namespace gp::exec::cuda
