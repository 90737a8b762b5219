// The CPU backend's entry in the backend table: one device, "cpu"; ranks exchange host memory;
// the reference kernels of every trainable op type.
#include "device_api/backend.h"

#include "cpu/kernel_util.h"

namespace gp::exec {
namespace {

Result<const Device*> open_cpu(int /*index*/, MatmulPrecision /*precision*/) {
  return &cpu_device();  // fp32 whatever precision is asked (device.h)
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend backend{.name = "cpu",
                               .indexed_devices = false,
                               .open_device = open_cpu,
                               .supports = cpu::has_kernel};
  return backend;
}

}  // namespace gp::exec
