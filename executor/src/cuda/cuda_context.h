// What every CUDA kernel of one device shares: the compute stream all work is queued on, the
// cuBLAS handle bound to it, the vendor libraries in use (cuBLASLt, cuDNN), the GEMM precision, and
// the first error of asynchronous work. Private to the CUDA backend: host code (.cc, compiled by
// the C++ compiler) uses the CUDA runtime and cuBLAS C APIs directly; __global__ kernels live in
// .cu files behind plain launch functions.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "cuda/cublas_loader.h"
#include "cuda/cublaslt_loader.h"
#include "cuda/cudnn_loader.h"
#include "gp/common/status.h"
#include "gp/exec/device.h"

namespace gp::exec::cuda {

class CudaContext {
 public:
  int device_index = 0;
  cudaStream_t stream = nullptr;      // the compute stream
  const CublasApi* cublas = nullptr;  // loaded at open
  cublasHandle_t blas = nullptr;
  // Vendor libraries for kernels that have a library form; null where the hand-written kernels
  // are used instead (GP_CUDA_KERNELS=hand, or the library could not be loaded).
  const CublasLtApi* cublaslt = nullptr;
  cublasLtHandle_t lt = nullptr;
  const CudnnApi* cudnn = nullptr;
  cudnnHandle_t dnn = nullptr;
  MatmulPrecision precision = MatmulPrecision::kFp32;

  // Kernels' forward/backward return nothing, so failures of launches and library calls are
  // recorded here (the first one wins) and reported by Device::synchronize(). Return ok-ness.
  bool check(cudaError_t e, const char* what) const;
  bool check(cublasStatus_t s, const char* what) const;
  bool check(cudnnStatus_t s, const char* what) const;
  // The first recorded error (cleared), or OK.
  Status take_error() const;

  // Held around every cuBLASLt and cuDNN call and their plan caches: ranks running as threads
  // share a device, and cuDNN forbids using one handle from two threads at once.
  std::mutex& library_mutex() const { return library_mutex_; }

 private:
  mutable std::mutex library_mutex_;
  mutable std::mutex mutex_;
  mutable std::string first_error_;
};

// The cuBLAS compute type of a GEMM precision (fp32 accumulation always).
cublasComputeType_t compute_type(MatmulPrecision p);

// Row-major C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C with row strides lda, ldb,
// ldc as stored: the same contract as the CPU kernels' cpu::gemm, on ctx.stream at ctx.precision
// (fp32 accumulation always). Failures are recorded in ctx under `what`.
void gemm(const CudaContext& ctx, const char* what, bool trans_a, bool trans_b, int64_t m,
          int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc);

// `count` independent GEMMs as above; matrix i of A starts at a + i * stride_a (likewise B, C).
void gemm_batched(const CudaContext& ctx, const char* what, bool trans_a, bool trans_b, int64_t m,
                  int64_t n, int64_t k, float alpha, const float* a, int64_t lda, int64_t stride_a,
                  const float* b, int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                  int64_t stride_c, int64_t count);

// Threads per block and a grid covering n elements (grid-stride loops cover the rest).
inline constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

}  // namespace gp::exec::cuda
