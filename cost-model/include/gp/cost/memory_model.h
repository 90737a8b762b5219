// Per-device memory of a stage: weights, gradients, optimizer state, activations kept for
// backward for every in-flight sample, and the workspace of one call. The definition is the one
// the executor's StageRunner allocates (StageRunner::memory() reports the same five numbers for a
// stage at fp32 without relays; test/executor/stage_memory_test.cc holds them equal).
#pragma once

#include <cstdint>
#include <span>

#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::cost {

struct MemoryBreakdown {
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;  // SGD 0, momentum 1x, Adam 2x fp32 params (+ fp32 master)
  // Per in-flight sample: every tensor the stage reads or writes, the kernels' saved scratch
  // (OpCost::activation_bytes) and the gradients of tensors crossing the stage's boundary.
  // Recomputing (MemoryOptions::recompute): only the values and gradients of the tensors crossing
  // the boundary (the stage's inputs from other stages and its exports).
  int64_t activation_bytes = 0;
  // Per sample of one call: the gradients inside the stage (one backward at a time) and the
  // largest kernel workspace (OpCost::workspace_bytes). Recomputing, also the rest of one
  // micro-batch's activations, which the forward rerun before each backward writes again.
  int64_t workspace_bytes = 0;
  int64_t total() const {
    return weight_bytes + gradient_bytes + optimizer_bytes + activation_bytes + workspace_bytes;
  }
};

struct MemoryOptions {
  graphpipe::v1::OptimizerKind optimizer = graphpipe::v1::OPTIMIZER_KIND_ADAM;
  graphpipe::v1::Precision precision = graphpipe::v1::PRECISION_FP32;
  // When set, an op's measured bytes (CostModel::op_memory: a profile's kept and workspace bytes)
  // replace the catalogue's OpCost::activation_bytes and workspace_bytes.
  const CostModel* measured = nullptr;
  // The stage recomputes its activations (Stage.recompute): see MemoryBreakdown.
  bool recompute = false;
  // ZeRO-1 (Stage.shard_optimizer): with data_parallel = r > 1 replicas, each keeps the optimizer
  // state (and the bf16 fp32 master weights) of ceil(params / r) parameters, the slice the
  // executor allocates on every replica; weights and gradients stay whole.
  bool shard_optimizer = false;
};

// Weights and optimizer state are replicated on each of the stage's devices (the optimizer
// state sharded with MemoryOptions::shard_optimizer); activations and
// workspace scale with the samples one device holds (in_flight_samples / data_parallel and
// micro_batch / data_parallel, rounded up).
MemoryBreakdown stage_memory(const model::Graph& graph, std::span<const int> op_indices,
                             int64_t micro_batch, int64_t in_flight_samples, int data_parallel,
                             const MemoryOptions& options);

// Per sample of one call, the largest workspace one of the ops' kernels asks for (a part of
// MemoryBreakdown::workspace_bytes; the rest, the inner gradients, adds up over ops).
int64_t kernel_workspace_bytes_per_sample(const model::Graph& graph,
                                          std::span<const int> op_indices,
                                          const MemoryOptions& options);

// Bytes one optimizer step streams over a stage's state (weight, gradient and optimizer bytes of
// `state`; the rest is ignored): the weights and the optimizer state read and written, the
// gradients read.
double optimizer_step_bytes(const MemoryBreakdown& state);

// Time of one optimizer step over `state`, `tensors` parameter tensors (one update each), priced
// by `cost` (CostModel::optimizer_step_cost); 0 without weights (a plan steps only stages with
// parameters). The simulator charges it once per stage replica and iteration, and the planners'
// stage cost prices it with this same function.
double optimizer_step_us(const OptimizerStepCost& cost, const MemoryBreakdown& state,
                         int64_t tensors);

// Parameter tensors of the ops: the updates of one optimizer step.
int64_t stage_param_tensors(const model::Graph& graph, std::span<const int> op_indices);

// The state one replica's optimizer step streams (for optimizer_step_us): `m` itself, or with
// ZeRO-1 (`m.optimizer_bytes` already sharded by stage_memory) the weights and gradients of its
// ceil(params / data_parallel) slice only. Its tensors: stage_param_tensors, or with ZeRO-1 the
// pieces of them in the slice (optimizer_step_tensors).
MemoryBreakdown optimizer_step_state(const MemoryBreakdown& m, int data_parallel,
                                     bool shard_optimizer);
int64_t optimizer_step_tensors(int64_t tensors, int data_parallel, bool shard_optimizer);

// Bytes of parameters of the ops (at the training precision) — the gradient all-reduce volume.
int64_t stage_param_bytes(const model::Graph& graph, std::span<const int> op_indices,
                          graphpipe::v1::Precision precision);

}  // namespace gp::cost
