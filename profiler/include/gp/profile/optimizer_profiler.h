// Optimizer profiling: the time of one update of one parameter tensor by the executor's own
// optimizer (Device::apply_optimizer) at a sweep of tensor sizes, for each optimizer kind, fitted
// as t = alpha + bytes / beta per update (graphpipe.v1.OptimizerFit). A stage's step is one update
// per tensor, so the planner prices it as tensors x alpha + the state's bytes / beta.
//
// The calls run back to back, without evicting the caches: the step follows the backward pass
// that wrote the gradients. The points are kept: the cost model prices a stage's step at the
// bandwidth measured at its whole state's size (cached or streamed from memory), and the sweep
// reaches 16 Mi elements (192 MiB streamed by SGD, 448 MiB by Adam) to leave the caches.
#pragma once

#include <cstdint>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/device.h"
#include "gp/profile/measure.h"
#include "graphpipe/v1/plan.pb.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::profile {

struct OptimizerProfileOptions {
  // Elements per tensor, each > 0, at least two distinct.
  std::vector<int64_t> sizes{int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 22,
                             int64_t{1} << 24};
  std::vector<graphpipe::v1::OptimizerKind> kinds{graphpipe::v1::OPTIMIZER_KIND_SGD,
                                                  graphpipe::v1::OPTIMIZER_KIND_MOMENTUM,
                                                  graphpipe::v1::OPTIMIZER_KIND_ADAM};
  MeasureOptions measure;
  std::string device_kind;  // recorded in each fit: DeviceKind.name
  graphpipe::v1::Provenance provenance;
  Timer* timer = nullptr;  // nullptr: a SteadyTimer
};

// One fit per kind, in `kinds` order. Errors: bad sizes or kinds, a device that cannot allocate
// or fails a call (named), weights that are not finite afterwards, or times that do not grow
// with the size (no fit).
Result<std::vector<graphpipe::v1::OptimizerFit>> profile_optimizers(
    const exec::Device& device, const OptimizerProfileOptions& options);

}  // namespace gp::profile
