// The table of backends this build has: the only file that knows whether CUDA was compiled in.
// Everything else finds devices and data planes through it (find_device, the NCCL entry points
// of gp/exec/nccl.h, query_cuda) and chooses by what a device can do, not by its name.
#include <cstdlib>
#include <string>

#include "device_api/backend.h"
#include "device_api/kernel_common.h"

namespace gp::exec {
namespace {

const Backend* backend_named(std::string_view name) {
  for (const Backend* b : backends()) {
    if (b->name == name) return b;
  }
  return nullptr;
}

// The backend with a device data plane (NCCL), or an error saying what build has one. Whether a
// rank uses it is the transport table's choice (gp/exec/data_plane.h); this only finds it.
Result<const DeviceDataPlane*> device_data_plane() {
  for (const Backend* b : backends()) {
    if (b->data_plane != nullptr) return b->data_plane;
  }
  return unimplemented(
      "the NCCL data plane needs a build with the CUDA backend (configure with -DGP_CUDA=ON on a "
      "machine with the CUDA toolkit and NCCL)");
}

}  // namespace

std::span<const Backend* const> backends() {
#if GP_HAVE_CUDA
  static const Backend* const table[] = {&cpu_backend(), &cuda_backend()};
#else
  static const Backend* const table[] = {&cpu_backend()};
#endif
  return table;
}

Result<const Device*> find_device(std::string_view name, MatmulPrecision precision) {
  const size_t colon = name.find(':');
  const std::string_view kind = name.substr(0, colon);
  const Backend* backend = backend_named(kind);
  if (backend == nullptr && kind == "cuda") {
    return unimplemented("--device " + std::string(name) +
                         ": this build has no CUDA backend (configure with -DGP_CUDA=ON on a "
                         "machine with the CUDA toolkit); it trains on the CPU");
  }
  if (backend == nullptr) {
    return invalid_argument("--device = '" + std::string(name) + "', expected cpu or cuda:N");
  }
  if (!backend->indexed_devices) {
    if (colon != std::string_view::npos) {
      return invalid_argument("--device = '" + std::string(name) + "', expected " +
                              std::string(kind) + " without an index");
    }
    return backend->open_device(0, precision);
  }
  const std::string index_text(colon == std::string_view::npos ? "" : name.substr(colon + 1));
  char* end = nullptr;
  const long index = std::strtol(index_text.c_str(), &end, 10);
  if (index_text.empty() || *end != '\0' || index < 0 || index > 1024) {
    return invalid_argument("--device = '" + std::string(name) + "': the " + std::string(kind) +
                            " device index must be a number, e.g. " + std::string(kind) + ":0");
  }
  return backend->open_device(static_cast<int>(index), precision);
}

Result<std::string> nccl_version() {
  GP_ASSIGN_OR_RETURN(const DeviceDataPlane* plane, device_data_plane());
  return plane->version();
}

Result<std::vector<std::string>> make_nccl_unique_ids(int count) {
  GP_ASSIGN_OR_RETURN(const DeviceDataPlane* plane, device_data_plane());
  return plane->make_ids(count);
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions& options) {
  GP_ASSIGN_OR_RETURN(const DeviceDataPlane* plane, device_data_plane());
  return plane->connect(options);
}

Status check_kernel(const Device& device, const model::OpNode& op) {
  const std::string_view name = device.name();
  const Backend* backend = backend_named(name.substr(0, name.find(':')));
  if (backend == nullptr || backend->supports == nullptr || backend->supports(op.op_type())) {
    return ok_status();
  }
  std::string what =
      "device " + std::string(name) + " has no kernel for op type '" + std::string(op.type()) + "'";
  if (const auto* opaque = std::get_if<model::OpaqueAttrs>(&op.attrs)) {
    what += "; ONNX operator " + opaque->onnx_type +
            " was imported as opaque (--allow-opaque) for planning only and cannot be trained or "
            "profiled";
  }
  return op_error(op, what);
}

CudaRuntimeInfo query_cuda() {
  CudaRuntimeInfo info;
  const Backend* cuda = backend_named("cuda");
  if (cuda == nullptr || cuda->describe == nullptr) {
    info.unavailable_reason =
        "built without CUDA (configure with -DGP_CUDA=ON on a machine with nvcc)";
    return info;
  }
  cuda->describe(&info);
  return info;
}

}  // namespace gp::exec
