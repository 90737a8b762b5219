// Private bridge between host C++20 code and the CUDA translation unit (plain types only).
#pragma once

#include <cstddef>
#include <string>

namespace gp::exec::cuda {

struct RawDeviceInfo {
  std::string name;
  size_t memory_bytes = 0;
  int major = 0;
  int minor = 0;
  int multiprocessors = 0;
};

// Each returns true on success; on failure `error` holds the CUDA or NCCL error text.
bool device_count(int* count, std::string* error);
bool device_properties(int index, RawDeviceInfo* out, std::string* error);
int runtime_version();
int driver_version();
int nccl_version();

}  // namespace gp::exec::cuda
