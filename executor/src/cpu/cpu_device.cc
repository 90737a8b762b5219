// The host CPU as a Device: host memory, the reference kernels, the reference optimizer.
#include <cstdlib>
#include <cstring>
#include <string>

#include "gp/exec/device.h"
#include "gp/exec/optimizer.h"

namespace gp::exec {
namespace {

class CpuDevice final : public Device {
 public:
  std::string_view name() const override { return "cpu"; }
  Result<std::unique_ptr<OpKernel>> make_kernel(const model::OpNode& op) const override {
    return make_cpu_kernel(op);
  }
  bool host_memory() const override { return true; }
  Result<void*> allocate(size_t bytes) const override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    // Cache-line aligned, as the CUDA allocator's 256-byte alignment is at least this.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {
      return resource_exhausted("cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    return p;
  }
  void release(void* ptr) const override { std::free(ptr); }
  Status copy_from_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return ok_status();
  }
  Status copy_to_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return ok_status();
  }
  Status fill_zero(void* dst, size_t bytes) const override {
    if (bytes > 0) std::memset(dst, 0, bytes);
    return ok_status();
  }
  Status synchronize() const override { return ok_status(); }
  void apply_optimizer(const Optimizer& optimizer, float* weights, const float* grads, float* state,
                       int64_t n, int64_t step) const override {
    const size_t count = static_cast<size_t>(n);
    optimizer.apply(std::span<float>(weights, count), std::span<const float>(grads, count),
                    std::span<float>(state, count * static_cast<size_t>(optimizer.state_floats())),
                    step);
  }
  Status copy_on_device(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return ok_status();
  }
  Status accumulate(float* dst, const float* src, int64_t n) const override {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    return ok_status();
  }
};

}  // namespace

const Device& cpu_device() {
  static const CpuDevice device;
  return device;
}

}  // namespace gp::exec
