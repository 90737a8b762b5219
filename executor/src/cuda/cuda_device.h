// Private entry to the CUDA backend (plain types only; find_device() calls it).
#pragma once

#include "gp/common/status.h"
#include "gp/exec/device.h"

namespace gp::exec::cuda {

// CUDA device `index` with GEMMs at `precision`, opened once per (index, precision,
// $GP_CUDA_KERNELS) and kept for the life of the process; Unavailable naming the CUDA error when
// there is no such device, InvalidArgument for a GP_CUDA_KERNELS other than library or hand.
Result<const Device*> open_cuda_device(int index, MatmulPrecision precision);

class CudaContext;
// The context of a device from open_cuda_device; nullptr for any other device.
const CudaContext* context_of(const Device& device);

}  // namespace gp::exec::cuda
