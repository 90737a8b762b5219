#include "gp/exec/device.h"

#include <string>

namespace gp::exec {
namespace {

class CpuDevice final : public Device {
 public:
  std::string_view name() const override { return "cpu"; }
  Result<std::unique_ptr<OpKernel>> make_kernel(const graph::OpNode& op) const override {
    return make_cpu_kernel(op);
  }
};

}  // namespace

const Device& cpu_device() {
  static const CpuDevice device;
  return device;
}

Result<const Device*> find_device(std::string_view name) {
  if (name == "cpu") return &cpu_device();
  if (name.starts_with("cuda:")) {
    return unimplemented("--device " + std::string(name) +
                         ": the CUDA backend is not implemented yet; this build trains on the CPU");
  }
  return invalid_argument("--device = '" + std::string(name) + "', expected cpu or cuda:N");
}

}  // namespace gp::exec
