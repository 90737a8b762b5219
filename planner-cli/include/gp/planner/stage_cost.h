// The planners' shared estimate of a candidate stage: time per sample (TPS) and memory per
// device, from the cost model, the communication model and the memory model. Every strategy
// uses this same estimate; the simulator then judges the finished plans.
//
//   TPS(stage, b, d) = max(compute(b/d samples), p2p(boundary bytes of b/d samples)) / b
//                      + (allreduce(gradient bytes over d devices) + optimizer step) / mini_batch
// which is everything the simulator charges one replica of the stage per iteration, divided by
// the mini-batch: each micro-batch's forward and backward, the transfers in and out of the stage
// (asynchronous in the executor, so they overlap compute: max, not sum), and once per mini-batch
// the gradient all-reduce (blocking every replica) and the optimizer step
// (gp::cost::optimizer_step_us with the cost model's step, the simulator's own function). Memory
// per device follows gp::cost::stage_memory: weights + gradients + optimizer state + activations of
// ceil(k/d) in-flight samples + workspace of ceil(b/d) samples. Built with
// MemoryOptions::recompute, it prices every stage recomputing (Stage.recompute): the activations
// are the stage's boundary only, one micro-batch of the rest is workspace, and compute adds a
// second forward.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/memory_model.h"
#include "gp/planner/units.h"

namespace gp::planner {

// Additive summary of a set of units (sum of parts, except the kernel workspace which is a max).
// Summing units counts a tensor between two units of one stage as both units' boundary (kept
// gradient and input copy), so the estimate errs on the safe side; plans are checked with the
// exact gp::cost::stage_memory.
struct StageAggregate {
  // log2 of the largest micro-batch (kMaxMiniBatch = 2^24) + 1. A fixed array keeps the DPs'
  // inner loops, which build aggregates by the million, free of allocations.
  static constexpr int kMaxLevels = 25;
  std::array<double, kMaxLevels> compute_us{};  // forward + backward, indexed by log2(samples)
  int levels = 0;                               // entries of compute_us in use
  int64_t static_bytes = 0;                     // weights + gradients + optimizer state
  int64_t weight_bytes = 0;                     // the parts the optimizer step streams
  int64_t optimizer_bytes = 0;
  int64_t gradient_bytes = 0;  // all-reduce volume (= the gradients' bytes)
  int64_t param_tensors = 0;   // updates of one optimizer step
  int64_t activation_bytes_per_sample = 0;
  int64_t workspace_bytes_per_sample = 0;         // gradients inside the units, one call
  int64_t kernel_workspace_bytes_per_sample = 0;  // the largest kernel workspace, one call

  void add(const StageAggregate& other);
};

// What one replica of a stage spends in an iteration of `mini_batch / b` micro-batches, by part
// (the terms of TPS times the mini-batch), in microseconds.
struct StageTime {
  double compute_us = 0;    // forward and backward of every micro-batch
  double transfer_us = 0;   // the boundary transfers, overlapping compute
  double allreduce_us = 0;  // the gradient all-reduce across the replicas
  double optimizer_us = 0;  // the optimizer step over the stage's state
  double total_us() const {
    return (compute_us > transfer_us ? compute_us : transfer_us) + allreduce_us + optimizer_us;
  }
};

// TPS by part, per sample of the mini-batch: `body_s`, paid for every micro-batch (compute, or
// transfers where they take longer), and the stage's end-of-iteration step, paid once after its
// last backward pass: the gradient all-reduce and the optimizer step. tps_s = body_s +
// allreduce_s + optimizer_s (up to rounding).
struct StageTps {
  double body_s = 0;
  double allreduce_s = 0;
  double optimizer_s = 0;
  double step_s() const { return allreduce_s + optimizer_s; }
};

class StageCostModel {
 public:
  // `max_samples` bounds the micro-batch sizes that will be asked for (a power of two).
  // `device`: the kind whose memory and optimizer step price the stages (nullptr: the cluster's
  // `device`); a mixed cluster's search passes its reference kind.
  StageCostModel(const model::Graph& graph, const UnitGraph& units, const cost::CostModel& compute,
                 const cost::CommModel& comm, const cost::MemoryOptions& memory, int64_t mini_batch,
                 int64_t max_samples, const graphpipe::v1::DeviceKind* device = nullptr);

  const StageAggregate& unit(int u) const { return units_[u]; }
  StageAggregate aggregate(std::span<const int> units) const;

  // Seconds per sample; `boundary_bytes_per_sample` counts activations in and out of the stage.
  // b must be a power of two and a multiple of d.
  double tps_s(const StageAggregate& stage, int64_t b, int d,
               int64_t boundary_bytes_per_sample) const;
  StageTps tps_parts(const StageAggregate& stage, int64_t b, int d,
                     int64_t boundary_bytes_per_sample) const;
  // The same estimate by part, per iteration: tps_s * mini_batch = time.total_us() * 1e-6.
  StageTime iteration_time(const StageAggregate& stage, int64_t b, int d,
                           int64_t boundary_bytes_per_sample) const;
  // The once-per-iteration parts of TPS, in microseconds. Built with
  // MemoryOptions::shard_optimizer, a stage of d > 1 replicas is priced sharded (ZeRO-1): the
  // all-reduce part also holds the parameter gather (priced as a second all-reduce, as the
  // simulator does), the step streams 1/d of the state, and the memory holds ceil(params / d)
  // parameters' optimizer state.
  double allreduce_us(const StageAggregate& stage, int d) const;
  double optimizer_us(const StageAggregate& stage, int d = 1) const;
  // Weights, gradients and optimizer state per device of a stage of d replicas.
  int64_t static_bytes(const StageAggregate& stage, int d) const {
    if (!shard_optimizer_ || d <= 1 || state_bytes_per_param_ <= 0) return stage.static_bytes;
    const int64_t params = stage.optimizer_bytes / state_bytes_per_param_;
    return stage.static_bytes - stage.optimizer_bytes +
           (params + d - 1) / d * state_bytes_per_param_;
  }
  int64_t memory_bytes(const StageAggregate& stage, int64_t b, int d, int64_t in_flight) const {
    const int64_t live = (in_flight + d - 1) / d;
    const int64_t per_call = (b + d - 1) / d;
    return static_bytes(stage, d) + stage.activation_bytes_per_sample * live +
           (stage.workspace_bytes_per_sample + stage.kernel_workspace_bytes_per_sample) * per_call;
  }
  // The most samples in flight whose memory fits in the device (memory_bytes <= capacity), -1
  // when not even none do; capped at 2^40 (more than any plan keeps).
  int64_t in_flight_limit(const StageAggregate& stage, int64_t b, int d) const;
  int64_t capacity_bytes() const { return capacity_; }
  int64_t mini_batch() const { return mini_batch_; }

 private:
  // Forward + backward of b/d samples, and the transfers of its boundary bytes.
  double compute_us(const StageAggregate& stage, int64_t per_device) const;
  double p2p_us(int64_t boundary_bytes_per_sample, int64_t per_device) const;

  std::vector<StageAggregate> units_;
  int64_t mini_batch_;
  int64_t capacity_;
  cost::OptimizerStepCost optimizer_cost_;  // the device's step, from the cost model
  bool shard_optimizer_ = false;            // MemoryOptions::shard_optimizer
  int64_t state_bytes_per_param_ = 0;       // optimizer state (and bf16 master) bytes per parameter
  // Communication times are affine in the bytes (alpha-beta), so they are tabulated once:
  // t = alpha + beta * bytes, p2p to a typical neighbour and all-reduce over d devices.
  double p2p_alpha_us_ = 0, p2p_beta_us_ = 0;
  std::vector<double> allreduce_alpha_us_, allreduce_beta_us_;  // indexed by d
};

int log2_exact(int64_t power_of_two);

}  // namespace gp::planner
