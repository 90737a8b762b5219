// Operator profiling: for every distinct operator signature of a model (cost::op_signature), the
// forward and backward time of the device's kernel at each micro-batch size, and the bytes the
// executor keeps from its forward until its backward. The kernels are the executor's own
// (Device::make_kernel), fed deterministic synthetic inputs in their valid ranges.
//
// Validation: every call's outputs and gradients must be finite, and a kernel of a device other
// than the CPU reference must match the CPU reference kernel on the same inputs (relative
// tolerance). A kernel that fails, or whose device reports an error (allocation, copy, or an
// asynchronous error at Device::synchronize()), is reported in `rejected` and not recorded.
//
// Devices without host memory (CUDA): the synthetic data is generated on the host and uploaded
// once per signature; results are downloaded for the checks. Every timed call ends with
// Device::synchronize(), so the time is the kernel's run, not its launch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/device.h"
#include "gp/model/graph.h"
#include "gp/profile/measure.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::profile {

struct OpProfileOptions {
  std::vector<int64_t> micro_batches{1, 2, 4, 8};  // each > 0
  MeasureOptions measure;
  // Recorded in every measurement: the DeviceKind.name of the cluster the profile is for (the
  // planner matches it against the cluster's device kind).
  std::string device_kind;
  graphpipe::v1::Provenance provenance;
  uint64_t seed = 1;
  // Largest accepted |device - reference| / max |reference| over the tensor, element-wise
  // (default_tolerance() for the device's GEMM precision; the CLI picks it).
  double tolerance = 1e-4;
  Timer* timer = nullptr;  // nullptr: a SteadyTimer
  // Bytes of scratch memory streamed through before every timed call, so that the operator's
  // weights and inputs are no longer in the caches, as during training where the
  // stage's other operators run in between. 0: warm caches (back-to-back calls). Host caches
  // only: ignored for a device without host memory.
  int64_t cache_flush_bytes = 0;
  // Measure everything this many times and keep each measurement's fastest pass (>= 1).
  int passes = 1;
  // Host memory the buffers of one operator at the largest micro-batch may take (its inputs,
  // outputs and their gradients live on the host on every device); 0: not checked.
  int64_t memory_limit_bytes = 0;
};

// Most timed or warm-up calls per measurement that a run accepts (the samples are kept).
inline constexpr int kMaxRepetitions = 1000000;

// The default --tolerance for a device's kernels with GEMM inputs at `precision`, relative to
// each tensor's largest reference magnitude: 1e-4 for fp32 (summation order only), 2e-2 for tf32
// (10-bit mantissa inputs), 6e-2 for bf16 (7-bit mantissa inputs, errors compounding through
// attention's chained GEMMs).
double default_tolerance(exec::MatmulPrecision precision);

// A cache-flush size for this host: twice the last-level cache (64 MiB when unknown).
int64_t default_cache_flush_bytes();

struct OpProfileProgress {
  int done = 0;  // (signature, micro-batch) pairs finished, including this one
  int total = 0;
  const std::string* signature = nullptr;
  int64_t micro_batch = 0;
};

struct RejectedKernel {
  std::string signature;
  std::string op_id;  // the model op the signature was taken from
  int64_t micro_batch = 0;
  std::string reason;
};

struct OpProfileResult {
  std::vector<graphpipe::v1::OpMeasurement> measurements;  // signature order, then micro-batch
  std::vector<RejectedKernel> rejected;
  int signatures = 0;  // distinct signatures of the model's non-input ops
};

// Distinct signatures of the non-input ops with the first op (in topological order) that has it.
// Opaque ops (ONNX nodes imported for planning only) have no kernel to measure and are left out:
// the planner costs them with the analytic model's FLOP estimate.
std::vector<std::pair<std::string, int>> distinct_signatures(const model::Graph& graph);

// Bytes the executor keeps from an op's forward to its backward for `samples` samples: the op's
// outputs and the kernel's saved scratch.
int64_t kept_bytes(const model::OpNode& op, const exec::OpKernel& kernel, int64_t samples);

// InvalidArgument (naming the option) for bad options; the measurements otherwise.
Result<OpProfileResult> profile_ops(
    const model::Graph& graph, const exec::Device& device, const OpProfileOptions& options,
    const std::function<void(const OpProfileProgress&)>& progress = nullptr);

}  // namespace gp::profile
