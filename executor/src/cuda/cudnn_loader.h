// cuDNN entry points (convolution, pooling, batch normalisation; the legacy API, which cuDNN 9
// still ships), loaded when the first CUDA device is opened, like cuBLAS (cublas_loader.h).
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <string>

#include "gp/common/status.h"

namespace gp::exec::cuda {

struct CudnnApi {
  using Tensor = cudnnTensorDescriptor_t;
  using Filter = cudnnFilterDescriptor_t;
  using Conv = cudnnConvolutionDescriptor_t;
  using Pool = cudnnPoolingDescriptor_t;

  size_t (*version)();
  const char* (*error_string)(cudnnStatus_t);
  cudnnStatus_t (*create)(cudnnHandle_t*);
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
  cudnnStatus_t (*create_tensor)(Tensor*);
  cudnnStatus_t (*set_tensor_4d)(Tensor, cudnnTensorFormat_t, cudnnDataType_t, int, int, int, int);
  cudnnStatus_t (*destroy_tensor)(Tensor);
  cudnnStatus_t (*create_filter)(Filter*);
  cudnnStatus_t (*set_filter_4d)(Filter, cudnnDataType_t, cudnnTensorFormat_t, int, int, int, int);
  cudnnStatus_t (*destroy_filter)(Filter);
  cudnnStatus_t (*create_conv)(Conv*);
  cudnnStatus_t (*set_conv_2d)(Conv, int, int, int, int, int, int, cudnnConvolutionMode_t,
                               cudnnDataType_t);
  cudnnStatus_t (*set_conv_groups)(Conv, int);
  cudnnStatus_t (*set_conv_math)(Conv, cudnnMathType_t);
  cudnnStatus_t (*destroy_conv)(Conv);
  cudnnStatus_t (*conv_output_dim)(Conv, Tensor, Filter, int*, int*, int*, int*);
  cudnnStatus_t (*forward_algorithms)(cudnnHandle_t, Tensor, Filter, Conv, Tensor, int, int*,
                                      cudnnConvolutionFwdAlgoPerf_t*);
  cudnnStatus_t (*backward_data_algorithms)(cudnnHandle_t, Filter, Tensor, Conv, Tensor, int, int*,
                                            cudnnConvolutionBwdDataAlgoPerf_t*);
  cudnnStatus_t (*backward_filter_algorithms)(cudnnHandle_t, Tensor, Tensor, Conv, Filter, int,
                                              int*, cudnnConvolutionBwdFilterAlgoPerf_t*);
  cudnnStatus_t (*conv_forward)(cudnnHandle_t, const void*, Tensor, const void*, Filter,
                                const void*, Conv, cudnnConvolutionFwdAlgo_t, void*, size_t,
                                const void*, Tensor, void*);
  cudnnStatus_t (*conv_backward_data)(cudnnHandle_t, const void*, Filter, const void*, Tensor,
                                      const void*, Conv, cudnnConvolutionBwdDataAlgo_t, void*,
                                      size_t, const void*, Tensor, void*);
  cudnnStatus_t (*conv_backward_filter)(cudnnHandle_t, const void*, Tensor, const void*, Tensor,
                                        const void*, Conv, cudnnConvolutionBwdFilterAlgo_t, void*,
                                        size_t, const void*, Filter, void*);
  cudnnStatus_t (*create_pool)(Pool*);
  cudnnStatus_t (*set_pool_2d)(Pool, cudnnPoolingMode_t, cudnnNanPropagation_t, int, int, int, int,
                               int, int);
  cudnnStatus_t (*pool_output_dim)(Pool, Tensor, int*, int*, int*, int*);
  cudnnStatus_t (*destroy_pool)(Pool);
  cudnnStatus_t (*pool_forward)(cudnnHandle_t, Pool, const void*, Tensor, const void*, const void*,
                                Tensor, void*);
  cudnnStatus_t (*pool_backward)(cudnnHandle_t, Pool, const void*, Tensor, const void*, Tensor,
                                 const void*, Tensor, const void*, const void*, Tensor, void*);
  cudnnStatus_t (*batch_norm_forward)(cudnnHandle_t, cudnnBatchNormMode_t, const void*, const void*,
                                      Tensor, const void*, Tensor, void*, Tensor, const void*,
                                      const void*, double, void*, void*, double, void*, void*);
  cudnnStatus_t (*batch_norm_backward)(cudnnHandle_t, cudnnBatchNormMode_t, const void*,
                                       const void*, const void*, const void*, Tensor, const void*,
                                       Tensor, const void*, Tensor, void*, Tensor, const void*,
                                       void*, void*, double, const void*, const void*);
};

// Loaded once (thread-safe); Unavailable naming the library when it is missing or of another
// major version than the headers.
Result<const CudnnApi*> load_cudnn();

// cudnnGetVersion()'s value (major * 10000 + minor * 100 + patch since cuDNN 9) as "9.19.0".
std::string cudnn_version_text(size_t version);

}  // namespace gp::exec::cuda
