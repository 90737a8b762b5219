#include "cuda/kernel_libraries.h"

#include <cstdlib>
#include <string_view>

namespace gp::exec::cuda {
namespace {

const char* source_name(KernelSource s) {
  switch (s) {
    case KernelSource::kLibrary:
      return "library";
    case KernelSource::kHand:
      return "hand";
    case KernelSource::kAuto:
      break;
  }
  return "auto";
}

Status open_cublaslt(CudaContext* ctx) {
  GP_ASSIGN_OR_RETURN(const CublasLtApi* lt, load_cublaslt());
  if (cublasStatus_t s = lt->create(&ctx->lt); s != CUBLAS_STATUS_SUCCESS) {
    return unavailable(std::string("cannot create a cuBLASLt handle: ") + lt->status_name(s));
  }
  ctx->cublaslt = lt;
  return ok_status();
}

Status open_cudnn(CudaContext* ctx) {
  GP_ASSIGN_OR_RETURN(const CudnnApi* dnn, load_cudnn());
  if (cudnnStatus_t s = dnn->create(&ctx->dnn); s != CUDNN_STATUS_SUCCESS) {
    return unavailable(std::string("cannot create a cuDNN handle: ") + dnn->error_string(s));
  }
  if (cudnnStatus_t s = dnn->set_stream(ctx->dnn, ctx->stream); s != CUDNN_STATUS_SUCCESS) {
    return unavailable(std::string("cannot bind cuDNN to the stream: ") + dnn->error_string(s));
  }
  ctx->cudnn = dnn;
  return ok_status();
}

}  // namespace

Result<KernelSource> kernel_source_from_env() {
  const char* value = std::getenv("GP_CUDA_KERNELS");
  if (value == nullptr || std::string_view(value).empty()) return KernelSource::kAuto;
  for (KernelSource s : {KernelSource::kAuto, KernelSource::kLibrary, KernelSource::kHand}) {
    if (std::string_view(value) == source_name(s)) return s;
  }
  return invalid_argument("GP_CUDA_KERNELS = '" + std::string(value) +
                          "', expected auto (the default), library or hand");
}

Status open_kernel_libraries(KernelSource source, CudaContext* ctx) {
  if (source == KernelSource::kHand) return ok_status();
  for (Status (*open)(CudaContext*) : {&open_cublaslt, &open_cudnn}) {
    Status s = open(ctx);
    if (!s.ok() && source == KernelSource::kLibrary) {
      return unavailable(s.message() +
                         " (GP_CUDA_KERNELS=library requires it; auto runs "
                         "without it)");
    }
  }
  return ok_status();
}

std::string kernel_libraries_summary() {
  auto source = kernel_source_from_env();
  if (!source.ok()) return source.status().message();
  const std::string tail = std::string(" (GP_CUDA_KERNELS=") + source_name(*source) + ")";
  if (*source == KernelSource::kHand) return "hand-written" + tail;
  auto lt = load_cublaslt();
  auto dnn = load_cudnn();
  std::string used, missing;
  if (lt.ok()) used = "cuBLASLt";
  if (!lt.ok()) missing = "cuBLASLt: " + lt.status().message();
  if (dnn.ok())
    used += (used.empty() ? "" : " and ") + ("cuDNN " + cudnn_version_text((*dnn)->version()));
  if (!dnn.ok()) missing += (missing.empty() ? "" : "; ") + ("cuDNN: " + dnn.status().message());
  if (used.empty()) used = "hand-written";
  return used + (missing.empty() ? "" : "; hand-written for the rest (" + missing + ")") + tail;
}

}  // namespace gp::exec::cuda
