#include "gp/exec/device.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "gp/exec/optimizer.h"

#if GP_HAVE_CUDA
#include "cuda/cuda_device.h"
#endif

namespace gp::exec {
namespace {

class CpuDevice final : public Device {
 public:
  std::string_view name() const override { return "cpu"; }
  Result<std::unique_ptr<OpKernel>> make_kernel(const graph::OpNode& op) const override {
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
};

}  // namespace

void Device::apply_optimizer(const Optimizer& optimizer, float* weights, const float* grads,
                             float* state, int64_t n, int64_t step) const {
  GP_CHECK(host_memory(), "Device::apply_optimizer: a device without host memory must override it");
  const size_t count = static_cast<size_t>(n);
  optimizer.apply(std::span<float>(weights, count), std::span<const float>(grads, count),
                  std::span<float>(state, count * static_cast<size_t>(optimizer.state_floats())),
                  step);
}

Status Device::copy_on_device(void* dst, const void* src, size_t bytes) const {
  GP_CHECK(host_memory(), "Device::copy_on_device: a device without host memory must override it");
  if (bytes > 0) std::memmove(dst, src, bytes);
  return ok_status();
}

Status Device::accumulate(float* dst, const float* src, int64_t n) const {
  GP_CHECK(host_memory(), "Device::accumulate: a device without host memory must override it");
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  return ok_status();
}

std::string_view precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kFp32:
      return "fp32";
    case MatmulPrecision::kTf32:
      return "tf32";
    case MatmulPrecision::kBf16:
      return "bf16";
  }
  return "?";
}

Result<MatmulPrecision> parse_precision(std::string_view name) {
  for (auto p : {MatmulPrecision::kFp32, MatmulPrecision::kTf32, MatmulPrecision::kBf16}) {
    if (precision_name(p) == name) return p;
  }
  return invalid_argument("--precision = '" + std::string(name) + "', expected fp32, tf32 or bf16");
}

Result<DeviceBuffer> DeviceBuffer::create(const Device& device, size_t bytes) {
  auto data = device.allocate(bytes);
  if (!data.ok()) return data.status();
  DeviceBuffer b;
  b.device_ = &device;
  b.data_ = *data;
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (device_ != nullptr) device_->release(data_);
    device_ = other.device_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (device_ != nullptr) device_->release(data_);
}

const Device& cpu_device() {
  static const CpuDevice device;
  return device;
}

Result<const Device*> find_device(std::string_view name, MatmulPrecision precision) {
  if (name == "cpu") return &cpu_device();
  if (name.starts_with("cuda:")) {
    const std::string index_text(name.substr(5));
    char* end = nullptr;
    const long index = std::strtol(index_text.c_str(), &end, 10);
    if (index_text.empty() || *end != '\0' || index < 0 || index > 1024) {
      return invalid_argument("--device = '" + std::string(name) +
                              "': the CUDA device index must be a number, e.g. cuda:0");
    }
#if GP_HAVE_CUDA
    return cuda::open_cuda_device(static_cast<int>(index), precision);
#else
    (void)precision;
    return unimplemented("--device " + std::string(name) +
                         ": this build has no CUDA backend (configure with -DGP_CUDA=ON on a "
                         "machine with the CUDA toolkit); it trains on the CPU");
#endif
  }
  return invalid_argument("--device = '" + std::string(name) + "', expected cpu or cuda:N");
}

}  // namespace gp::exec
