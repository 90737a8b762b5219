// Per-device memory of a stage: weights, gradients, optimizer state, activations kept for
// backward for every in-flight sample, and the largest transient workspace.
#pragma once

#include <cstdint>
#include <span>

#include "gp/graph/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::cost {

struct MemoryBreakdown {
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;   // SGD 0, momentum 1x, Adam 2x fp32 params (+ fp32 master)
  int64_t activation_bytes = 0;  // kept activations of all in-flight samples on this device
  int64_t workspace_bytes = 0;   // largest transient per-op buffer (outputs + gradients)
  int64_t total() const {
    return weight_bytes + gradient_bytes + optimizer_bytes + activation_bytes + workspace_bytes;
  }
};

struct MemoryOptions {
  graphpipe::v1::OptimizerKind optimizer = graphpipe::v1::OPTIMIZER_KIND_ADAM;
  graphpipe::v1::Precision precision = graphpipe::v1::PRECISION_FP32;
};

// Weights and optimizer state are replicated on each of the stage's devices; activations and
// workspace scale with the samples one device holds (in_flight_samples / data_parallel and
// micro_batch / data_parallel, rounded up).
MemoryBreakdown stage_memory(const graph::Graph& graph, std::span<const int> op_indices,
                             int64_t micro_batch, int64_t in_flight_samples, int data_parallel,
                             const MemoryOptions& options);

// Bytes of parameters of the ops (at the training precision) — the gradient all-reduce volume.
int64_t stage_param_bytes(const graph::Graph& graph, std::span<const int> op_indices,
                          graphpipe::v1::Precision precision);

}  // namespace gp::cost
