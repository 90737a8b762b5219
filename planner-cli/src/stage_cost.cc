#include "gp/planner/stage_cost.h"

#include <algorithm>
#include <numeric>

namespace gp::planner {

int log2_exact(int64_t v) {
  int k = 0;
  while ((int64_t{1} << k) < v) ++k;
  return k;
}

void StageAggregate::add(const StageAggregate& other) {
  levels = std::max(levels, other.levels);
  for (int i = 0; i < other.levels; ++i) compute_us[i] += other.compute_us[i];
  static_bytes += other.static_bytes;
  weight_bytes += other.weight_bytes;
  optimizer_bytes += other.optimizer_bytes;
  gradient_bytes += other.gradient_bytes;
  param_tensors += other.param_tensors;
  activation_bytes_per_sample += other.activation_bytes_per_sample;
  workspace_bytes_per_sample += other.workspace_bytes_per_sample;
  kernel_workspace_bytes_per_sample =
      std::max(kernel_workspace_bytes_per_sample, other.kernel_workspace_bytes_per_sample);
}

StageCostModel::StageCostModel(const model::Graph& graph, const UnitGraph& units,
                               const cost::CostModel& compute, const cost::CommModel& comm,
                               const cost::MemoryOptions& memory, int64_t mini_batch,
                               int64_t max_samples, const graphpipe::v1::DeviceKind* device)
    : mini_batch_(mini_batch),
      capacity_((device != nullptr ? *device : comm.cluster().device()).memory_capacity_bytes()),
      optimizer_cost_(compute.optimizer_step_cost(
          device != nullptr ? *device : comm.cluster().device(), memory.optimizer)),
      shard_optimizer_(memory.shard_optimizer) {
  // Tabulate the affine communication costs from two probes each.
  constexpr double kProbe1 = 1 << 20, kProbe2 = 1 << 21;
  const auto& cl = comm.cluster();
  const int peer = cl.devices_per_node() > 1 ? 1 : std::min(1, cl.num_nodes() - 1);
  const double p1 = comm.p2p_time_us(0, peer, static_cast<int64_t>(kProbe1));
  const double p2 = comm.p2p_time_us(0, peer, static_cast<int64_t>(kProbe2));
  p2p_beta_us_ = (p2 - p1) / (kProbe2 - kProbe1);
  p2p_alpha_us_ = p1 - p2p_beta_us_ * kProbe1;
  const int devices = std::max(1, cl.num_nodes() * cl.devices_per_node());
  allreduce_alpha_us_.assign(devices + 1, 0.0);
  allreduce_beta_us_.assign(devices + 1, 0.0);
  for (int d = 2; d <= devices; ++d) {
    std::vector<int> ranks(d);
    std::iota(ranks.begin(), ranks.end(), 0);
    const double a1 = comm.allreduce_time_us(ranks, static_cast<int64_t>(kProbe1));
    const double a2 = comm.allreduce_time_us(ranks, static_cast<int64_t>(kProbe2));
    allreduce_beta_us_[d] = (a2 - a1) / (kProbe2 - kProbe1);
    allreduce_alpha_us_[d] = a1 - allreduce_beta_us_[d] * kProbe1;
  }
  const int levels = std::min(log2_exact(max_samples) + 1, StageAggregate::kMaxLevels);
  units_.resize(units.num_units());
  for (int u = 0; u < units.num_units(); ++u) {
    StageAggregate& a = units_[u];
    a.levels = levels;
    for (int op : units.unit_ops[u]) {
      for (int l = 0; l < levels; ++l) {
        const cost::OpTime t = compute.op_time(graph.op(op), int64_t{1} << l);
        // Recomputing, each backward is preceded by the forward once more.
        a.compute_us[l] += t.forward_us * (memory.recompute ? 2 : 1) + t.backward_us;
      }
    }
    const auto& ops = units.unit_ops[u];
    const cost::MemoryBreakdown m = cost::stage_memory(graph, ops, 1, 1, 1, memory);
    a.static_bytes = m.weight_bytes + m.gradient_bytes + m.optimizer_bytes;
    a.weight_bytes = m.weight_bytes;
    a.optimizer_bytes = m.optimizer_bytes;
    int64_t params = 0;
    for (int op : ops) params += graph.op(op).cost.param_count;
    if (params > 0) state_bytes_per_param_ = m.optimizer_bytes / params;  // same for every unit
    a.activation_bytes_per_sample = m.activation_bytes;
    a.kernel_workspace_bytes_per_sample =
        cost::kernel_workspace_bytes_per_sample(graph, ops, memory);
    a.workspace_bytes_per_sample = m.workspace_bytes - a.kernel_workspace_bytes_per_sample;
    a.gradient_bytes = cost::stage_param_bytes(graph, ops, memory.precision);
    a.param_tensors = cost::stage_param_tensors(graph, ops);
  }
}

StageAggregate StageCostModel::aggregate(std::span<const int> units) const {
  StageAggregate a;
  for (int u : units) a.add(units_[u]);
  return a;
}

double StageCostModel::compute_us(const StageAggregate& stage, int64_t per_device) const {
  const int level = log2_exact(per_device);
  return level < stage.levels ? stage.compute_us[level] : 0;
}

double StageCostModel::p2p_us(int64_t boundary_bytes_per_sample, int64_t per_device) const {
  // A typical neighbour sits in the same node (placement keeps heavy edges inside nodes).
  if (boundary_bytes_per_sample <= 0) return 0;
  return p2p_alpha_us_ + p2p_beta_us_ * static_cast<double>(boundary_bytes_per_sample * per_device);
}

double StageCostModel::allreduce_us(const StageAggregate& stage, int d) const {
  if (d <= 1 || stage.gradient_bytes <= 0 || d >= static_cast<int>(allreduce_alpha_us_.size())) {
    return 0;
  }
  const double once =
      allreduce_alpha_us_[d] + allreduce_beta_us_[d] * static_cast<double>(stage.gradient_bytes);
  return shard_optimizer_ ? 2 * once : once;  // ZeRO-1: the parameter gather after the step
}

double StageCostModel::optimizer_us(const StageAggregate& stage, int d) const {
  cost::MemoryBreakdown state;
  state.weight_bytes = stage.weight_bytes;
  state.gradient_bytes = stage.gradient_bytes;
  state.optimizer_bytes = static_bytes(stage, d) - stage.weight_bytes - stage.gradient_bytes;
  return cost::optimizer_step_us(
      optimizer_cost_, cost::optimizer_step_state(state, d, shard_optimizer_),
      cost::optimizer_step_tensors(stage.param_tensors, d, shard_optimizer_));
}

double StageCostModel::tps_s(const StageAggregate& stage, int64_t b, int d,
                             int64_t boundary_bytes_per_sample) const {
  const int64_t per_device = b / d;
  const double per_micro_batch =
      std::max(compute_us(stage, per_device), p2p_us(boundary_bytes_per_sample, per_device));
  const double per_iteration = allreduce_us(stage, d) + optimizer_us(stage, d);
  return (per_micro_batch / static_cast<double>(b) +
          per_iteration / static_cast<double>(mini_batch_)) *
         1e-6;
}

StageTps StageCostModel::tps_parts(const StageAggregate& stage, int64_t b, int d,
                                   int64_t boundary_bytes_per_sample) const {
  const int64_t per_device = b / d;
  const double per_micro_batch =
      std::max(compute_us(stage, per_device), p2p_us(boundary_bytes_per_sample, per_device));
  const double per_sample = 1e-6 / static_cast<double>(mini_batch_);
  return {per_micro_batch / static_cast<double>(b) * 1e-6, allreduce_us(stage, d) * per_sample,
          optimizer_us(stage, d) * per_sample};
}

StageTime StageCostModel::iteration_time(const StageAggregate& stage, int64_t b, int d,
                                         int64_t boundary_bytes_per_sample) const {
  const int64_t per_device = b / d;
  const double micro_batches = static_cast<double>(mini_batch_) / static_cast<double>(b);
  StageTime t;
  t.compute_us = micro_batches * compute_us(stage, per_device);
  t.transfer_us = micro_batches * p2p_us(boundary_bytes_per_sample, per_device);
  t.allreduce_us = allreduce_us(stage, d);
  t.optimizer_us = optimizer_us(stage, d);
  return t;
}

int64_t StageCostModel::in_flight_limit(const StageAggregate& stage, int64_t b, int d) const {
  constexpr int64_t kCap = int64_t{1} << 40;
  const int64_t avail =
      capacity_ - static_bytes(stage, d) -
      (stage.workspace_bytes_per_sample + stage.kernel_workspace_bytes_per_sample) *
          ((b + d - 1) / d);
  if (avail < 0) return -1;
  if (stage.activation_bytes_per_sample <= 0) return kCap;
  // ceil(k / d) <= live  <=>  k <= live * d
  const int64_t live = avail / stage.activation_bytes_per_sample;
  return live >= kCap / d ? kCap : live * d;
}

}  // namespace gp::planner
