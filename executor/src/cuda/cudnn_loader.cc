#include "cuda/cudnn_loader.h"

#include <string>

#include "cuda/dl_library.h"

namespace gp::exec::cuda {
namespace {

std::string library_name() { return "libcudnn.so." + std::to_string(CUDNN_MAJOR); }

Result<const CudnnApi*> load_once() {
  static CudnnApi api;
  GP_ASSIGN_OR_RETURN(DlLibrary lib,
                      DlLibrary::open({library_name(), "libcudnn.so"}, "cudnnConvolutionForward"));
  bool ok = lib.resolve("cudnnGetVersion", &api.version);
  ok = lib.resolve("cudnnGetErrorString", &api.error_string) && ok;
  ok = lib.resolve("cudnnCreate", &api.create) && ok;
  ok = lib.resolve("cudnnSetStream", &api.set_stream) && ok;
  ok = lib.resolve("cudnnCreateTensorDescriptor", &api.create_tensor) && ok;
  ok = lib.resolve("cudnnSetTensor4dDescriptor", &api.set_tensor_4d) && ok;
  ok = lib.resolve("cudnnDestroyTensorDescriptor", &api.destroy_tensor) && ok;
  ok = lib.resolve("cudnnCreateFilterDescriptor", &api.create_filter) && ok;
  ok = lib.resolve("cudnnSetFilter4dDescriptor", &api.set_filter_4d) && ok;
  ok = lib.resolve("cudnnDestroyFilterDescriptor", &api.destroy_filter) && ok;
  ok = lib.resolve("cudnnCreateConvolutionDescriptor", &api.create_conv) && ok;
  ok = lib.resolve("cudnnSetConvolution2dDescriptor", &api.set_conv_2d) && ok;
  ok = lib.resolve("cudnnSetConvolutionGroupCount", &api.set_conv_groups) && ok;
  ok = lib.resolve("cudnnSetConvolutionMathType", &api.set_conv_math) && ok;
  ok = lib.resolve("cudnnDestroyConvolutionDescriptor", &api.destroy_conv) && ok;
  ok = lib.resolve("cudnnGetConvolution2dForwardOutputDim", &api.conv_output_dim) && ok;
  ok = lib.resolve("cudnnGetConvolutionForwardAlgorithm_v7", &api.forward_algorithms) && ok;
  ok = lib.resolve("cudnnGetConvolutionBackwardDataAlgorithm_v7", &api.backward_data_algorithms) &&
       ok;
  ok = lib.resolve("cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                   &api.backward_filter_algorithms) &&
       ok;
  ok = lib.resolve("cudnnConvolutionForward", &api.conv_forward) && ok;
  ok = lib.resolve("cudnnConvolutionBackwardData", &api.conv_backward_data) && ok;
  ok = lib.resolve("cudnnConvolutionBackwardFilter", &api.conv_backward_filter) && ok;
  ok = lib.resolve("cudnnCreatePoolingDescriptor", &api.create_pool) && ok;
  ok = lib.resolve("cudnnSetPooling2dDescriptor", &api.set_pool_2d) && ok;
  ok = lib.resolve("cudnnGetPooling2dForwardOutputDim", &api.pool_output_dim) && ok;
  ok = lib.resolve("cudnnDestroyPoolingDescriptor", &api.destroy_pool) && ok;
  ok = lib.resolve("cudnnPoolingForward", &api.pool_forward) && ok;
  ok = lib.resolve("cudnnPoolingBackward", &api.pool_backward) && ok;
  ok = lib.resolve("cudnnBatchNormalizationForwardTraining", &api.batch_norm_forward) && ok;
  ok = lib.resolve("cudnnBatchNormalizationBackward", &api.batch_norm_backward) && ok;
  if (!ok) return unavailable("cuDNN (" + library_name() + ") lacks " + lib.missing());
  // "libcudnn.so" may be another major version than the headers this was built with.
  if (const size_t v = api.version(); v / 10000 != CUDNN_MAJOR) {
    return unavailable("the cuDNN loaded is version " + cudnn_version_text(v) +
                       ", this build needs " + std::to_string(CUDNN_MAJOR) + ".x (" +
                       library_name() + ")");
  }
  return &api;
}

}  // namespace

std::string cudnn_version_text(size_t version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

Result<const CudnnApi*> load_cudnn() {
  static const Result<const CudnnApi*> loaded = load_once();
  return loaded;
}

}  // namespace gp::exec::cuda
