#pragma once
#include "cuda_runtime_api.h"
// As in the real header: the backend opens cuBLAS at run time and looks these names up
// (dlsym), so they have C linkage and the test binary exports them (-rdynamic).
#define CUBLAS_VER_MAJOR 13
#define cublasCreate cublasCreate_v2
#define cublasSetStream cublasSetStream_v2
typedef struct cublasContext* cublasHandle_t;
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0 } cudaDataType;
typedef enum {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
extern "C" {
const char* cublasGetStatusName(cublasStatus_t);
const char* cublasGetStatusString(cublasStatus_t);
cublasStatus_t cublasCreate(cublasHandle_t*);
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t);
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType, int lda,
                            const void* B, cudaDataType, int ldb, const void* beta, void* C,
                            cudaDataType, int ldc, cublasComputeType_t, cublasGemmAlgo_t);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                          int m, int n, int k, const void* alpha, const void* A,
                                          cudaDataType, int lda, long long sA, const void* B,
                                          cudaDataType, int ldb, long long sB, const void* beta,
                                          void* C, cudaDataType, int ldc, long long sC, int count,
                                          cublasComputeType_t, cublasGemmAlgo_t);
}  // extern "C"
