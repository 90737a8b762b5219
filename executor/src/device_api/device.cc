// The parts of the device interface that are the same on every backend: precision names and
// DeviceBuffer. The devices themselves are in the backend folders (cpu/, cuda/).
#include "gp/exec/device.h"

#include <string>

namespace gp::exec {

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

}  // namespace gp::exec
