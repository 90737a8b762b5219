// Per-device compute costs for mixed clusters (Cluster.device_groups): one CostModel per device
// kind, looked up by the kind's name, so each rank's compute is priced with its own device.
//
// Entry points (the shape `graphpipe-plan adapt` and every other caller use):
//   * a homogeneous cluster, or every device priced alike: DeviceCostModels(model);
//   * a mixed cluster: DeviceCostModels::create(cluster, {{"A100-SXM4-80GB", a100_model},
//     {"V100-SXM2-16GB", v100_model}}) — one model per kind name of the cluster (any subclass of
//     CostModel: analytic, profiled, or a caller's own, e.g. measured times of one slow rank
//     whose kind is named "<base>/rank<R>");
//   * planner: put it in gp::plan_cli::PlanningSetup::device_costs (commands.h; setup.compute
//     stays the reference, device_costs->reference()), then run_search_for(opts, setup,
//     strategy) searches with it: gp::planner::SearchRequest::device_costs (search.h) carries it
//     into the search, which partitions with each kind as the reference, places the heaviest
//     stages on the fastest devices and simulates every candidate on the mixed cluster;
//   * simulation: gp::sim::Simulator(device_costs, comm, memory) prices each rank's stage with
//     device_costs.for_rank(plan.cluster(), rank); gp::planner::verify_plan has the same overload.
//
// Thread safety: const methods are safe to call concurrently (the models' own guarantee).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"

namespace gp::cost {

class DeviceCostModels {
 public:
  // Every device priced with `all` (non-null).
  explicit DeviceCostModels(std::shared_ptr<const CostModel> all);
  // One model per kind name of `cluster`'s usable devices (device_kind_names); an error names a
  // kind without a (non-null) model. Models of kinds the cluster does not have are kept too, so
  // that clusters selected from it later (select_devices) find theirs.
  static Result<DeviceCostModels> create(
      const Cluster& cluster, std::map<std::string, std::shared_ptr<const CostModel>> by_kind_name);

  // The model of a kind: the uniform model, or the one given for the name (the reference when
  // none was: call covers() first where a cluster comes from elsewhere).
  const CostModel& for_kind(std::string_view name) const;
  std::shared_ptr<const CostModel> shared_for_kind(std::string_view name) const;
  // The model of dense rank `rank` of `cluster` (device_of_rank).
  const CostModel& for_rank(const Cluster& cluster, int rank) const;
  // ... of the cluster this was created for (the uniform model for the uniform constructor).
  const CostModel& for_rank(int rank) const;
  // The fastest kind's model (device_speed): the one bounds and homogeneous callers use.
  const CostModel& reference() const { return *reference_; }
  std::shared_ptr<const CostModel> shared_reference() const { return reference_; }
  // One model for every device.
  bool uniform() const { return by_kind_.empty(); }
  // Ok when every usable device of `cluster` has a model; else an error naming the kind.
  Status covers(const Cluster& cluster) const;

 private:
  DeviceCostModels() = default;
  std::shared_ptr<const CostModel> reference_;
  std::map<std::string, std::shared_ptr<const CostModel>, std::less<>> by_kind_;
  Cluster cluster_;  // what create() was given; for_rank(int) reads it
};

}  // namespace gp::cost
