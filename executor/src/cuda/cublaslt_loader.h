// cuBLASLt entry points (GEMMs with fused epilogues), loaded when the first CUDA device is opened,
// like cuBLAS (cublas_loader.h).
#pragma once

#include <cublasLt.h>

#include "gp/common/status.h"

namespace gp::exec::cuda {

struct CublasLtApi {
  cublasStatus_t (*create)(cublasLtHandle_t*);
  cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*,
                             size_t);
  cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t,
                                  int64_t);
  cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*preference_create)(cublasLtMatmulPreference_t*);
  cublasStatus_t (*preference_destroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*preference_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                   const void*, size_t);
  cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                              cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                              cublasLtMatmulHeuristicResult_t[], int*);
  cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*,
                           cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t, const void*,
                           const void*, cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
                           const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t);
  const char* (*status_name)(cublasStatus_t);
};

// Loaded once (thread-safe); Unavailable naming the library when it is missing.
Result<const CublasLtApi*> load_cublaslt();

}  // namespace gp::exec::cuda
