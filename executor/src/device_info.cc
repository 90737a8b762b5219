#include "gp/exec/device_info.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#if GP_HAVE_CUDA
#include "cuda/device_query.h"
#endif

namespace gp::exec {

HostInfo query_host() {
  HostInfo info;
  info.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  info.cpu_model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size())
        info.cpu_model = line.substr(colon + 2);
      break;
    }
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) info.memory_bytes = int64_t{pages} * page_size;
  return info;
}

CudaRuntimeInfo query_cuda() {
  CudaRuntimeInfo info;
#if GP_HAVE_CUDA
  info.built = true;
  info.runtime_version = cuda::runtime_version();
  info.driver_version = cuda::driver_version();
  info.nccl_version = cuda::nccl_version();
  int count = 0;
  std::string error;
  if (!cuda::device_count(&count, &error)) {
    info.unavailable_reason = "no usable CUDA device: " + error;
    return info;
  }
  if (count == 0) {
    info.unavailable_reason = "no CUDA device present";
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cuda::RawDeviceInfo raw;
    if (!cuda::device_properties(i, &raw, &error)) {
      info.unavailable_reason = "cuda:" + std::to_string(i) + ": " + error;
      continue;
    }
    info.devices.push_back(CudaDeviceInfo{i, raw.name, static_cast<int64_t>(raw.memory_bytes),
                                          raw.major, raw.minor, raw.multiprocessors});
  }
#else
  info.unavailable_reason =
      "built without CUDA (configure with -DGP_CUDA=ON on a machine with nvcc)";
#endif
  return info;
}

}  // namespace gp::exec
