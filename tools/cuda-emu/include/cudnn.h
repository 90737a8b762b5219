#pragma once
// The part of cuDNN the backend uses (cudnn_vision.cc: the legacy convolution, pooling and batch
// norm API), emulated on the host by emu_cudnn.cc: same names, values and C linkage as the real
// headers, so the backend's loader finds them with dlsym in the test binary.
#include <cstddef>

#include "cuda_runtime_api.h"

#define CUDNN_MAJOR 9
#define CUDNN_BN_MIN_EPSILON 0.0
typedef struct cudnnContext* cudnnHandle_t;
typedef struct cudnnTensorStruct* cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct* cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct* cudnnConvolutionDescriptor_t;
typedef struct cudnnPoolingStruct* cudnnPoolingDescriptor_t;
typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_EXECUTION_FAILED = 5000
} cudnnStatus_t;
typedef enum { CUDNN_DATA_FLOAT = 0 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0 } cudnnTensorFormat_t;
typedef enum {
  CUDNN_DEFAULT_MATH = 0,
  CUDNN_TENSOR_OP_MATH = 1,
  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
  CUDNN_FMA_MATH = 3
} cudnnMathType_t;
typedef enum { CUDNN_NOT_PROPAGATE_NAN = 0, CUDNN_PROPAGATE_NAN = 1 } cudnnNanPropagation_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum {
  CUDNN_POOLING_MAX = 0,
  CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING = 1,
  CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING = 2,
  CUDNN_POOLING_MAX_DETERMINISTIC = 3
} cudnnPoolingMode_t;
typedef enum {
  CUDNN_BATCHNORM_PER_ACTIVATION = 0,
  CUDNN_BATCHNORM_SPATIAL = 1
} cudnnBatchNormMode_t;
typedef enum { CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0 } cudnnConvolutionFwdAlgo_t;
typedef enum { CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0 } cudnnConvolutionBwdDataAlgo_t;
typedef enum { CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0 } cudnnConvolutionBwdFilterAlgo_t;
#define GP_EMU_PERF(Name, Algo)     \
  typedef struct {                  \
    Algo algo;                      \
    cudnnStatus_t status;           \
    float time;                     \
    size_t memory;                  \
    cudnnDeterminism_t determinism; \
    cudnnMathType_t mathType;       \
    int reserved[3];                \
  } Name;
GP_EMU_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t)
GP_EMU_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t)
GP_EMU_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t)
#undef GP_EMU_PERF

extern "C" {
size_t cudnnGetVersion();
const char* cudnnGetErrorString(cudnnStatus_t);
cudnnStatus_t cudnnCreate(cudnnHandle_t*);
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t*);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t, cudnnTensorFormat_t,
                                         cudnnDataType_t, int n, int c, int h, int w);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t*);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t, cudnnDataType_t,
                                         cudnnTensorFormat_t, int k, int c, int h, int w);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t*);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t, int pad_h, int pad_w,
                                              int u, int v, int dilation_h, int dilation_w,
                                              cudnnConvolutionMode_t, cudnnDataType_t);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t, int);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t, cudnnMathType_t);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t);
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t,
                                                    cudnnTensorDescriptor_t,
                                                    cudnnFilterDescriptor_t, int*, int*, int*,
                                                    int*);
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, cudnnTensorDescriptor_t,
                                                     cudnnFilterDescriptor_t,
                                                     cudnnConvolutionDescriptor_t,
                                                     cudnnTensorDescriptor_t, int, int*,
                                                     cudnnConvolutionFwdAlgoPerf_t*);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, cudnnFilterDescriptor_t,
                                                          cudnnTensorDescriptor_t,
                                                          cudnnConvolutionDescriptor_t,
                                                          cudnnTensorDescriptor_t, int, int*,
                                                          cudnnConvolutionBwdDataAlgoPerf_t*);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, cudnnTensorDescriptor_t,
                                                            cudnnTensorDescriptor_t,
                                                            cudnnConvolutionDescriptor_t,
                                                            cudnnFilterDescriptor_t, int, int*,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t*);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t, const void* alpha, cudnnTensorDescriptor_t,
                                      const void* x, cudnnFilterDescriptor_t, const void* w,
                                      cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t,
                                      void* workspace, size_t workspace_bytes, const void* beta,
                                      cudnnTensorDescriptor_t, void* y);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t, const void* alpha,
                                           cudnnFilterDescriptor_t, const void* w,
                                           cudnnTensorDescriptor_t, const void* dy,
                                           cudnnConvolutionDescriptor_t,
                                           cudnnConvolutionBwdDataAlgo_t, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           cudnnTensorDescriptor_t, void* dx);
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t, const void* alpha,
                                             cudnnTensorDescriptor_t, const void* x,
                                             cudnnTensorDescriptor_t, const void* dy,
                                             cudnnConvolutionDescriptor_t,
                                             cudnnConvolutionBwdFilterAlgo_t, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             cudnnFilterDescriptor_t, void* dw);
cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t*);
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t, cudnnPoolingMode_t,
                                          cudnnNanPropagation_t, int window_h, int window_w,
                                          int pad_h, int pad_w, int stride_h, int stride_w);
cudnnStatus_t cudnnGetPooling2dForwardOutputDim(cudnnPoolingDescriptor_t, cudnnTensorDescriptor_t,
                                                int*, int*, int*, int*);
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t);
cudnnStatus_t cudnnPoolingForward(cudnnHandle_t, cudnnPoolingDescriptor_t, const void* alpha,
                                  cudnnTensorDescriptor_t, const void* x, const void* beta,
                                  cudnnTensorDescriptor_t, void* y);
cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t, cudnnPoolingDescriptor_t, const void* alpha,
                                   cudnnTensorDescriptor_t, const void* y, cudnnTensorDescriptor_t,
                                   const void* dy, cudnnTensorDescriptor_t, const void* x,
                                   const void* beta, cudnnTensorDescriptor_t, void* dx);
cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t, cudnnBatchNormMode_t, const void* alpha, const void* beta,
    cudnnTensorDescriptor_t, const void* x, cudnnTensorDescriptor_t, void* y,
    cudnnTensorDescriptor_t, const void* scale, const void* bias, double factor, void* running_mean,
    void* running_var, double eps, void* save_mean, void* save_inv_var);
cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t, cudnnBatchNormMode_t, const void* alpha_data, const void* beta_data,
    const void* alpha_param, const void* beta_param, cudnnTensorDescriptor_t, const void* x,
    cudnnTensorDescriptor_t, const void* dy, cudnnTensorDescriptor_t, void* dx,
    cudnnTensorDescriptor_t, const void* scale, void* dscale, void* dbias, double eps,
    const void* saved_mean, const void* saved_inv_var);
// The emulator's own: calls that ran a convolution, pooling or batch norm so far.
long emu_cudnn_calls();
}  // extern "C"
