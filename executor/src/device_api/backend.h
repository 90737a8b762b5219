// What a backend offers the executor: its devices, the op types it has kernels for, the data plane
// over its device memory (if it has one) and what its runtime reports. Each backend folder (cpu/,
// cuda/) defines one Backend in its backend.cc; backends.cc lists the ones this build has and is
// the only file that knows which those are. Plain types only: no backend's own types appear here.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "device_api/nccl.h"
#include "gp/common/status.h"
#include "gp/exec/communicator.h"
#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/model/graph.h"

namespace gp::exec {

// A data plane that moves the backend's device memory between ranks without the host.
struct DeviceDataPlane {
  std::string_view name;  // "nccl"
  Result<std::string> (*version)();
  // Rendezvous ids made by rank 0 and handed to every rank at registration.
  Result<std::vector<std::string>> (*make_ids)(int count);
  Result<std::unique_ptr<Communicator>> (*connect)(const NcclOptions& options);
};

struct Backend {
  std::string_view name;  // "cpu": the one device "cpu"; others: devices "<name>:N"
  bool indexed_devices = false;
  Result<const Device*> (*open_device)(int index, MatmulPrecision precision) = nullptr;
  const DeviceDataPlane* data_plane = nullptr;  // nullptr: ranks exchange host memory
  // Fills what the backend's runtime reports (versions, devices); nullptr: nothing to report.
  void (*describe)(CudaRuntimeInfo* info) = nullptr;
  // True when the backend has a kernel for every op of the type: its kernel table's entry.
  bool (*supports)(model::OpType type) = nullptr;
};

// Defined by each backend folder; cuda_backend() exists in CUDA builds only.
const Backend& cpu_backend();
const Backend& cuda_backend();

// The backends of this build, the CPU first.
std::span<const Backend* const> backends();

// Refuses an op of a graph that `device`'s backend has no kernel for, naming the op, its type and
// the device: a stage checks its ops before it allocates anything. Devices outside the backend
// table (tests' fakes) are left to their make_kernel.
Status check_kernel(const Device& device, const model::OpNode& op);

}  // namespace gp::exec
