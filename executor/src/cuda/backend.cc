// The CUDA backend's entry in the backend table: devices "cuda:N", the NCCL data plane over their
// memory, what the CUDA runtime, driver and NCCL report, and the op types it has kernels for.
#include "device_api/backend.h"

#include "cuda/cuda_device.h"
#include "cuda/device_query.h"
#include "cuda/kernel_libraries.h"
#include "cuda/kernels.h"
#include "cuda/nccl_entry.h"

namespace gp::exec {
namespace {

void describe_cuda(CudaRuntimeInfo* info) {
  info->built = true;
  info->runtime_version = cuda::runtime_version();
  info->driver_version = cuda::driver_version();
  info->nccl_version = cuda::nccl_version();
  info->kernel_libraries = cuda::kernel_libraries_summary();
  int count = 0;
  std::string error;
  if (!cuda::device_count(&count, &error)) {
    info->unavailable_reason = "no usable CUDA device: " + error;
    return;
  }
  if (count == 0) {
    info->unavailable_reason = "no CUDA device present";
    return;
  }
  for (int i = 0; i < count; ++i) {
    cuda::RawDeviceInfo raw;
    if (!cuda::device_properties(i, &raw, &error)) {
      info->unavailable_reason = "cuda:" + std::to_string(i) + ": " + error;
      continue;
    }
    info->devices.push_back(CudaDeviceInfo{i, raw.name, static_cast<int64_t>(raw.memory_bytes),
                                           raw.major, raw.minor, raw.multiprocessors});
  }
}

const DeviceDataPlane kNccl{.name = "nccl",
                            .version = cuda::nccl_version_text,
                            .make_ids = cuda::make_unique_ids,
                            .connect = cuda::make_nccl_communicator};

}  // namespace

const Backend& cuda_backend() {
  static const Backend backend{.name = "cuda",
                               .indexed_devices = true,
                               .open_device = cuda::open_cuda_device,
                               .data_plane = &kNccl,
                               .describe = describe_cuda,
                               .supports = cuda::has_kernel};
  return backend;
}

}  // namespace gp::exec
