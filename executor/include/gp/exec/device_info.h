// Discovery of the devices this process can run on: the host CPU always, CUDA GPUs when the
// CUDA backend was built and a driver and device are present. No CUDA type appears here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec {

struct HostInfo {
  std::string cpu_model;  // from /proc/cpuinfo, or "unknown"
  int logical_cores = 0;
  int64_t memory_bytes = 0;
};

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
};

struct CudaRuntimeInfo {
  bool built = false;              // the CUDA backend is compiled in
  int runtime_version = 0;         // e.g. 13000
  int driver_version = 0;          // 0 when no driver
  int nccl_version = 0;            // e.g. 22703
  std::string unavailable_reason;  // why no device can be used, empty when devices exist
  // The libraries a device's kernels would use (GP_CUDA_KERNELS), e.g. "cuBLASLt and cuDNN
  // 9.19.0 (GP_CUDA_KERNELS=auto)", naming what could not be loaded.
  std::string kernel_libraries;
  std::vector<CudaDeviceInfo> devices;
};

HostInfo query_host();
// Never fails: a missing driver or device is reported in unavailable_reason.
CudaRuntimeInfo query_cuda();

}  // namespace gp::exec
