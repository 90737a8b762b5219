// Private entry to the NCCL data plane (plain types only; gp/exec/nccl.h's functions call it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device_api/nccl.h"

namespace gp::exec::cuda {

Result<std::string> nccl_version_text();
Result<std::vector<std::string>> make_unique_ids(int count);
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions& options);

}  // namespace gp::exec::cuda
