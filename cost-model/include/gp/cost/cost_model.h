// Per-operator compute time on one device. Two implementations behind one interface:
// AnalyticCostModel (roofline + efficiency curve + launch overhead, from a DeviceKind) and
// ProfiledCostModel (a ProfileDB, log-log interpolation, analytic fallback).
//
// Thread safety: const methods are safe to call concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gp/common/status.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/cluster.pb.h"
#include "graphpipe/v1/plan.pb.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::cost {

struct OpTime {
  double forward_us = 0;
  double backward_us = 0;
};

// Memory of one op per sample, as measured (see OpCost for the definitions).
struct OpMemory {
  double activation_bytes = 0;  // kept from forward until backward: outputs and saved scratch
  double workspace_bytes = 0;   // used during one call only
};

// What one optimizer step costs a device: `fixed_us` once per step, `per_tensor_us` for each
// parameter tensor it updates, and the bytes the updates stream at `bytes_per_s`
// (gp::cost::optimizer_step_us adds them up).
struct OptimizerStepCost {
  double fixed_us = 0;
  double per_tensor_us = 0;
  double bytes_per_s = 1;
  // Measured steps: the bandwidth at each measured size (bytes one update streamed, ascending).
  // A step over B bytes in all streams at the bandwidth measured at B (interpolated log-log,
  // the ends held): whether its state sits in a cache depends on the whole state, not on one
  // tensor. Unused (bytes_per_s) when `points` is 0.
  static constexpr int kMaxPoints = 8;
  int points = 0;
  std::array<double, kMaxPoints> point_bytes{};
  std::array<double, kMaxPoints> point_bytes_per_s{};
  // The bandwidth of a step streaming `bytes` in all.
  double bandwidth(double bytes) const;
};

// The analytic step: the device's memory bandwidth and one kernel launch.
OptimizerStepCost analytic_optimizer_step_cost(const graphpipe::v1::DeviceKind& device);

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Time of graph op `op_index` for a micro-batch of `samples` samples (>= 1) on one device.
  virtual OpTime op_time(const model::OpNode& op, int64_t samples) const = 0;
  // Measured memory of the op, when this model has a measurement of it (else the catalogue's
  // OpCost is the estimate).
  virtual std::optional<OpMemory> op_memory(const model::OpNode& /*op*/) const {
    return std::nullopt;
  }
  // A `kind` optimizer step on `device` (this model's device kind): the analytic step unless
  // the model has a measurement of it.
  virtual OptimizerStepCost optimizer_step_cost(const graphpipe::v1::DeviceKind& device,
                                                graphpipe::v1::OptimizerKind /*kind*/) const {
    return analytic_optimizer_step_cost(device);
  }
  virtual std::string_view name() const = 0;
};

// Roofline with an efficiency that grows with the work size:
//   t = kernels * launch_overhead + max(flops / (peak * eff(flops)), bytes / mem_bw)
// where eff(w) = eff_max * w / (w + w_half): small kernels reach a small fraction of peak, which
// is what makes larger micro-batches pay. Input ops cost nothing.
class AnalyticCostModel final : public CostModel {
 public:
  struct Params {
    double max_efficiency = 0.75;  // fraction of peak FLOP/s reached by large GEMMs
    // Kernel work (FLOPs) at which eff = max_efficiency / 2. 0 (the default): the work the
    // device does at peak in half_efficiency_us, so the curve scales with the device.
    double half_efficiency_flops = 0;
    double half_efficiency_us = 1.0;
    double memory_efficiency = 0.8;  // fraction of peak bandwidth reached by streaming kernels
  };
  AnalyticCostModel(const graphpipe::v1::DeviceKind& device, graphpipe::v1::Precision precision);
  AnalyticCostModel(const graphpipe::v1::DeviceKind& device, graphpipe::v1::Precision precision,
                    Params params);

  OpTime op_time(const model::OpNode& op, int64_t samples) const override;
  std::string_view name() const override { return "analytic"; }
  // Achieved fraction of peak for a kernel of `flops` work (for tests and reports).
  double efficiency(double flops) const;
  double peak_flops() const { return peak_flops_; }

 private:
  double kernel_time_us(double flops, double bytes, int kernels) const;

  graphpipe::v1::DeviceKind device_;
  double peak_flops_;
  Params params_;
  double byte_scale_ = 1.0;  // 0.5 with bf16 training: float tensors are half as wide
};

// Canonical signature of an op for the profile DB: type, sorted attributes and input specs,
// e.g. "linear|activation=relu,out_features=4096|[4096] float32".
std::string op_signature(const model::OpNode& op);

// Measured times from a ProfileDB for one device kind. Between measured micro-batch sizes the
// time is interpolated log-log; outside them it extrapolates from the nearest two (or scales
// linearly from a single point). Ops absent from the DB fall back to `fallback`, with one
// warning per signature naming the op. Optimizer steps use the DB's fit of the kind and
// optimizer (per tensor and per byte), else the fallback's (Adam for OPTIMIZER_KIND_UNSPECIFIED).
class ProfiledCostModel final : public CostModel {
 public:
  static Result<std::unique_ptr<ProfiledCostModel>> create(
      const graphpipe::v1::ProfileDB& db, std::string_view device_kind,
      std::shared_ptr<const CostModel> fallback);

  OpTime op_time(const model::OpNode& op, int64_t samples) const override;
  // The most bytes per sample over the measured micro-batch sizes; none for ops the profile does
  // not hold or holds without memory (profiles written before the profiler measured it).
  std::optional<OpMemory> op_memory(const model::OpNode& op) const override;
  OptimizerStepCost optimizer_step_cost(const graphpipe::v1::DeviceKind& device,
                                        graphpipe::v1::OptimizerKind kind) const override;
  std::string_view name() const override { return "profiled"; }
  // Number of distinct signatures answered by the fallback so far.
  int fallback_count() const;

 private:
  struct Impl;
  explicit ProfiledCostModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;

 public:
  ~ProfiledCostModel() override;
};

}  // namespace gp::cost
