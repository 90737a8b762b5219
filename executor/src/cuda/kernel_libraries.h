// Which vendor libraries a CUDA device's kernels use, from $GP_CUDA_KERNELS:
//   auto (the default)  cuBLASLt and cuDNN where they load, the hand-written kernels otherwise;
//   library             both required: opening a device fails naming the one that is missing;
//   hand                the hand-written kernels everywhere (to compare, or to do without).
#pragma once

#include <string>

#include "cuda/cuda_context.h"
#include "gp/common/status.h"

namespace gp::exec::cuda {

enum class KernelSource { kAuto, kLibrary, kHand };

// InvalidArgument naming the value when it is none of the three.
Result<KernelSource> kernel_source_from_env();

// Opens cuBLASLt and cuDNN into `ctx` (handles bound to ctx->stream) as `source` asks. With
// kAuto a library that cannot be opened is left out (its ops run by hand); with kLibrary that is
// Unavailable naming it.
Status open_kernel_libraries(KernelSource source, CudaContext* ctx);

// What a device opened now would use, e.g. "cuBLASLt and cuDNN 9.19.0 (GP_CUDA_KERNELS=auto)" or
// "hand-written; cuDNN: cannot load libcudnn.so.9: ... (GP_CUDA_KERNELS=auto)".
std::string kernel_libraries_summary();

}  // namespace gp::exec::cuda
