// cuBLAS entry points, loaded when the first CUDA device is opened. Linking cuBLAS would load its
// ~600 MB of libraries into every process at start (~0.6 s), CPU-only runs included.
#pragma once

#include <cublas_v2.h>

#include "gp/common/status.h"

namespace gp::exec::cuda {

struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void*, const void*, cudaDataType,
                                            int, long long, const void*, cudaDataType, int,
                                            long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  const char* (*status_name)(cublasStatus_t);
  const char* (*status_string)(cublasStatus_t);
};

// Loaded once (thread-safe). Symbols already in the process (linked in) are used as they are;
// otherwise libcublas.so.<major> is opened. Unavailable naming the library when it is missing.
Result<const CublasApi*> load_cublas();

}  // namespace gp::exec::cuda
