// graphpipe-profile devices: the host CPU and the CUDA devices visible here.
#include <cstdio>

#include "commands.h"
#include "gp/common/json_writer.h"
#include "gp/exec/device_info.h"

namespace gp::profile::cli {
namespace {

std::string version_string(int v, int major_div, int minor_div, int minor_mod) {
  if (v <= 0) return "none";
  return std::to_string(v / major_div) + "." + std::to_string(v / minor_div % minor_mod);
}

}  // namespace

Status run_devices(bool json) {
  const auto host = exec::query_host();
  const auto cuda = exec::query_cuda();
  const std::string runtime = version_string(cuda.runtime_version, 1000, 10, 100);
  const std::string driver = version_string(cuda.driver_version, 1000, 10, 100);
  const std::string nccl = version_string(cuda.nccl_version, 10000, 100, 100);
  if (json) {
    JsonWriter w;
    w.begin_object();
    w.key("host")
        .begin_object()
        .field("cpu_model", host.cpu_model)
        .field("logical_cores", host.logical_cores)
        .field("memory_bytes", host.memory_bytes)
        .end_object();
    w.key("cuda")
        .begin_object()
        .field("built", cuda.built)
        .field("runtime", runtime)
        .field("driver", driver)
        .field("nccl", nccl)
        .field("kernel_libraries", cuda.kernel_libraries)
        .field("unavailable_reason", cuda.unavailable_reason);
    w.key("devices").begin_array();
    for (const auto& d : cuda.devices) {
      w.begin_object()
          .field("device", "cuda:" + std::to_string(d.index))
          .field("name", d.name)
          .field("memory_bytes", d.memory_bytes)
          .field("compute_capability",
                 std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor))
          .field("multiprocessors", d.multiprocessors)
          .end_object();
    }
    w.end_array().end_object().end_object();
    std::printf("%s\n", w.str().c_str());
    return ok_status();
  }
  std::printf("cpu      %s, %d logical cores, %.1f GiB\n", host.cpu_model.c_str(),
              host.logical_cores, static_cast<double>(host.memory_bytes) / (1 << 30));
  std::printf("cuda     backend %s, runtime %s, driver %s, nccl %s\n",
              cuda.built ? "built" : "not built", runtime.c_str(), driver.c_str(), nccl.c_str());
  if (cuda.built) std::printf("kernels  %s\n", cuda.kernel_libraries.c_str());
  for (const auto& d : cuda.devices) {
    std::printf("cuda:%-3d %s, %.1f GiB, sm_%d%d, %d SMs\n", d.index, d.name.c_str(),
                static_cast<double>(d.memory_bytes) / (1 << 30), d.compute_major, d.compute_minor,
                d.multiprocessors);
  }
  if (!cuda.unavailable_reason.empty())
    std::printf("         %s\n", cuda.unavailable_reason.c_str());
  return ok_status();
}

}  // namespace gp::profile::cli
