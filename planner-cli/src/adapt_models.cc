#include "adapt_models.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "gp/cost/cluster.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/verify.h"
#include "gp/profile_db/profile_db.h"

namespace gp::plan_cli {
Result<AdaptModels> own_kind_models(const graphpipe::v1::Cluster& cluster,
                                    graphpipe::v1::Precision precision,
                                    const std::string& profile_path) {
  AdaptModels models;
  models.cluster = planner::without_measured_kinds(cluster);
  GP_RETURN_IF_ERROR(cost::validate_cluster(models.cluster).with_context("--plan: plan.cluster"));
  GP_ASSIGN_OR_RETURN(auto made, make_cost_models(models.cluster, precision, profile_path));
  models.compute =
      made.devices ? made.devices : std::make_shared<const cost::DeviceCostModels>(made.compute);
  models.comm = std::move(made.comm);
  models.profile_hash = std::move(made.profile_hash);
  return models;
}

Result<AdaptModels> measured_models(const graphpipe::v1::Cluster& measured, const AdaptModels& own,
                                    const std::vector<planner::RankSpeed>& speeds) {
  AdaptModels models;
  models.cluster = measured;
  std::map<std::string, std::shared_ptr<const cost::CostModel>> by_kind;
  for (const auto& name : cost::device_kind_names(measured)) {
    std::string base;
    int rank = -1;
    if (!planner::parse_measured_kind(name, &base, &rank)) {
      by_kind[name] = own.compute->shared_for_kind(name);
      continue;
    }
    auto it = std::find_if(speeds.begin(), speeds.end(),
                           [rank](const planner::RankSpeed& s) { return s.rank == rank; });
    if (it == speeds.end()) {
      return internal_error("measured kind '" + name + "' without a measured rank");
    }
    by_kind[name] = std::make_shared<const planner::ScaledCostModel>(
        own.compute->shared_for_kind(base), it->relative);
  }
  GP_ASSIGN_OR_RETURN(auto devices, cost::DeviceCostModels::create(measured, std::move(by_kind)));
  models.compute = std::make_shared<const cost::DeviceCostModels>(std::move(devices));
  // A measured kind changes no link and no rank's place: the own cluster's links (or the
  // profile's fits) price the transfers.
  models.comm = own.comm;
  models.profile_hash = own.profile_hash;
  return models;
}

Result<std::shared_ptr<const cost::CommModel>> with_measured_links(
    const graphpipe::v1::Cluster& cluster, const std::string& profile_path,
    const graphpipe::v1::ProfileDB& measured) {
  graphpipe::v1::ProfileDB links;
  if (!profile_path.empty()) {
    GP_ASSIGN_OR_RETURN(const auto profile, profile::read_profile(profile_path));
    *links.mutable_comm() = profile.comm();
  }
  for (const auto& fit : measured.comm()) *links.add_comm() = fit;  // later fits win
  return std::make_shared<const cost::CommModel>(cluster, links);
}

Result<sim::SimResult> simulate_with(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                     const AdaptModels& models) {
  const sim::Simulator simulator(
      *models.compute, *models.comm,
      {plan.training().optimizer(), plan.training().precision(), &models.compute->reference()});
  GP_ASSIGN_OR_RETURN(auto result, simulator.run(plan, graph));
  if (result.deadlocked) return internal_error("the plan deadlocks: " + result.deadlock_report());
  return result;
}

Result<graphpipe::v1::Plan> search_with(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                        const AdaptModels& models,
                                        const std::string& command_line) {
  PlanningSetup setup;
  GP_ASSIGN_OR_RETURN(auto copy, model::Graph::build(plan.model()));
  setup.graph = std::make_unique<model::Graph>(std::move(copy));
  setup.cluster = models.cluster;
  setup.training = plan.training();
  setup.compute = models.compute->shared_reference();
  setup.comm = models.comm;
  setup.device_costs = models.compute;
  setup.profile_hash = models.profile_hash;
  // The running plan's micro-batch size first (the losses then go on bit for bit); a cluster
  // that cannot take it gets the best plan of any size.
  auto searched =
      search_again(plan, setup, /*profile=*/"", command_line, /*keep_micro_batch=*/true);
  if (!searched.ok() || !searched->feasible) {
    searched = search_again(plan, setup, /*profile=*/"", command_line, /*keep_micro_batch=*/false);
  }
  GP_ASSIGN_OR_RETURN(auto result, std::move(searched));
  if (!result.feasible) {
    return failed_precondition("no feasible plan for '" + graph.model().name() +
                               "' on the measured cluster: " + result.infeasible_reason);
  }
  graphpipe::v1::Plan out = std::move(result.plan);
  // A plan on fewer devices than the cluster has names the devices it leaves out, so that each
  // rank runs on the device it was planned for (the search's cluster is renumbered densely).
  // (One whose idle devices sat between used ones names them already: compact_idle_ranks.)
  const int all = cost::num_devices(models.cluster);
  const int used = cost::num_devices(out.cluster());
  if (used < all && out.cluster().excluded_ranks_size() == models.cluster.excluded_ranks_size()) {
    std::vector<int> chosen;
    GP_RETURN_IF_ERROR(cost::select_devices(models.cluster, used, &chosen).status());
    if (!std::is_sorted(chosen.begin(), chosen.end())) {
      return internal_error("the devices chosen are not in physical order");
    }
    graphpipe::v1::Cluster kept = models.cluster;
    const std::set<int> keep(chosen.begin(), chosen.end());
    for (int r = 0; r < all; ++r) {
      if (!keep.count(r)) kept.add_excluded_ranks(cost::physical_device(models.cluster, r));
    }
    GP_RETURN_IF_ERROR(cost::validate_cluster(kept).with_context("the measured cluster"));
    *out.mutable_cluster() = kept;
    out.set_cluster_hash(model::message_hash(kept));
  }
  GP_ASSIGN_OR_RETURN(auto report, planner::verify_plan(out, *models.compute));
  if (!report.ok()) {
    return internal_error("the re-planned plan failed verification: " + report.problems[0]);
  }
  return out;
}

}  // namespace gp::plan_cli
