#include "cuda/device_query.h"

#include <cuda_runtime.h>
#include <nccl.h>

namespace gp::exec::cuda {
namespace {

std::string describe(cudaError_t err) {
  std::string s = cudaGetErrorName(err);
  s += " (";
  s += cudaGetErrorString(err);
  s += ")";
  cudaGetLastError();  // clear the sticky error so later calls start clean
  return s;
}

}  // namespace

bool device_count(int* count, std::string* error) {
  // Without a driver this returns cudaErrorInsufficientDriver (35), not success with 0.
  cudaError_t err = cudaGetDeviceCount(count);
  if (err != cudaSuccess) {
    *count = 0;
    *error = describe(err);
    return false;
  }
  return true;
}

bool device_properties(int index, RawDeviceInfo* out, std::string* error) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) {
    *error = describe(err);
    return false;
  }
  out->name = prop.name;
  out->memory_bytes = prop.totalGlobalMem;
  out->major = prop.major;
  out->minor = prop.minor;
  out->multiprocessors = prop.multiProcessorCount;
  return true;
}

int runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : 0;
}

int driver_version() {
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess ? v : 0;
}

int nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

}  // namespace gp::exec::cuda
